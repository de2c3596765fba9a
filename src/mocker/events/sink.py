"""In-process KV-event sinks (docs/live.md §4.1, docs/live.md §4.2).

Every sink implements ``KvEventSink``: ``publish(batch)`` is called from the engine's pass loop and
must return promptly; ``close()`` is idempotent.  ``FanoutSink`` is the one the live layer wires
in front of the others: a failing sink never raises into the pass loop.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .kv import KvEvent, KvEventBatch, KvEventSink

__all__ = ["SinkClosedError", "ListSink", "CallbackSink", "FanoutSink"]

log = logging.getLogger(__name__)


class SinkClosedError(RuntimeError):
    """``publish`` was called on a sink after ``close()``."""


class ListSink:
    """Collects every batch in ``batches`` (tests, debugging).  Accepts batches even after close."""

    def __init__(self) -> None:
        self.batches: list[KvEventBatch] = []
        self.closed = False

    def publish(self, batch: KvEventBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        self.closed = True

    @property
    def events(self) -> list[KvEvent]:
        """All events of all batches, flattened in publication order."""
        return [event for batch in self.batches for event in batch.events]


class CallbackSink:
    """Calls ``fn(batch)`` for each batch, and ``on_close()`` (if given) once on close.

    ``fn`` runs on the pass loop: it must not block.  After close, ``publish`` raises
    ``SinkClosedError``.
    """

    def __init__(self, fn: Callable[[KvEventBatch], object],
                 on_close: Callable[[], object] | None = None) -> None:
        self._fn = fn
        self._on_close = on_close
        self.closed = False

    def publish(self, batch: KvEventBatch) -> None:
        if self.closed:
            raise SinkClosedError("KV event callback sink is closed")
        self._fn(batch)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._on_close is not None:
            self._on_close()


class FanoutSink:
    """Forwards each batch to every sink, in order; never raises into the caller.

    A sink whose ``publish`` raises is counted (``failures[i]`` per sink, ``failed_batches`` per
    batch with at least one failure) and logged with its traceback on its first failure only;
    later batches are still offered to it (docs/live.md §4.2, last bullet), so a sink that recovers
    keeps receiving.  ``close()`` closes every sink, likewise swallowing (and logging) errors.
    """

    def __init__(self, sinks: Iterable[KvEventSink]) -> None:
        self.sinks: tuple[KvEventSink, ...] = tuple(sinks)
        self.failures: list[int] = [0] * len(self.sinks)
        self.failed_batches = 0
        self.closed = False

    def publish(self, batch: KvEventBatch) -> None:
        failed = False
        for i, sink in enumerate(self.sinks):
            try:
                sink.publish(batch)
            except Exception:
                failed = True
                self.failures[i] += 1
                if self.failures[i] == 1:
                    log.exception("KV event sink %d (%s) failed; further failures are only counted",
                                  i, type(sink).__name__)
        if failed:
            self.failed_batches += 1

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for i, sink in enumerate(self.sinks):
            try:
                sink.close()
            except Exception:
                log.exception("closing KV event sink %d (%s) failed", i, type(sink).__name__)
