"""``python -m ctxledger.cli``: the command line, as the ``ctxledger`` script runs it."""

from ctxledger.cli import main

if __name__ == "__main__":  # importing the module (as a walk over the package does) runs nothing
    main()
