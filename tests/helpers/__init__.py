"""Shared helpers for the event-log tests: assertions, table dumps, legacy rows, databases.

``writer.py`` is not imported: the concurrency and crash tests run it as a child process
(``python tests/helpers/writer.py URL STREAM ...``).
"""
