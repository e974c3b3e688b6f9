"""A LangGraph checkpointer whose checkpoints are ledger events (extra ``langgraph``).

``LedgerSaver(ledger)`` is a ``BaseCheckpointSaver`` (sync and async). Each thread is one
stream (``langgraph:<thread_id>``); each ``put`` appends one ``checkpoint.saved`` holding
the checkpoint's skeleton and only the channel values that step changed, and a list
value that extends what the channel held before (a chat's ``messages``) holds only its
new tail. So a thread grows by what each step adds, not by a snapshot of everything.
A reply a step adds to a list channel (a LangChain ``AIMessage`` whose ``usage_metadata``
and ``response_metadata`` say what was billed and by which model) is recorded with the
checkpoint: one ``usage.reported`` per reply, in the same append, the reply's id in
``metadata.extra.langgraph`` so a reply seen again (a channel stored whole, another saver
on the thread) is never billed twice.

``put_writes`` appends ``checkpoint.written``; ``delete_thread`` and ``delete_for_runs``
append ``checkpoints.cleared`` (the log is append-only: the history stays there for
replay, and reads skip what was cleared); ``copy_thread`` is ``Ledger.fork``.

Reads fold the thread's stream (``get_tuple``, ``list``); ``list`` without a thread reads
every ``langgraph:`` stream of the log.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ctxledger.integrations import MissingExtra

try:
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised in a process without the extra
    raise MissingExtra("langgraph", "langgraph", exc.name) from None

from ctxledger._ledger import Ledger
from ctxledger.integrations._usage import USAGE_EVENT, usage_event_of
from ctxledger.store.errors import BatchEventError, ConcurrencyError, EventValidationError
from ctxledger.store.records import AppendResult, RecordedEvent
from ctxledger.store.strict import json_value_ok

__all__ = ["STREAM_PREFIX", "LedgerSaver"]

# ``list`` is a method of the saver, so the class body cannot name the builtin type.
_Events = list[RecordedEvent]

_CACHED_THREADS = 64
"""Threads whose fold a saver keeps (the most recently read)."""

STREAM_PREFIX = "langgraph:"
"""A thread's stream is this prefix plus its ``thread_id``."""

SAVED, WRITTEN, CLEARED = "checkpoint.saved", "checkpoint.written", "checkpoints.cleared"
_EXTRA = "langgraph"


class LedgerSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over a ``Ledger``: checkpoints are events, one stream per
    thread, each holding only what its step changed.

    ``serde`` (default: LangGraph's) serializes what is not plain JSON; JSON values are
    stored as JSON, so the events stay readable.
    """

    def __init__(self, ledger: Ledger, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.ledger = ledger
        self._lock = threading.Lock()
        # Per stream, what this saver last stored for each list channel, so the next put
        # can store only the tail. Only used while the stream is at the version we left
        # it at (checked by the append), so another writer never gets a wrong delta.
        self._tails: dict[str, _StreamTail] = {}
        # Per stream, its fold as of the last read: the next read folds only the events
        # appended since (a step's get_tuple costs what the step added, not the thread).
        self._reads: dict[str, _Thread] = {}
        # Per stream, the ids of the replies whose usage is recorded (read from the log
        # the first time a reply with usage comes, then kept up to date).
        self._billed: dict[str, set[str]] = {}

    @classmethod
    @contextmanager
    def from_url(cls, url: str | None = None, **kwargs: Any) -> Iterator[LedgerSaver]:
        """A saver over ``Ledger.open(url)`` (as ``SqliteSaver.from_conn_string``), the
        ledger closed on leaving; ``kwargs`` go to the saver."""
        ledger = Ledger.open(url, load_vocabulary=False)
        try:
            yield cls(ledger, **kwargs)
        finally:
            ledger.close()

    def _thread(self, stream: str) -> _Thread:
        """The stream folded up to its head; call with the lock held."""
        thread = self._reads.pop(stream, None) or _Thread(self)
        thread.extend(self.ledger.log.read_stream(stream, thread.version + 1))
        self._reads[stream] = thread
        while len(self._reads) > _CACHED_THREADS:
            del self._reads[next(iter(self._reads))]
        return thread

    # -- writing ------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        """Append the checkpoint as one ``checkpoint.saved``: its skeleton and the values
        of the channels in ``new_versions`` (a list that extends its channel's last value
        as only its tail)."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        stream = STREAM_PREFIX + thread_id
        skeleton = {key: self._encode(value) for key, value in checkpoint.items()
                    if key not in ("channel_values", "id")}
        data: dict[str, Any] = {
            "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"], "checkpoint": skeleton,
            "metadata": self._encode(get_checkpoint_metadata(config, metadata))}
        parent = configurable.get("checkpoint_id")
        if parent is not None:
            data["parent_checkpoint_id"] = str(parent)
        values = checkpoint["channel_values"]
        # In channel order: the event does not depend on the order LangGraph built it in.
        changed = sorted((channel, version) for channel, version in new_versions.items()
                         if channel in values)
        with self._lock:
            known = self._tails.get(stream)
            entries = []
            delta = False
            for channel, version in changed:
                entry = self._entry(known, ns, channel, version, values[channel])
                delta = delta or "extends" in entry
                entries.append(entry)
            data["values"] = entries
            event = {"type": SAVED, "data": data}
            replies = [reply for (channel, _), entry in zip(changed, entries, strict=True)
                       for reply in _replies(values[channel], _tail_start(known, ns, channel,
                                                                          entry))]
            try:
                billed = self._usage_events(stream, replies, checkpoint["id"])
                result = self._append(stream, [event, *billed], billed,
                                      known.version if delta and known else None)
            except ConcurrencyError:
                # Another writer moved the stream: store the values whole, and read again
                # which replies it recorded.
                data["values"] = [self._entry(None, ns, c, v, values[c]) for c, v in changed]
                self._billed.pop(stream, None)
                billed = self._usage_events(stream, replies, checkpoint["id"])
                result = self._append(stream, [event, *billed], billed, None)
                known = None
            found = self._billed.get(stream)
            if found is not None:
                found.update(_reply_id(usage) for usage in billed)
            tail = known if known is not None else _StreamTail()
            tail.version = result.stream_version
            for channel, version in changed:
                value = values[channel]
                if type(value) is list:
                    tail.lists[(ns, channel)] = (version, list(value))
                else:
                    tail.lists.pop((ns, channel), None)
            self._tails[stream] = tail
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def _append(self, stream: str, events: list[dict[str, Any]],
                billed: Sequence[dict[str, Any]], expected: int | None) -> AppendResult:
        """Append a checkpoint with its replies' usage; a usage report the log refuses
        is one line naming the reply, and nothing is written."""
        try:
            # One event alone takes the single-event path (no batch to build).
            return self.ledger.append(stream, events if billed else events[0],
                                      expected_version=expected)
        except BatchEventError as exc:
            if exc.index == 0:
                raise
            reason = exc.reason.removeprefix(f"{USAGE_EVENT}: ").removeprefix("data: ")
            raise EventValidationError(
                f"reply {_reply_id(billed[exc.index - 1])!r}: usage: {reason}") from None

    def _usage_events(self, stream: str, replies: Sequence[tuple[AIMessage, bool]],
                      checkpoint_id: str) -> list[dict[str, Any]]:
        """The ``usage.reported`` of each reply whose usage the thread has not recorded:
        by its id, or (a reply without one) when it is in a list's new tail only."""
        events: list[dict[str, Any]] = []
        seen: set[str] = set()
        for reply, in_tail in replies:
            usage = usage_event_of(reply)
            if usage is None or (reply.id is None and not in_tail):
                continue
            if reply.id is not None:
                if reply.id in seen or reply.id in self._billed_ids(stream):
                    continue
                seen.add(reply.id)
            usage["metadata"] = {"extra": {_EXTRA: {"message_id": reply.id,
                                                    "checkpoint_id": checkpoint_id}}}
            events.append(usage)
        return events

    def _billed_ids(self, stream: str) -> set[str]:
        """The ids of the replies whose usage ``stream`` records; call with the lock held."""
        found = self._billed.get(stream)
        if found is None:
            found = self._billed[stream] = {
                _reply_id({"metadata": event.metadata})
                for event in self.ledger.log.read_stream(stream, 1)
                if event.type == USAGE_EVENT}
            found.discard("")
        return found

    def _entry(self, known: _StreamTail | None, ns: str, channel: str, version: Any,
               value: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"channel": channel, "version": version}
        before = known.lists.get((ns, channel)) if known is not None else None
        if (before is not None and type(value) is list and before[0] != version
                and _extends(value, before[1])):
            entry["extends"] = before[0]
            entry["tail"] = self._encode(value[len(before[1]):])
        else:
            entry["value"] = self._encode(value)
        return entry

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Append a task's writes against the config's checkpoint (``checkpoint.written``);
        a write already stored for the same task and index is kept, as LangGraph's own
        savers do, except the special channels (errors, interrupts), which replace."""
        if not writes:
            return
        configurable = config["configurable"]
        stream = STREAM_PREFIX + str(configurable["thread_id"])
        data = {"checkpoint_ns": str(configurable.get("checkpoint_ns", "")),
                "checkpoint_id": str(configurable["checkpoint_id"]), "task_id": task_id,
                "task_path": task_path,
                "writes": [{"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel,
                            "value": self._encode(value)}
                           for idx, (channel, value) in enumerate(writes)]}
        with self._lock:
            known = self._tails.get(stream)
            result = self.ledger.append(stream, {"type": WRITTEN, "data": data})
            if known is not None and known.version == result.stream_version - 1:
                known.version = result.stream_version

    def delete_thread(self, thread_id: str) -> None:
        """Clear the thread: one ``checkpoints.cleared`` (nothing when it has no events)."""
        stream = STREAM_PREFIX + str(thread_id)
        with self._lock:
            self._tails.pop(stream, None)
            if self.ledger.log.stream_version(stream) > 0:
                self.ledger.append(stream, {"type": CLEARED, "data": {}})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Clear the checkpoints (and their writes) whose metadata names one of
        ``run_ids``: one ``checkpoints.cleared`` on each thread that has some."""
        wanted = sorted({str(run) for run in run_ids})
        if not wanted:
            return
        for stream, events in sorted(self._all_threads().items()):
            thread = _Thread(self)
            thread.extend(events)
            hit = sorted({run for run in thread.run_ids() if run in wanted})
            if hit:
                with self._lock:
                    self._tails.pop(stream, None)
                    self.ledger.append(stream, {"type": CLEARED, "data": {"run_ids": hit}})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork the source thread's stream into the target's (``Ledger.fork``): every
        checkpoint and write, with ``forked_from`` in each copy's metadata."""
        source = STREAM_PREFIX + str(source_thread_id)
        if self.ledger.log.stream_version(source) == 0:
            return
        self.ledger.fork(source, STREAM_PREFIX + str(target_thread_id), self.ledger.head())

    # -- reading ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint the config names (its ``checkpoint_id``), else the thread's
        latest in its namespace; None when there is none."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        wanted = get_checkpoint_id(config)
        with self._lock:
            thread = self._thread(STREAM_PREFIX + thread_id)
            if wanted is None:
                ids = thread.ids(ns)
                if not ids:
                    return None
                wanted = ids[-1]
            elif wanted not in thread.saved.get(ns, {}):
                return None
            return thread.tuple(thread_id, ns, str(wanted))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id, as LangGraph's savers order them): of the
        config's thread (and namespace, and id when given), or of every thread; only
        those before ``before`` and whose metadata holds ``filter``; at most ``limit``."""
        if config is not None:
            thread_id = str(config["configurable"]["thread_id"])
            threads = {STREAM_PREFIX + thread_id: self.ledger.events(STREAM_PREFIX + thread_id)}
            ns_wanted = config["configurable"].get("checkpoint_ns")
            id_wanted = get_checkpoint_id(config)
        else:
            threads = self._all_threads()
            ns_wanted = id_wanted = None
        before_id = get_checkpoint_id(before) if before is not None else None
        left = limit
        for stream in sorted(threads):
            thread = _Thread(self)
            thread.extend(threads[stream])
            thread_id = stream.removeprefix(STREAM_PREFIX)
            found = [(checkpoint_id, ns) for ns in sorted(thread.saved)
                     if ns_wanted is None or ns == ns_wanted for checkpoint_id in thread.ids(ns)]
            # Newest first by id; the namespace breaks a tie.
            for checkpoint_id, ns in sorted(found, reverse=True):
                if id_wanted is not None and checkpoint_id != id_wanted:
                    continue
                if before_id is not None and checkpoint_id >= before_id:
                    continue
                if filter and not all(thread.metadata(ns, checkpoint_id).get(key) == value
                                      for key, value in filter.items()):
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield thread.tuple(thread_id, ns, checkpoint_id)

    def _all_threads(self) -> dict[str, _Events]:
        threads: dict[str, _Events] = {}
        for event in self.ledger.events():
            if event.stream_id.startswith(STREAM_PREFIX):
                threads.setdefault(event.stream_id, []).append(event)
        return threads

    # -- async: the sync methods in a worker thread ---------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple`` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """``list`` in a worker thread."""
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions
                   ) -> RunnableConfig:
        """``put`` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        """``put_writes`` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``delete_for_runs`` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread`` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    # -- values -------------------------------------------------------------------------

    def _encode(self, value: Any) -> dict[str, Any]:
        # JSON stays JSON (readable in the log); anything else goes through the serde.
        if json_value_ok(value):
            return {"json": value}
        kind, blob = self.serde.dumps_typed(value)
        return {"serde": kind, "b64": base64.b64encode(blob).decode("ascii")}

    def _decode(self, stored: Mapping[str, Any]) -> Any:
        if "json" in stored:
            return stored["json"]
        return self.serde.loads_typed((stored["serde"], base64.b64decode(stored["b64"])))


def _tail_start(known: _StreamTail | None, ns: str, channel: str,
                entry: Mapping[str, Any]) -> int | None:
    """Where the new tail of a list channel's value starts, when the put stores only its
    tail (None: the value is stored whole)."""
    if "extends" not in entry or known is None:
        return None
    return len(known.lists[(ns, channel)][1])


def _replies(value: Any, start: int | None) -> list[tuple[AIMessage, bool]]:
    """The LangChain replies of a channel's value from ``start`` on (None: all of it),
    each with whether it is in a new tail."""
    if type(value) is not list:
        return []
    items = value if start is None else value[start:]
    return [(item, start is not None) for item in items if isinstance(item, AIMessage)]


def _reply_id(event: Mapping[str, Any]) -> str:
    """The reply id a ``usage.reported`` of this adapter names ("" for none)."""
    found = event.get("metadata", {}).get("extra", {}).get(_EXTRA, {}).get("message_id")
    return found if isinstance(found, str) else ""


@dataclass
class _StreamTail:
    version: int = 0
    lists: dict[tuple[str, str], tuple[Any, list[Any]]] = field(default_factory=dict)


def _extends(value: list[Any], before: list[Any]) -> bool:
    """``value`` starts with ``before`` (the same objects, or equal ones) and is longer."""
    if len(value) <= len(before):
        return False
    return all(new is old or new == old for new, old in zip(value, before, strict=False))


@dataclass
class _Thread:
    """A thread's stream folded: checkpoints, value entries and writes that still count."""

    saver: LedgerSaver
    saved: dict[str, dict[str, tuple[int, Mapping[str, Any]]]] = field(default_factory=dict)
    entries: dict[tuple[str, str, Any], list[tuple[int, Mapping[str, Any]]]] = field(
        default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Any]]] = field(
        default_factory=dict)
    version: int = 0
    """The stream version folded up to."""
    _values: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    _metadata: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def extend(self, events: Sequence[RecordedEvent]) -> None:
        """Fold ``events``, the stream's next ones, in."""
        thread = self
        for event in events:
            seq = thread.version = event.stream_version
            data = event.data
            if event.type == SAVED:
                ns = data["checkpoint_ns"]
                thread.saved.setdefault(ns, {})[data["checkpoint_id"]] = (seq, data)
                thread._metadata.pop((ns, data["checkpoint_id"]), None)
                for entry in data["values"]:
                    key = (ns, entry["channel"], _hashable(entry["version"]))
                    thread.entries.setdefault(key, []).append((seq, entry))
            elif event.type == WRITTEN:
                kept = thread.writes.setdefault(
                    (data["checkpoint_ns"], data["checkpoint_id"]), {})
                for write in data["writes"]:
                    task_key = (str(data["task_id"]), int(write["idx"]))
                    if task_key[1] >= 0 and task_key in kept:
                        continue
                    kept[task_key] = (data["task_id"], write["channel"], write["value"])
            elif event.type == CLEARED:
                thread.clear(data.get("run_ids"))

    def clear(self, run_ids: Sequence[str] | None) -> None:
        if run_ids is None:
            # Entries go too: nothing after a full clear may extend them.
            self.saved.clear()
            self.entries.clear()
            self.writes.clear()
            self._values.clear()
            self._metadata.clear()
            return
        runs = set(run_ids)
        for ns, checkpoints in self.saved.items():
            for checkpoint_id in [c for c in checkpoints
                                  if self.metadata(ns, c).get("run_id") in runs]:
                del checkpoints[checkpoint_id]
                self.writes.pop((ns, checkpoint_id), None)

    def run_ids(self) -> set[str]:
        return {str(run) for ns, checkpoints in self.saved.items() for c in checkpoints
                if (run := self.metadata(ns, c).get("run_id")) is not None}

    def ids(self, ns: str) -> list[str]:
        return sorted(self.saved.get(ns, {}))

    def metadata(self, ns: str, checkpoint_id: str) -> dict[str, Any]:
        found = self._metadata.get((ns, checkpoint_id))
        if found is None:
            found = self._metadata[(ns, checkpoint_id)] = self.saver._decode(
                self.saved[ns][checkpoint_id][1]["metadata"])
        return found

    def value(self, ns: str, channel: str, version: Any, at: int) -> tuple[bool, Any]:
        """The channel's value at ``version`` as of event ``at``: the latest entry for it
        there, its tails joined onto the value it extends."""
        chain: list[Any] = []
        key = (ns, channel, _hashable(version))
        while True:
            candidates = [(seq, entry) for seq, entry in self.entries.get(key, ())
                          if seq <= at]
            if not candidates:
                return False, None
            seq, entry = candidates[-1]
            memo = (ns, channel, seq)
            if memo in self._values:
                base = self._values[memo]
                break
            if "value" in entry:
                base = self._values[memo] = self.saver._decode(entry["value"])
                break
            chain.append((memo, entry))
            key, at = (ns, channel, _hashable(entry["extends"])), seq
        value = base
        for memo, entry in reversed(chain):
            value = [*value, *self.saver._decode(entry["tail"])]
            self._values[memo] = value
        return True, value

    def tuple(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple:
        seq, data = self.saved[ns][checkpoint_id]
        decode = self.saver._decode
        checkpoint: dict[str, Any] = {key: decode(value)
                                      for key, value in data["checkpoint"].items()}
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            found, value = self.value(ns, channel, version, seq)
            if found:
                # The fold keeps its lists for the next read: hand out copies.
                values[channel] = list(value) if type(value) is list else value
        checkpoint["id"] = checkpoint_id
        checkpoint["channel_values"] = values
        parent = data.get("parent_checkpoint_id")
        writes = self.writes.get((ns, checkpoint_id), {})
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self.metadata(ns, checkpoint_id),  # type: ignore[arg-type]
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                             "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=[(task, channel, decode(value))
                            for _, (task, channel, value) in sorted(writes.items())])


def _hashable(version: Any) -> Any:
    return version if isinstance(version, str | int | float) else repr(version)
