"""``python -m ctxledger.cli``: the command line, as the ``ctxledger`` script runs it."""

from ctxledger.cli._app import main

main()
