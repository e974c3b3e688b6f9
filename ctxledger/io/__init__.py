"""Events in and out: JSONL input decoded and validated line by line, ``import`` and
``export`` of multi-stream logs, and the example sessions' loader."""
