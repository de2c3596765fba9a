"""Live-mode metrics: scheduler snapshots, forward-pass metrics (FPM), native Prometheus families.

Three consumers, three shapes (docs/live.md §5):

- ``MockerMetrics``: the per-rank scheduler snapshot the engine publishes at every pass boundary
  (a latest-value "watch"); the live layer feeds it to ``PrometheusMetrics.update``.
- ``ForwardPassSnapshot`` + ``encode_fpm`` + ``FpmPublisher``: one snapshot per rank per forward pass,
  serialized as the msgpack map Dynamo's planner reads on topic ``forward-pass-metrics``, with a
  zeroed heartbeat when a rank is idle.
- ``PrometheusMetrics``: the engine-native scrape surface (``vllm:*`` / ``trtllm:*`` / ``sglang:*``),
  so dashboards built for the real engines work unchanged against the mocker.

Only ``FpmPublisher`` touches asyncio; everything else is plain, synchronous and thread-safe enough
for a scrape from another thread.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

try:
    import msgpack
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.utils import floatToGoString
except ModuleNotFoundError as _e:     # pragma: no cover - depends on the environment
    from mocker.extras import LIVE_MODULES, missing_extra
    if _e.name not in LIVE_MODULES:
        raise
    raise missing_extra("mocker.events.metrics", _e) from _e

__all__ = [
    "MockerMetrics",
    "ForwardPassSnapshot",
    "encode_fpm",
    "FPM_TOPIC",
    "FPM_VERSION",
    "FpmSinkFn",
    "FpmPublisher",
    "heartbeat_interval_from_env",
    "PrometheusMetrics",
    "RequestTimer",
    "VLLM_TTFT_BUCKETS",
    "VLLM_ITL_BUCKETS",
    "VLLM_E2E_BUCKETS",
    "SGLANG_TTFT_BUCKETS",
    "SGLANG_ITL_BUCKETS",
    "SGLANG_E2E_BUCKETS",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# docs/live.md §5.1 scheduler snapshot
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MockerMetrics:
    """One rank's scheduler state at a pass boundary (field order = the reference's ``from_parts``)."""
    dp_rank: int
    active_decode_blocks: int
    total_blocks: int
    running_requests: int = 0
    waiting_requests: int = 0
    vllm_preemptions_total: int = 0       # cumulative since engine start (may be reset by the core)
    sglang_cache_hit_tokens: int = 0      # most recent pass that had prefill tokens
    sglang_cache_total_tokens: int = 0

    @property
    def gpu_cache_usage_perc(self) -> float:
        """``active_decode_blocks / total_blocks`` (a fraction, despite the name); 0 for an empty pool."""
        if self.total_blocks == 0:
            return 0.0
        return self.active_decode_blocks / self.total_blocks

    @classmethod
    def initial(cls, dp_rank: int, total_blocks: int) -> "MockerMetrics":
        """The value a rank's watch holds before its first pass."""
        return cls(dp_rank, 0, total_blocks)


# --------------------------------------------------------------------------------------------------
# docs/live.md §5.2 forward-pass metrics
# --------------------------------------------------------------------------------------------------

FPM_TOPIC = "forward-pass-metrics"
FPM_VERSION = 1
DEFAULT_HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_ENV = "DYN_FPM_HEARTBEAT_INTERVAL_MS"
_MAX_HEARTBEAT_INTERVAL_MS = 300_000


@dataclass(frozen=True, slots=True)
class ForwardPassSnapshot:
    """What one rank did in one forward pass, and what it left queued."""
    # scheduled this pass
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0
    # still queued after the pass
    num_queued_prefill: int = 0
    sum_queued_prefill_tokens: int = 0
    var_queued_prefill_length: float = 0.0
    num_queued_decode: int = 0
    sum_queued_decode_kv_tokens: int = 0
    var_queued_decode_kv_tokens: float = 0.0
    # modeled pass duration (0.0 on an idle heartbeat)
    wall_time_secs: float = 0.0

    @classmethod
    def zero(cls) -> "ForwardPassSnapshot":
        """The idle heartbeat payload."""
        return _ZERO_SNAPSHOT


_ZERO_SNAPSHOT = ForwardPassSnapshot()


def encode_fpm(worker_id: str, dp_rank: int, counter_id: int, snap: ForwardPassSnapshot) -> bytes:
    """Serialize one snapshot as Dynamo's ``ForwardPassMetrics`` msgpack map (docs/live.md §5.2).

    Keys are strings (a map, not an array), integers stay integers and floats are float64, so
    a msgspec ``Struct`` decoder on the consumer side accepts it.  The queued sub-map reuses the
    scheduled names (``num_prefill_requests`` ...), as the consumer schema does.
    """
    payload = {
        "version": FPM_VERSION,
        "worker_id": str(worker_id),
        "dp_rank": int(dp_rank),
        "counter_id": int(counter_id),
        "wall_time": float(snap.wall_time_secs),
        "scheduled_requests": {
            "num_prefill_requests": int(snap.num_prefill_requests),
            "sum_prefill_tokens": int(snap.sum_prefill_tokens),
            "var_prefill_length": float(snap.var_prefill_length),
            "sum_prefill_kv_tokens": int(snap.sum_prefill_kv_tokens),
            "num_decode_requests": int(snap.num_decode_requests),
            "sum_decode_kv_tokens": int(snap.sum_decode_kv_tokens),
            "var_decode_kv_tokens": float(snap.var_decode_kv_tokens),
        },
        "queued_requests": {
            "num_prefill_requests": int(snap.num_queued_prefill),
            "sum_prefill_tokens": int(snap.sum_queued_prefill_tokens),
            "var_prefill_length": float(snap.var_queued_prefill_length),
            "num_decode_requests": int(snap.num_queued_decode),
            "sum_decode_kv_tokens": int(snap.sum_queued_decode_kv_tokens),
            "var_decode_kv_tokens": float(snap.var_queued_decode_kv_tokens),
        },
    }
    return msgpack.packb(payload, use_bin_type=True, use_single_float=False)


def heartbeat_interval_from_env(value: str | None = None) -> float:
    """The idle heartbeat interval in seconds.

    ``value`` defaults to ``$DYN_FPM_HEARTBEAT_INTERVAL_MS``.  Whole milliseconds in 1..=300000
    (surrounding whitespace allowed) are honoured; anything else - unset, garbage, negative, zero,
    above five minutes - keeps the 1 s default, because a publisher that silently stops
    heartbeating is worse than one that ignores a bad override.
    """
    if value is None:
        value = os.environ.get(HEARTBEAT_ENV)
        if value is None:
            return DEFAULT_HEARTBEAT_INTERVAL_S
    text = value.strip()
    if not text.isdigit():      # rejects "", "-1", "+5", "1.5", "soon"
        logger.warning("ignoring invalid FPM idle heartbeat interval %s=%r", HEARTBEAT_ENV, value)
        return DEFAULT_HEARTBEAT_INTERVAL_S
    ms = int(text)
    if not 1 <= ms <= _MAX_HEARTBEAT_INTERVAL_MS:
        logger.warning("ignoring FPM idle heartbeat interval %s=%r outside 1..=%d ms",
                       HEARTBEAT_ENV, value, _MAX_HEARTBEAT_INTERVAL_MS)
        return DEFAULT_HEARTBEAT_INTERVAL_S
    return ms / 1000.0


FpmSinkFn = Callable[[str, bytes], None]
"""Receives ``(topic, payload)``; must not block (e.g. a ZMQ PUB ``send_multipart`` with NOBLOCK)."""


class FpmPublisher:
    """Per-rank FPM emission with idle heartbeats (the reference's ``FpmDirectPublisher``).

    ``publish(snap, dp_rank)`` never blocks: it appends to that rank's unbounded queue.  One task per
    rank stamps each emitted snapshot with the rank's ``counter_id`` (1, 2, ...) and hands the
    encoded payload to ``sink(FPM_TOPIC, payload)``.  A rank that receives nothing for
    ``heartbeat_interval_s`` emits ``ForwardPassSnapshot.zero()``; the timer restarts after every
    emission, so an idle rank heartbeats once per interval.

    Lifecycle: ``start()`` inside a running loop, ``await aclose()`` to stop.  Snapshots already
    queued at ``aclose()`` are still emitted (nothing a pass produced is lost); ``publish`` after
    ``aclose()`` raises ``RuntimeError``.  A sink exception is logged and does not stop the rank.
    """

    def __init__(self, worker_id: str, sink: FpmSinkFn, *, dp_size: int = 1,
                 heartbeat_interval_s: float | None = None) -> None:
        if dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {dp_size}")
        if heartbeat_interval_s is None:
            # Resolved once, so every rank heartbeats on the same period.
            heartbeat_interval_s = heartbeat_interval_from_env()
        elif not (heartbeat_interval_s > 0 and math.isfinite(heartbeat_interval_s)):
            raise ValueError(f"heartbeat_interval_s must be positive and finite, got {heartbeat_interval_s}")
        self.worker_id = worker_id
        self.dp_size = dp_size
        self.heartbeat_interval_s = float(heartbeat_interval_s)
        self._sink = sink
        self._pending: list[deque[ForwardPassSnapshot]] = [deque() for _ in range(dp_size)]
        # A rank task parks on a plain future that publish / the heartbeat timer / aclose resolves.
        # (Not ``wait_for(queue.get(), t)``: on Python <= 3.11 it can swallow a cancellation that
        # races with a put, leaving the task alive for another full interval.)
        self._waiters: list[asyncio.Future[int] | None] = [None] * dp_size
        self._counters = [0] * dp_size
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    @property
    def counters(self) -> tuple[int, ...]:
        """The last ``counter_id`` emitted per rank (0 = nothing yet)."""
        return tuple(self._counters)

    def start(self) -> None:
        """Spawn the per-rank tasks on the running loop (idempotent)."""
        if self._closed:
            raise RuntimeError("FPM publisher is closed")
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run_rank(r), name=f"fpm-rank-{r}")
                       for r in range(self.dp_size)]

    def publish(self, snap: ForwardPassSnapshot, dp_rank: int = 0) -> None:
        """Queue one pass's snapshot for ``dp_rank`` without blocking."""
        if self._closed:
            raise RuntimeError("FPM publisher is closed")
        if not 0 <= dp_rank < self.dp_size:
            raise ValueError(f"dp_rank {dp_rank} is out of bounds for dp_size {self.dp_size}")
        self._pending[dp_rank].append(snap)
        _wake(self._waiters[dp_rank], _WAKE_DATA)

    async def aclose(self) -> None:
        """Stop heartbeats, emit whatever is still queued, and wait for the rank tasks."""
        if self._closed:
            return
        self._closed = True
        for waiter in self._waiters:
            _wake(waiter, _WAKE_CLOSE)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for rank, pending in enumerate(self._pending):
            while pending:
                self._emit(rank, pending.popleft())

    async def __aenter__(self) -> "FpmPublisher":
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run_rank(self, rank: int) -> None:
        loop = asyncio.get_running_loop()
        pending = self._pending[rank]
        while not self._closed:
            if pending:
                self._emit(rank, pending.popleft())
                continue
            waiter: asyncio.Future[int] = loop.create_future()
            self._waiters[rank] = waiter
            timer = loop.call_later(self.heartbeat_interval_s, _wake, waiter, _WAKE_TIMEOUT)
            try:
                reason = await waiter
            finally:
                timer.cancel()
                self._waiters[rank] = None
            if reason == _WAKE_TIMEOUT and not pending:
                self._emit(rank, _ZERO_SNAPSHOT)

    def _emit(self, rank: int, snap: ForwardPassSnapshot) -> None:
        self._counters[rank] += 1
        try:
            payload = encode_fpm(self.worker_id, rank, self._counters[rank], snap)
            self._sink(FPM_TOPIC, payload)
        except Exception:   # noqa: BLE001 - a broken sink must not kill the rank's heartbeat
            logger.warning("FPM publish failed for dp_rank %d", rank, exc_info=True)


_WAKE_DATA, _WAKE_TIMEOUT, _WAKE_CLOSE = 0, 1, 2


def _wake(waiter: "asyncio.Future[int] | None", reason: int) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(reason)


# --------------------------------------------------------------------------------------------------
# docs/live.md §5.3 native Prometheus metrics
# --------------------------------------------------------------------------------------------------

VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                     7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0)
VLLM_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                       100.0, 200.0, 400.0)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
                      0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                      100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)

_VLLM_LABELS = ("model_name", "engine")
_SGLANG_SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
_SGLANG_REQUEST_LABELS = ("model_name", "engine_type")
_ENGINE_TYPES = ("vllm", "trtllm", "sglang")


class _Value:
    """A gauge's or counter's current value (a mutable cell a timer can hold on to)."""
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _Histogram:
    """Cumulative-at-export histogram: ``counts[i]`` = observations in (bounds[i-1], bounds[i]]."""
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)     # last slot: above every bound (+Inf only)
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times


class _Family:
    __slots__ = ("name", "doc", "kind", "labelnames", "buckets", "series")

    def __init__(self, name: str, doc: str, kind: str, labelnames: tuple[str, ...],
                 buckets: Sequence[float] | None = None) -> None:
        self.name = name
        self.doc = doc
        self.kind = kind              # "gauge" | "counter" | "histogram"
        self.labelnames = labelnames
        if kind == "histogram" and buckets is None:
            raise ValueError(f"histogram {name} needs buckets")
        self.buckets: Sequence[float] = buckets if buckets is not None else ()
        self.series: dict[tuple[str, ...], _Value | _Histogram] = {}

    def child(self, labels: tuple[str, ...]):
        series = self.series.get(labels)
        if series is None:
            series = _Histogram(self.buckets) if self.kind == "histogram" else _Value()
            self.series[labels] = series
        return series

    def export(self, with_samples: bool) -> Metric:
        series = self.series.items() if with_samples else ()
        if self.kind == "histogram":
            hist = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
            for labels, s in series:
                if isinstance(s, _Histogram):           # always, for a histogram family
                    cumulative, buckets = 0, []
                    for bound, n in zip(s.bounds, s.counts):
                        cumulative += n
                        buckets.append((floatToGoString(bound), cumulative))
                    buckets.append(("+Inf", cumulative + s.counts[-1]))
                    hist.add_metric(list(labels), buckets, s.sum)
            return hist
        if self.kind == "gauge":
            fam: GaugeMetricFamily | CounterMetricFamily = GaugeMetricFamily(self.name, self.doc,
                                                                             labels=self.labelnames)
        else:
            fam = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for labels, s in series:
            if isinstance(s, _Value):                   # always, for a gauge or counter family
                fam.add_metric(list(labels), s.value)
        return fam


class _Collector:
    """Exports a ``PrometheusMetrics``' families; registered in its registry."""

    def __init__(self, owner: "PrometheusMetrics") -> None:
        self._owner = owner

    def describe(self) -> Iterator[Metric]:
        # Lets a shared registry detect name clashes with another engine at registration time.
        for fam in self._owner._families.values():
            yield fam.export(with_samples=False)

    def collect(self) -> Iterator[Metric]:
        with self._owner._lock:
            families = [fam.export(with_samples=True) for fam in self._owner._families.values()
                        if fam.series]
        yield from families


class RequestTimer:
    """Per-request latency and prefix-cache recorder; obtain one from ``PrometheusMetrics.request_timer``.

    Times are seconds on one monotonic clock (``time.monotonic()`` by default).
    """
    __slots__ = ("_owner", "_ttft", "_itl", "_e2e", "_completed_counter", "_queries", "_hits",
                 "_start", "_last", "_prefix_seen", "_done")

    def __init__(self, owner: "PrometheusMetrics", start_s: float,
                 ttft: _Histogram | None, itl: _Histogram | None, e2e: _Histogram | None,
                 completed_counter: _Value | None, queries: _Value | None, hits: _Value | None) -> None:
        self._owner = owner
        self._start = start_s
        self._ttft, self._itl, self._e2e = ttft, itl, e2e
        self._completed_counter = completed_counter
        self._queries, self._hits = queries, hits
        self._last: float | None = None
        self._prefix_seen = False
        self._done = False

    @property
    def enabled(self) -> bool:
        """False when latency histograms are off (prefill worker, or no model name)."""
        return self._ttft is not None

    def record_prefix_cache(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count this request's prefix-cache lookup (vLLM only); later calls are ignored."""
        if self._prefix_seen:
            return
        self._prefix_seen = True
        if self._queries is not None:
            with self._owner._lock:
                _count_prefix(self._queries, self._hits, prompt_tokens, cached_tokens)

    def on_tokens(self, n: int, now_s: float | None = None) -> None:
        """A chunk of ``n`` tokens was emitted: TTFT at the first non-empty chunk, then ``n`` ITLs."""
        ttft, itl = self._ttft, self._itl
        if n <= 0 or ttft is None or itl is None:       # both set, or both None
            return
        now = time.monotonic() if now_s is None else now_s
        last, self._last = self._last, now
        with self._owner._lock:
            if last is None:
                ttft.observe(now - self._start)
            else:
                itl.observe((now - last) / n, n)

    def on_complete(self, now_s: float | None = None) -> None:
        """Normal completion: E2E (and SGLang's request counter).  Do not call on cancel or error."""
        if self._done or self._e2e is None:
            return
        self._done = True
        now = time.monotonic() if now_s is None else now_s
        with self._owner._lock:
            self._e2e.observe(now - self._start)
            if self._completed_counter is not None:
                self._completed_counter.value += 1


def _count_prefix(queries: _Value, hits: _Value | None, prompt_tokens: int, cached_tokens: int) -> None:
    queried = max(0, int(prompt_tokens))
    queries.value += queried
    if hits is not None:
        hits.value += min(max(0, int(cached_tokens)), queried)


class PrometheusMetrics:
    """The engine-native Prometheus families of docs/live.md §5.3 for one engine (all its dp ranks).

    Series carry the served model's name as a label, so none exist until the model name is known
    (``set_model_name`` or ``request_timer(model_name=...)``); snapshots received before that are
    kept and applied when it is.  The first name is fixed for the lifetime of the object; a
    different later name logs one warning and is otherwise ignored.

    vLLM / TRT-LLM: per-rank series (``engine="<dp_rank>"``) for ranks ``0..dp_size-1`` from the
    start, and for any other rank the first time it reports.  SGLang: one scheduler series summing
    every rank's latest snapshot.

    The families live in ``registry`` (a fresh ``CollectorRegistry`` by default, so several
    engines in one process never collide).  They are exported by a custom collector rather than
    ``prometheus_client.Counter``/``Histogram`` so the scrape has exactly the reference's series:
    no ``*_created`` samples.
    """

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, engine_type: str, registry: CollectorRegistry | None = None, *,
                 dp_size: int = 1) -> None:
        engine_type = str(getattr(engine_type, "value", engine_type)).lower()
        if engine_type not in _ENGINE_TYPES:
            raise ValueError(f"engine_type must be one of {', '.join(_ENGINE_TYPES)}, got {engine_type!r}")
        if dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {dp_size}")
        self.engine_type = engine_type
        self.dp_size = dp_size
        self.registry = CollectorRegistry() if registry is None else registry
        self._lock = threading.RLock()
        self._model_name: str | None = None
        self._warned_mismatch = False
        self._latest: dict[int, MockerMetrics] = {}
        self._preemptions_seen: dict[int, int] = {}
        self._families: dict[str, _Family] = {}
        self._define_families()
        self._collector = _Collector(self)
        self.registry.register(self._collector)

    # -- public API --------------------------------------------------------------------------------

    @property
    def model_name(self) -> str | None:
        return self._model_name

    def set_model_name(self, name: str) -> str:
        """Fix the ``model_name`` label (first call wins); returns the label in effect."""
        name = str(name).strip()
        if not name:
            raise ValueError("model_name must be a non-empty string")
        with self._lock:
            return self._ensure_model_name(name)

    def update(self, snapshots: Iterable[MockerMetrics]) -> None:
        """Apply the latest scheduler snapshot of one or more ranks.

        SGLang's gauges are sums over every rank's latest snapshot, computed once per call, so
        passing all ranks of one pass together never exposes a half-updated mix.
        """
        with self._lock:
            batch = list(snapshots)
            for snap in batch:
                self._latest[snap.dp_rank] = snap
            name = self._model_name
            if name is None or not batch:
                return
            if self.engine_type == "sglang":
                self._apply(name, batch[-1])     # one aggregate over every rank's latest snapshot
            else:
                for snap in batch:
                    self._apply(name, snap)

    def record_prefix_cache(self, prompt_tokens: int, cached_tokens: int, dp_rank: int = 0) -> None:
        """Count one request's prefix lookup: queried += prompt, hits += min(cached, prompt).

        vLLM only (a no-op for TRT-LLM and SGLang, and before the model name is known).  Each call
        counts; use ``RequestTimer.record_prefix_cache`` for the once-per-request guard.
        """
        if self.engine_type != "vllm":
            return
        with self._lock:
            if self._model_name is None:
                return
            labels = (self._model_name, str(dp_rank))
            _count_prefix(self._families["vllm:prefix_cache_queries_total"].child(labels),
                          self._families["vllm:prefix_cache_hits_total"].child(labels),
                          prompt_tokens, cached_tokens)

    def request_timer(self, is_prefill_worker: bool, *, dp_rank: int = 0, model_name: str | None = None,
                      start_s: float | None = None) -> RequestTimer:
        """A recorder for one request, started at ``start_s`` (default: now, ``time.monotonic()``).

        ``model_name`` (the request's model) fixes the label if none is set yet.  Without any model
        name the timer records nothing.  Prefill workers record no latency histograms but still
        count the prefix-cache lookup (vLLM).
        """
        start = time.monotonic() if start_s is None else start_s
        with self._lock:
            if model_name is not None and model_name.strip():
                self._ensure_model_name(model_name.strip())
            name = self._model_name
            if name is None:
                return RequestTimer(self, start, None, None, None, None, None, None)
            if self.engine_type == "sglang":
                labels = (name, "sglang")
                fam = self._families
                queries = hits = None
                ttft, itl, e2e = (fam[f"sglang:{m}"].child(labels) for m in
                                  ("time_to_first_token_seconds", "inter_token_latency_seconds",
                                   "e2e_request_latency_seconds"))
                completed = fam["sglang:num_requests_total"].child(labels)
            else:
                p = self.engine_type
                labels = (name, str(dp_rank))
                self._bind_rank(name, dp_rank)
                fam = self._families
                if p == "vllm":
                    queries = fam["vllm:prefix_cache_queries_total"].child(labels)
                    hits = fam["vllm:prefix_cache_hits_total"].child(labels)
                else:
                    queries = hits = None
                ttft, itl, e2e = (fam[f"{p}:{m}"].child(labels) for m in
                                  ("time_to_first_token_seconds", "inter_token_latency_seconds",
                                   "e2e_request_latency_seconds"))
                completed = None
            if is_prefill_worker:
                ttft = itl = e2e = completed = None
            return RequestTimer(self, start, ttft, itl, e2e, completed, queries, hits)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format, ready to serve with ``content_type``."""
        return generate_latest(self.registry)

    def close(self) -> None:
        """Unregister from the registry (useful with a shared registry)."""
        try:
            self.registry.unregister(self._collector)
        except KeyError:
            pass

    # -- internals ---------------------------------------------------------------------------------

    def _define_families(self) -> None:
        def add(name, doc, kind, labels, buckets=None):
            self._families[name] = _Family(name, doc, kind, labels, buckets)

        if self.engine_type == "sglang":
            s, r = _SGLANG_SCHEDULER_LABELS, _SGLANG_REQUEST_LABELS
            add("sglang:num_running_reqs", "The number of running requests.", "gauge", s)
            add("sglang:num_queue_reqs", "The number of queued requests.", "gauge", s)
            add("sglang:cache_hit_rate", "Cache hit rate.", "gauge", s)
            add("sglang:num_requests_total", "Number of requests processed.", "counter", r)
            add("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                "histogram", r, SGLANG_TTFT_BUCKETS)
            add("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                "histogram", r, SGLANG_ITL_BUCKETS)
            add("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                "histogram", r, SGLANG_E2E_BUCKETS)
            return
        p, v = self.engine_type, _VLLM_LABELS
        preempt_doc = ("Cumulative number of request preemptions." if p == "vllm" else
                       "Cumulative number of request preemptions (always 0 under GUARANTEED_NO_EVICT).")
        add(f"{p}:num_requests_running", "Number of requests currently running on GPU.", "gauge", v)
        add(f"{p}:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", v)
        add(f"{p}:kv_cache_usage_perc", "KV-cache usage as a fraction of available cache blocks.", "gauge", v)
        add(f"{p}:gpu_cache_usage_perc",
            "Compatibility alias for KV-cache usage as a fraction of available cache blocks.", "gauge", v)
        add(f"{p}:num_preemptions_total", preempt_doc, "counter", v)
        if p == "vllm":
            add("vllm:prefix_cache_queries_total",
                "Number of prompt tokens queried against the Mocker prefix cache.", "counter", v)
            add("vllm:prefix_cache_hits_total",
                "Number of prompt tokens reused from the Mocker prefix cache.", "counter", v)
        add(f"{p}:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            "histogram", v, VLLM_TTFT_BUCKETS)
        add(f"{p}:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            "histogram", v, VLLM_ITL_BUCKETS)
        add(f"{p}:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            "histogram", v, VLLM_E2E_BUCKETS)

    def _ensure_model_name(self, name: str) -> str:
        """Fix the label if none is set yet; returns the label in effect."""
        # Caller holds the lock; ``name`` is stripped and non-empty.
        if self._model_name is None:
            self._model_name = name
            self._bind(name)
        elif name != self._model_name and not self._warned_mismatch:
            self._warned_mismatch = True
            logger.warning("mocker native metrics keep the first model_name label %r for this process "
                           "(request model_name %r)", self._model_name, name)
        return self._model_name

    def _bind(self, name: str) -> None:
        """Create every series for the now-known model name, then replay the held snapshots."""
        if self.engine_type == "sglang":
            for fam in self._families.values():
                fam.child((name, "sglang", "0", "0", "0") if fam.labelnames == _SGLANG_SCHEDULER_LABELS
                          else (name, "sglang"))
        else:
            for rank in range(self.dp_size):
                self._bind_rank(name, rank)
        for snap in list(self._latest.values()):
            self._apply(name, snap)

    def _bind_rank(self, name: str, rank: int) -> None:
        labels = (name, str(rank))
        for fam in self._families.values():
            fam.child(labels)

    def _apply(self, name: str, snap: MockerMetrics) -> None:
        # Caller holds the lock; ``name`` is the model name label.
        fam = self._families
        labels: tuple[str, ...]
        if self.engine_type == "sglang":
            labels = (name, "sglang", "0", "0", "0")
            latest = self._latest.values()
            fam["sglang:num_running_reqs"].child(labels).value = float(sum(m.running_requests for m in latest))
            fam["sglang:num_queue_reqs"].child(labels).value = float(sum(m.waiting_requests for m in latest))
            total = sum(m.sglang_cache_total_tokens for m in latest)
            # No prefill tokens means no new observation, not a 0% hit rate.
            if total > 0:
                hits = sum(m.sglang_cache_hit_tokens for m in latest)
                fam["sglang:cache_hit_rate"].child(labels).value = hits / total
            return
        p, rank = self.engine_type, snap.dp_rank
        self._bind_rank(name, rank)
        labels = (name, str(rank))
        usage = snap.gpu_cache_usage_perc
        fam[f"{p}:num_requests_running"].child(labels).value = float(snap.running_requests)
        fam[f"{p}:num_requests_waiting"].child(labels).value = float(snap.waiting_requests)
        fam[f"{p}:kv_cache_usage_perc"].child(labels).value = usage
        fam[f"{p}:gpu_cache_usage_perc"].child(labels).value = usage
        seen = self._preemptions_seen.get(rank, 0)
        if snap.vllm_preemptions_total > seen:
            fam[f"{p}:num_preemptions_total"].child(labels).value += snap.vllm_preemptions_total - seen
            self._preemptions_seen[rank] = snap.vllm_preemptions_total
