"""Events in and out: JSONL input decoded and validated line by line, ``import`` and
``export`` of multi-stream logs, the example sessions' loader, and character card and
lorebook files (JSON, PNG) read for ``card.set`` and ``lorebook.set``."""
