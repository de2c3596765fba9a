"""LiveEngine: the compiled core on the wall clock (docs/live.md §1).

One asyncio task — the pass loop — owns the core.  Between passes it applies queued
cancellations and submissions, picks the next pass start on the *modeled* clock, runs the pass
in C (``LiveCore.step``), sleeps until the modeled end on the wall clock, then publishes the
boundary as one ordered transaction: admissions → KV events + forward-pass metrics → output
signals → cleanup of streams whose consumers fell behind → metrics snapshot.

Waking thousands of consumer tasks takes milliseconds (one loop callback wakes a pass's readers,
each a task step of a few microseconds), so by default the hand-out starts early by the measured
midpoint of the fan-out (``handout_lead="auto"``): consumers see their tokens centred on the
modeled time instead of all after it.  ``handout_lead=0`` never hands out early.

Modeled time is milliseconds since engine start.  A pass starts where the previous one ended
(or at the arrival that woke an idle engine), never at the wall time the loop happened to get
to it, so lateness of one pass never inflates later modeled times, and a live run replays the
same modeled token times as the offline replay of the same arrivals.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import uuid as uuidlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from mocker._core.live import LiveCore
from mocker._core.stream import SignalStream, StreamInterrupted, handout
from mocker._core.table import ReqTable
from mocker.config import ConfigError, normalize_config
from mocker.events.kv import BlockRemoved, BlockStored, KvEventBatch, KvEventSink
from mocker.events.metrics import ForwardPassSnapshot, MockerMetrics
from mocker.limits import MAX_REQUEST_TOKENS

log = logging.getLogger("mocker.live")

_clock = time.monotonic              # the wall clock of pacing (loop.time() is ms-coarse on uvloop)
_TIMER_SLACK_S = 0.001               # the loop's timer wakes up to ~1 ms late: sleep short, then yield
_FANOUT_MIN_SIGNALS = 64             # passes that hand out fewer signals do not update the estimate
_FANOUT_SAMPLES = 33                 # the estimate: the upper quartile of this many recent passes


class LiveEngineError(RuntimeError):
    """A request the live engine refuses, or an engine that is not running (docs/live.md §1.3)."""


# -- values -----------------------------------------------------------------------------------
@dataclass(slots=True)
class DirectRequest:
    """What the live layer submits (docs/live.md §0)."""
    tokens: Sequence[int] | np.ndarray
    max_output_tokens: int
    output_token_ids: Sequence[int] | None = None   # a planned output: its length wins
    uuid: str | uuidlib.UUID | None = None          # client id (fresh v4 if None)
    dp_rank: int = 0
    arrival_timestamp_ms: float | None = None       # informational (e.g. the frontend's unix ms)
    arrival_ms: float | None = None                 # modeled arrival (ms since engine start); None = now

    def effective_output_len(self) -> int:
        return len(self.output_token_ids) if self.output_token_ids is not None else int(self.max_output_tokens)


@dataclass(slots=True)
class OutputSignal:
    """One generated token, or a terminal (docs/live.md §0)."""
    uuid: Any
    token_id: int | None
    completed: bool = False
    rejected: bool = False
    cached_tokens: int | None = None   # admission prefix-cache hit, on the first signal only
    modeled_ms: float = 0.0            # modeled time of the token (the pass end)
    observed_at: float = 0.0           # wall clock (time.monotonic()) at delivery


@dataclass(frozen=True, slots=True)
class CancelOnOverflow:
    """Per-request queue of ``min(max(1, output_len), capacity)`` signals; a full queue
    abandons the stream (the consumer drains what is queued, then sees the end)."""
    capacity: int = 8


@dataclass(frozen=True, slots=True)
class FullResponse:
    """The whole declared response can be buffered unread."""


def check_handout_lead(value: float | str) -> float | None:
    """``handout_lead``: "auto" (None: measured) or a finite number of seconds >= 0."""
    if value == "auto":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= float(value) < float("inf"):
        return float(value)
    raise LiveEngineError(f"handout_lead must be \"auto\" or a finite number of seconds >= 0, got {value!r}")


# -- request streams ---------------------------------------------------------------------------
class LiveRequest(SignalStream):
    """The stream of one request: ``await recv()`` (None at the end) or ``async for``.

    The queue and the hand-off are compiled (``mocker._core.stream``): a pass's hand-out wakes
    its readers from one loop callback, reading a signal costs one task step, and a read
    cancelled at any moment loses nothing."""

    __slots__ = ("client_id", "_engine", "_route")

    def __init__(self, engine: "LiveEngine", route: "_Route", capacity: int):
        self._init_stream(engine._loop, capacity)
        self.client_id = route.client_id
        self._engine = engine
        self._route = route

    async def recv(self) -> OutputSignal | None:
        """The next signal, or None once the stream has ended."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            return None

    async def cancel(self) -> bool:
        """Cancel this request (False if it already ended)."""
        if self._engine._routes.get(self.client_id) is not self._route:
            return False
        return await self._engine.cancel(self.client_id)

    def close(self) -> None:
        """The consumer is gone ("drop"): stop the request, fire and forget."""
        self._engine._drop_stream(self._route)


@dataclass(slots=True, eq=False)
class _Route:
    client_id: Any
    rank: int
    tokens: np.ndarray
    plan: list | None
    eff_len: int
    arrival_ms: float | None
    stream: LiveRequest = field(init=False)   # set right after construction (it needs the route)
    row: int = -1                      # scheduler id (core row) once submitted
    state: str = "prepared"            # prepared → submitting → active → closed
    abandoned: bool = False
    terminal_seen: bool = False
    cached: int | None = None
    first_sent: bool = False
    emitted: int = 0
    ack: asyncio.Future | None = None
    serial: int = 0


class Registration:
    """A prepared, not yet submitted request (docs/live.md §1.3 ``prepare_request``).  ``close()``
    ("drop") removes the route and ends the paired stream."""

    def __init__(self, engine: "LiveEngine", route: _Route):
        self._engine = engine
        self.route = route

    def close(self) -> None:
        if self.route.state == "prepared":
            self._engine._retire_route(self.route)


# -- the engine -------------------------------------------------------------------------------
class LiveEngine:
    """The live engine of one worker: ``dp_size`` ranks sharing one pass barrier.

    ``await LiveEngine.start(config)``; ``submit(DirectRequest)`` → ``LiveRequest``;
    ``cancel(client_id)``; ``active_request_count()``; ``metrics(rank)`` /
    ``watch_metrics(rank)``; ``await shutdown()`` (idempotent).
    """

    def __init__(self, config: Any = None, *, buffering: CancelOnOverflow | FullResponse | None = None,
                 kv_event_sinks: Sequence[KvEventSink | None] | None = None,
                 fpm_sink: Callable[[int, ForwardPassSnapshot], None] | None = None,
                 admission_observer: Callable[[Any, int, float], None] | None = None,
                 seed: int = 0, handout_lead: float | str = "auto"):
        try:
            self.config = normalize_config(config)
        except ConfigError as e:
            raise LiveEngineError(f"invalid Mocker engine arguments: {e}") from e
        eng = self.config["engine"]
        self.engine_type = eng["backend"]
        self.dp_size = int(self.config["dp_size"])
        self.block_size = int(eng["block_size"])
        self.num_gpu_blocks = int(eng["num_gpu_blocks"])
        self.allow_zero_output = self.engine_type == "sglang"
        # speedup 0 = infinite speed: modeled times are unscaled, the loop never sleeps
        self.paced = eng["speedup_ratio"] > 0 and eng["decode_speedup_ratio"] > 0
        self.buffering = buffering if buffering is not None else CancelOnOverflow()
        sinks = list(kv_event_sinks or [])
        if sinks and len(sinks) != self.dp_size:
            raise LiveEngineError(f"kv_event_sinks needs one entry per DP rank: expected {self.dp_size}, "
                                  f"got {len(sinks)}")
        self._sinks = sinks
        self._events = bool(sinks) and any(s is not None for s in sinks) and eng["enable_prefix_caching"]
        self._fpm_sink = fpm_sink
        self._admission_observer = admission_observer
        self._seed = seed
        self._lead_fixed = check_handout_lead(handout_lead)
        self._fanout: deque[float] = deque(maxlen=_FANOUT_SAMPLES)   # see _handout_lead
        self._routes: dict[Any, _Route] = {}
        self._by_row: dict[int, _Route] = {}
        self._pending_cancel: list[tuple[_Route, asyncio.Future | None]] = []
        self._commands: deque[_Route] = deque()
        self._arrivals: list = []           # heap of (arrival_ms, seq, route)
        self._seq = itertools.count()
        self._serial = itertools.count()
        # asyncio events bind to the running loop when first waited on
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._state = "new"
        self._shutdown_result: asyncio.Future | None = None
        self._t = 0.0                       # modeled time the core has reached (last pass end)
        self._origin = 0.0
        self._stalled = False
        self._metrics = [MockerMetrics.initial(r, self.num_gpu_blocks) for r in range(self.dp_size)]
        self._metrics_changed = asyncio.Event()
        self._sglang_obs: list | None = None
        self._closed_ranks: set[int] = set()
        self.passes = 0
        self.lateness_ms: list[float] | None = None   # set to [] to record per-pass lateness

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    async def start(cls, config: Any = None, **kwargs) -> "LiveEngine":
        eng = cls(config, **kwargs)
        await eng._start()
        return eng

    async def _start(self) -> None:
        if self._state != "new":
            raise LiveEngineError("live Mocker engine was already started")
        from mocker.replay.topology import build_ranks
        cfg = dict(self.config)
        cfg["engine"] = dict(self.config["engine"], worker_type="aggregated",
                             emit_kv_events=self._events)
        self._table = ReqTable(0, self.block_size)
        try:
            ranks = build_ranks(cfg, self._table, 1)
        except ConfigError as e:
            raise LiveEngineError(f"invalid Mocker engine arguments: {e}") from e
        self._core = LiveCore(self._table, ranks, self.config["engine"]["prefill_schedule_interval"])
        loop = asyncio.get_running_loop()
        self._loop = loop
        startup = self.config.get("startup_time") or 0.0
        if startup:
            await asyncio.sleep(float(startup))       # wall clock, never scaled
        self._origin = _clock()
        self._state = "running"
        self._task = loop.create_task(self._run(), name="mocker-live-pass-loop")

    def now_ms(self) -> float:
        """The modeled clock: milliseconds since the engine started."""
        return (_clock() - self._origin) * 1000.0

    @property
    def origin(self) -> float:
        """The wall-clock instant (``time.monotonic()`` seconds) of modeled time 0."""
        return self._origin

    @property
    def running(self) -> bool:
        return self._state == "running"

    # -- requests ----------------------------------------------------------------------------
    def prepare_request(self, req: DirectRequest) -> tuple[Registration, LiveRequest]:
        if self._state != "running":
            raise LiveEngineError("live Mocker engine is not running")
        mot = req.max_output_tokens
        if req.output_token_ids is None and (isinstance(mot, bool) or not isinstance(mot, (int, np.integer))):
            raise LiveEngineError(f"max_output_tokens must be an integer, got {mot!r}")
        eff = req.effective_output_len()
        if eff > MAX_REQUEST_TOKENS:
            raise LiveEngineError(f"max_output_tokens {eff} is more than a request can hold "
                                  f"({MAX_REQUEST_TOKENS} tokens)")
        if eff == 0 and not (self.allow_zero_output and req.output_token_ids is None):
            raise LiveEngineError("live requests must generate at least one output token")
        if eff < 0:
            raise LiveEngineError(f"max_output_tokens must be non-negative, got {eff}")
        if isinstance(req.dp_rank, bool) or not isinstance(req.dp_rank, (int, np.integer)):
            raise LiveEngineError(f"dp_rank must be an integer, got {req.dp_rank!r}")
        if not 0 <= req.dp_rank < self.dp_size:
            raise LiveEngineError(f"dp_rank {req.dp_rank} is out of bounds for dp_size {self.dp_size}")
        if req.dp_rank in self._closed_ranks:
            raise LiveEngineError(f"live Mocker rank {req.dp_rank} was closed")
        cid = req.uuid if req.uuid is not None else uuidlib.uuid4()
        if cid in self._routes:
            raise LiveEngineError(f"request {cid} is already active")
        try:
            tokens = np.asarray(req.tokens, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as e:
            raise LiveEngineError(f"request tokens must be integer token ids: {e}") from e
        if tokens.ndim != 1:
            raise LiveEngineError("request tokens must be a flat list of token ids")
        if tokens.size > MAX_REQUEST_TOKENS:
            raise LiveEngineError(f"request tokens: {tokens.size} is more than a request can hold "
                                  f"({MAX_REQUEST_TOKENS} tokens)")
        if tokens.size == 0:
            raise LiveEngineError("request tokens must not be empty (a prompt has at least one token)")
        if int(tokens.min()) < 0:
            raise LiveEngineError("request tokens must be non-negative token ids")
        route = _Route(client_id=cid, rank=int(req.dp_rank), tokens=tokens,
                       plan=list(req.output_token_ids) if req.output_token_ids is not None else None,
                       eff_len=eff, arrival_ms=req.arrival_ms, serial=next(self._serial))
        if isinstance(self.buffering, FullResponse):
            cap = max(1, eff)
        else:
            cap = min(max(1, eff), self.buffering.capacity)
        route.stream = LiveRequest(self, route, cap)
        self._routes[cid] = route
        return Registration(self, route), route.stream

    async def submit(self, req: DirectRequest) -> LiveRequest:
        """Register and submit; returns once the scheduler acknowledged it (at the next pass
        boundary if a pass is running)."""
        reg, stream = self.prepare_request(req)
        await self.submit_prepared(reg)
        return stream

    async def submit_prepared(self, reg: Registration) -> None:
        route = reg.route
        if route.state != "prepared":
            raise LiveEngineError(f"request {route.client_id} was already submitted")
        if self._state != "running":
            self._retire_route(route)
            raise LiveEngineError("live Mocker engine is not running")
        route.state = "submitting"
        ack = route.ack = self._loop.create_future()
        self._commands.append(route)
        self._wakeup.set()
        try:
            await asyncio.shield(ack)
        except asyncio.CancelledError:
            # the caller went away: the request still gets cancelled once admitted
            self._drop_stream(route)
            raise

    async def cancel(self, client_id: Any) -> bool:
        """Cancel a request: stop forwarding at once, drop it from the scheduler at the next
        boundary.  False for an unknown id or a request that already ended."""
        route = self._routes.get(client_id)
        if route is None or route.state == "closed":
            return False
        if route.state == "prepared":
            self._retire_route(route)
            return True
        if route.state == "submitting":
            assert route.ack is not None            # set with the "submitting" state
            try:
                await asyncio.shield(route.ack)
            except Exception:
                return False
        if self._routes.get(client_id) is not route or route.state == "closed":
            return False
        if route.terminal_seen:
            return False
        route.abandoned = True
        route.stream._close()
        fut = self._loop.create_future()
        self._pending_cancel.append((route, fut))
        self._wakeup.set()
        return await asyncio.shield(fut)

    def _drop_stream(self, route: _Route) -> None:
        """Fire-and-forget cancellation (a dropped stream)."""
        if route.state == "prepared":
            self._retire_route(route)
            return
        if route.state == "closed" or self._state != "running":
            return
        route.abandoned = True
        route.stream._close()
        self._pending_cancel.append((route, None))
        self._wakeup.set()

    def close_rank(self, rank: int) -> None:
        """Retire one rank of a data-parallel group (its handle was dropped): its streams end,
        its requests leave the scheduler at the next boundary, it takes no new requests; the
        other ranks keep serving."""
        if not 0 <= rank < self.dp_size:
            raise LiveEngineError(f"dp_rank {rank} is out of bounds for dp_size {self.dp_size}")
        self._closed_ranks.add(rank)
        for route in [r for r in self._routes.values() if r.rank == rank]:
            self._drop_stream(route)

    def active_request_count(self) -> int:
        return len(self._routes)

    # -- metrics -----------------------------------------------------------------------------
    def metrics(self, rank: int = 0) -> MockerMetrics:
        return self._metrics[rank]

    async def watch_metrics(self, rank: int = 0):
        """Latest-value stream of the rank's ``MockerMetrics`` (changes coalesce)."""
        while self._state in ("new", "running"):
            changed = self._metrics_changed
            yield self._metrics[rank]
            await changed.wait()

    # -- shutdown ----------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Stop the pass loop, end every open stream, release the KV sinks.  Idempotent: a
        repeated call returns (or raises) the same result."""
        if self._shutdown_result is None:
            self._shutdown_result = asyncio.get_running_loop().create_future()
            try:
                await self._shutdown()
            except BaseException as e:   # noqa: BLE001 — remembered, re-raised on every call
                self._shutdown_result.set_exception(e)
            else:
                self._shutdown_result.set_result(None)
        await asyncio.shield(self._shutdown_result)

    async def _shutdown(self) -> None:
        self._state = "stopping"
        err: BaseException | None = None
        if self._task is not None:
            self._wakeup.set()
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception as e:       # the pass loop failed
                err = e
        for route in list(self._routes.values()):
            if route.ack is not None and not route.ack.done():
                route.ack.set_exception(LiveEngineError("live Mocker engine stopped during submission"))
                route.ack.exception()
            route.stream._close()
            self._routes.pop(route.client_id, None)
            route.state = "closed"
        for _, fut in self._pending_cancel:
            if fut is not None and not fut.done():
                fut.set_result(False)
        self._pending_cancel.clear()
        for s in self._sinks:
            if s is not None:
                try:
                    s.close()
                except Exception:     # noqa: BLE001
                    log.exception("closing a KV event sink failed")
        self._state = "stopped"
        self._metrics_changed.set()
        if err is not None:
            raise err

    # -- the pass loop -----------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop_passes()
        except asyncio.CancelledError:
            raise
        except BaseException:
            # a broken pass loop must not leave a consumer hanging: every stream ends now
            log.exception("live Mocker pass loop failed")
            self._state = "failed"
            for route in list(self._routes.values()):
                if route.ack is not None and not route.ack.done():
                    route.ack.set_exception(LiveEngineError("live Mocker engine stopped during submission"))
                self._retire_route(route)
            raise

    async def _loop_passes(self) -> None:
        core = self._core
        while True:
            self._apply_commands()
            self._apply_cancellations()
            # where does the next pass start on the modeled clock?
            if core.has_work() and not self._stalled:
                start = self._t
            elif self._arrivals:
                a = self._arrivals[0][0]
                now = self.now_ms()
                if a > now and self.paced:
                    await self._wait(self._origin + a / 1000.0)
                    continue
                start = max(a, self._t)
            else:
                await self._wait(None)
                continue
            self._admit_arrivals(start)
            if not core.has_work():
                continue
            end = core.step(start)
            self.passes += 1
            prepared = self._prepare_pass(start, end)
            n_out = len(prepared[4][0])
            if end > start:
                self._stalled = False
                if self.paced:
                    target = self._origin + end / 1000.0
                    await self._sleep_until(target - self._handout_lead(n_out, end - start))
                    if self.lateness_ms is not None:
                        self.lateness_ms.append((_clock() - target) * 1000.0)
                else:
                    await asyncio.sleep(0)
            else:
                if not core.effect:
                    self._stalled = True     # an effect-free instant pass: wait for a command
                await asyncio.sleep(0)       # zero-duration passes still yield
            self._t = end
            t0 = _clock()
            self._publish_pass(prepared)
            if n_out:
                # let the consumers take their tokens before the next pass is computed (its
                # modeled times do not depend on when that happens); the sleep returns once the
                # woken consumers have run, which measures this pass's fan-out
                t1 = _clock()
                await asyncio.sleep(0)
                if n_out >= _FANOUT_MIN_SIGNALS:
                    # the first consumer runs after the publication (t1), the last just before
                    # we resume: their midpoint per signal
                    self._fanout.append(((t1 - t0) + (_clock() - t0)) * 0.5 / n_out)

    def _handout_lead(self, n_out: int, duration_ms: float) -> float:
        """Seconds before the modeled end at which to start handing ``n_out`` signals out.

        Waking one consumer task per signal takes microseconds each, so the last reader of a
        pass with thousands of tokens gets its token milliseconds after the first.  With
        ``handout_lead="auto"`` the hand-out starts early by the measured midpoint of the
        fan-out (per signal, times ``n_out``: the upper quartile over the last passes that handed
        out at least ``_FANOUT_MIN_SIGNALS`` signals, because a fan-out runs long more often than
        short — a slow spell of the machine stretches a whole pass — so centring on the median
        leaves the late side the longer), so what consumers observe is centred on the modeled
        time; never more than half the pass.  ``0`` hands out at the
        modeled end."""
        lead = self._lead_fixed
        if lead is None:
            lead = n_out * self.fanout_per_signal_s
        return min(lead, 0.0005 * duration_ms)

    @property
    def fanout_per_signal_s(self) -> float:
        """The measured hand-out midpoint per signal (seconds): the upper quartile of recent
        passes (see ``_handout_lead``)."""
        f = self._fanout
        return sorted(f)[(3 * len(f)) // 4] if f else 0.0

    async def _sleep_until(self, target: float) -> None:
        """Sleep until ``target`` (``time.monotonic()`` seconds) with sub-millisecond precision:
        the event loop's timer only has millisecond granularity (uvloop's clock too), so the
        last stretch yields to the loop until the instant is reached."""
        delay = target - _clock()
        if delay > _TIMER_SLACK_S:
            await asyncio.sleep(delay - _TIMER_SLACK_S)
        while _clock() < target:
            await asyncio.sleep(0)

    async def _wait(self, until: float | None) -> None:
        self._wakeup.clear()
        if self._commands or self._pending_cancel:
            return
        if until is None:
            await self._wakeup.wait()
            return
        delay = until - _clock()
        if delay <= 0:
            return
        try:
            await asyncio.wait_for(self._wakeup.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def _apply_commands(self) -> None:
        """Queued submissions get their arrival stamp and are acknowledged (between passes)."""
        if not self._commands:
            return
        # a request without a modeled arrival arrives at this boundary: it joins the pass that
        # starts here (at the previous pass end while the engine is busy, else now)
        now = self._t if (self._core.has_work() and not self._stalled) else max(self.now_ms(), self._t)
        for _ in range(len(self._commands)):
            route = self._commands.popleft()
            if route.state != "submitting":
                continue
            a = route.arrival_ms if route.arrival_ms is not None else now
            heapq.heappush(self._arrivals, (a, next(self._seq), route))
            route.state = "active"
            assert route.ack is not None            # set with the "submitting" state
            route.ack.set_result(None)
            self._stalled = False

    def _admit_arrivals(self, start: float) -> None:
        core = self._core
        while self._arrivals and self._arrivals[0][0] <= start:
            a, _, route = heapq.heappop(self._arrivals)
            if route.state != "active" or route.abandoned:
                if route.state != "closed":
                    self._retire_route(route)
                continue
            route.row = core.submit(route.tokens, route.eff_len, route.rank, a)
            self._by_row[route.row] = route
            if core.rejected(route.row):
                self._deliver(route, OutputSignal(route.client_id, None, True, True, None, start))
                route.terminal_seen = True
                self._retire_route(route)

    def _apply_cancellations(self) -> None:
        if not self._pending_cancel:
            return
        pending, self._pending_cancel = self._pending_cancel, []
        core = self._core
        for route, fut in pending:
            if route.state == "closed":
                if fut is not None and not fut.done():
                    fut.set_result(False)
                continue
            if route.row < 0:
                # still waiting for its arrival time: it never reaches the core
                self._retire_route(route)
                if fut is not None and not fut.done():
                    fut.set_result(True)
                continue
            applied = core.cancel(route.row)
            self._retire_route(route)
            if fut is not None and not fut.done():
                fut.set_result(bool(applied))
        self._stalled = False
        if self._events:
            self._publish_kv_events()
        self._update_metrics()

    def _retire_route(self, route: _Route) -> None:
        if route.state == "closed":
            return
        route.state = "closed"
        if route.ack is not None and not route.ack.done():
            route.ack.set_result(None)      # a pending submit returns; its stream has ended
        if self._routes.get(route.client_id) is route:
            del self._routes[route.client_id]
        route.stream._close()
        if route.row >= 0:
            self._by_row.pop(route.row, None)
            self._core.cancel(route.row)        # no-op unless it is still scheduled (shutdown, failure)
            self._core.retire(route.row)

    # -- pass boundary -----------------------------------------------------------------------
    # The pass's outputs are read from the core and turned into signals while the pass "runs"
    # (the loop sleeps until its modeled end anyway); at the end they are only handed out.

    def _prepare_pass(self, start: float, end: float) -> tuple:
        core = self._core
        by_row = self._by_row
        emitted, completed, rejected, adm_rid, adm_reused = core.drain()
        admitted = []
        sg = self._sglang_obs = [None] * self.dp_size if self.engine_type == "sglang" else None
        for row, reused in zip(adm_rid.tolist(), adm_reused.tolist()):
            route = by_row.get(row)
            if route is None:
                continue
            if sg is not None:
                hit, tot = sg[route.rank] or (0, 0)
                sg[route.rank] = (hit + reused, tot + len(route.tokens))
            if route.cached is None:
                route.cached = reused
                admitted.append(route)
        kv = self._collect_kv_events() if self._events else None
        fpm = self._collect_fpm(start, end) if self._fpm_sink is not None else None
        done = set(completed.tolist())
        out_r, out_st, out_s = [], [], []   # routes, their streams, their signals, in delivery order
        # terminals go last: all signals of a pass share its modeled time, and a reader that
        # finishes usually does more work (its next request) before the loop reaches the others
        term_r, term_s = [], []
        finished = []
        for row in emitted.tolist():
            route = by_row.get(row)
            if route is None:
                continue
            g = route.emitted = route.emitted + 1
            plan = route.plan
            tok = plan[g - 1] if plan is not None and g <= len(plan) else self._token(route, g)
            last = row in done
            cached = None
            if not route.first_sent:
                route.first_sent = True
                cached = route.cached or 0
            if last:
                done.discard(row)
                finished.append(route)
                term_r.append(route)
                term_s.append(OutputSignal(route.client_id, tok, True, False, cached, end))
            else:
                out_r.append(route)
                out_st.append(route.stream)
                out_s.append(OutputSignal(route.client_id, tok, False, False, cached, end))
        for route, sig in zip(term_r, term_s):
            out_r.append(route)
            out_st.append(route.stream)
            out_s.append(sig)
        for row in done:                      # terminal without a token (SGLang zero output)
            route = by_row.get(row)
            if route is not None:
                cached = None if route.first_sent else (route.cached or 0)
                route.first_sent = True
                out_r.append(route)
                out_st.append(route.stream)
                out_s.append(OutputSignal(route.client_id, None, True, False, cached, end))
                finished.append(route)
        for row in rejected.tolist():
            route = by_row.get(row)
            if route is not None:
                route.first_sent = True
                out_r.append(route)
                out_st.append(route.stream)
                out_s.append(OutputSignal(route.client_id, None, True, True, None, end))
                finished.append(route)
        return end, admitted, kv, fpm, (out_r, out_st, out_s), finished

    def _publish_pass(self, prepared: tuple) -> None:
        """The boundary transaction: admissions → KV events + forward-pass metrics → output
        signals → cleanup of overflowed streams → metrics snapshot."""
        end, admitted, kv, fpm, out, finished = prepared
        observer = self._admission_observer
        if observer is not None:
            for route in admitted:
                observer(route.client_id, route.rank, end)
        if kv:
            self._send_kv(kv)
        if fpm:
            self._send_fpm(fpm)
        out_r, out_st, out_s = out
        over = handout(out_st, out_s, time.monotonic()) if out_r else None
        overflowed = []
        if over:
            # consumers that fell behind: their streams end after what they already hold
            for i in over:
                route = out_r[i]
                route.abandoned = True
                if not out_s[i].completed:
                    overflowed.append(route)
        for route in finished:
            route.terminal_seen = True
            self._retire_route(route)
        if overflowed:
            # their requests are cancelled inside the boundary, before anything else can run
            core = self._core
            for route in overflowed:
                if route.state != "closed":
                    core.cancel(route.row)
                    self._retire_route(route)
            if self._events:
                self._send_kv(self._collect_kv_events())
        self._update_metrics()

    def _deliver(self, route: _Route, sig: OutputSignal) -> None:
        """Hand one signal out at once (a rejection at admission)."""
        if route.abandoned or route.state == "closed":
            return
        route.first_sent = True
        sig.observed_at = time.monotonic()
        route.stream._offer(sig)

    def _token(self, route: _Route, g: int) -> int:
        # a deterministic stand-in token in [1000, 32000) (the execution context picks its own)
        return 1000 + ((route.serial * 2654435761 + g * 40503 + self._seed * 97) % 31000)

    def _publish_kv_events(self) -> None:
        self._send_kv(self._collect_kv_events())

    def _send_kv(self, batches: list) -> None:
        ts = time.time()
        for rank, events in batches:
            try:
                self._sinks[rank].publish(KvEventBatch(ts=ts, events=events, dp_rank=rank))
            except Exception:     # noqa: BLE001 — a sink never stops the engine
                log.exception("KV event sink failed")

    def _collect_kv_events(self) -> list:
        """Drain every rank's KV events into (rank, events) ready to publish."""
        core = self._core
        bs = self.block_size
        batches = []
        for rank in range(self.dp_size):
            h, st, rr, kk, par, hp = core.kv_events(rank)
            sink = self._sinks[rank] if self._sinks else None
            if len(h) == 0 or sink is None:
                continue
            events: list[BlockStored | BlockRemoved] = []
            i, n = 0, len(h)
            while i < n:
                if st[i]:
                    j = i + 1
                    while j < n and st[j] and rr[j] == rr[i] and kk[j] == kk[j - 1] + 1:
                        j += 1
                    row, k0 = int(rr[i]), int(kk[i])
                    events.append(BlockStored(
                        block_hashes=tuple(int(x) for x in h[i:j]),
                        parent_block_hash=int(par[i]) if hp[i] else None,
                        token_ids=self._block_tokens(row, k0, j - i, bs),
                        block_size=bs))
                else:
                    j = i + 1
                    while j < n and not st[j]:
                        j += 1
                    events.append(BlockRemoved(block_hashes=tuple(int(x) for x in h[i:j])))
                i = j
            batches.append((rank, tuple(events)))
        return batches

    def _block_tokens(self, row: int, k0: int, nblocks: int, bs: int) -> tuple:
        route = self._by_row.get(row)
        lo, hi = k0 * bs, (k0 + nblocks) * bs
        if route is None:
            return tuple([0] * (hi - lo))
        prompt = route.tokens
        plen = len(prompt)
        out = prompt[lo:min(hi, plen)].tolist()
        if hi > plen:
            g0 = max(lo, plen) - plen
            out.extend(self._core.generated_token_ids(row, g0, hi - max(lo, plen)).tolist())
        return tuple(out)

    def _send_fpm(self, snaps: list) -> None:
        sink = self._fpm_sink
        if sink is None:
            return
        for rank, snap in snaps:
            try:
                sink(rank, snap)
            except Exception:     # noqa: BLE001
                log.exception("forward-pass metrics sink failed")

    def _collect_fpm(self, start: float, end: float) -> list:
        core = self._core
        snaps = []
        for rank in range(self.dp_size):
            if not core.pass_stats(rank)[0]:
                continue
            snap = ForwardPassSnapshot(*core.pass_fpm(rank), wall_time_secs=(end - start) / 1000.0)
            snaps.append((rank, snap))
        return snaps

    def _update_metrics(self) -> None:
        core = self._core
        for rank in range(self.dp_size):
            active, total, running, waiting, pre = core.rank_metrics(rank)
            hit = self._metrics[rank].sglang_cache_hit_tokens
            tot = self._metrics[rank].sglang_cache_total_tokens
            obs = self._sglang_obs[rank] if self._sglang_obs is not None else None
            if obs is not None:           # the latest pass that admitted prompts
                hit, tot = obs
            self._metrics[rank] = MockerMetrics(
                dp_rank=rank, active_decode_blocks=active, total_blocks=total,
                running_requests=running, waiting_requests=waiting, vllm_preemptions_total=pre,
                sglang_cache_hit_tokens=hit, sglang_cache_total_tokens=tot)
        changed, self._metrics_changed = self._metrics_changed, asyncio.Event()
        changed.set()
