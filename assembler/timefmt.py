"""Relative times ("3 hours ago"), computed from an explicit ``now`` (never the clock)."""

from __future__ import annotations

from datetime import datetime, timedelta


def relative_time(then: datetime, now: datetime) -> str:
    """How long before ``now`` ``then`` was, in Laminark's wording.

    just now (under a minute, or in the future), N minute(s) ago, N hour(s) ago,
    yesterday, N days ago, N week(s) ago. Units are floored.
    """
    elapsed = now - then
    if elapsed < timedelta(0):
        return "just now"
    seconds = int(elapsed.total_seconds())
    minutes = seconds // 60
    hours = minutes // 60
    days = hours // 24
    weeks = days // 7
    if minutes < 1:
        return "just now"
    if minutes == 1:
        return "1 minute ago"
    if minutes < 60:
        return f"{minutes} minutes ago"
    if hours == 1:
        return "1 hour ago"
    if hours < 24:
        return f"{hours} hours ago"
    if days == 1:
        return "yesterday"
    if days < 7:
        return f"{days} days ago"
    if weeks == 1:
        return "1 week ago"
    return f"{weeks} weeks ago"
