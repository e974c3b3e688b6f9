"""Presentation for the CLI: JSON-ready records, rich tables and views.

The shared records and tables are here (``ctxledger.render._common``); the views of
assemblies, time travel and usage are in their own modules, which load rich.
"""

from ctxledger.render._common import (
    STREAM_CAP,
    EventsLayout,
    append_record,
    dumps,
    event_record,
    events_table,
    info_table,
    state_table,
    status_record,
    status_table,
    verify_record,
    verify_view,
)

__all__ = ["STREAM_CAP", "EventsLayout", "append_record", "dumps", "event_record",
           "events_table", "info_table", "state_table", "status_record", "status_table",
           "verify_record", "verify_view"]
