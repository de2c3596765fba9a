"""The execution context: a preprocessed LLM request in, a stream of ``LLMEngineOutput`` out
(docs/live.md §2, and the parts of the backend example engine of docs/live.md §6 it shares).

``MockerContext`` owns one ``LiveEngine`` (all dp ranks, ``FullResponse`` buffering), its KV
event publishers and its Prometheus families.  ``await ctx.generate(request, rctx)`` validates
and submits (errors are raised there, with the reference's texts) and returns an async
iterator of chunks that always ends with exactly one terminal chunk — length, cancelled or
error — unless its consumer walked away first (the request is then cancelled).

Not here yet: the disaggregated handoff over the bootstrap TCP protocol (docs/live.md §3).  Prefill and
decode workers run without it: a prefill worker generates one token, stamps
``disaggregated_params`` and delays its terminal by the modeled KV transfer time; a decode
worker requires a ``prefill_result``.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping

from mocker.config import ConfigError, normalize_config
from mocker.live.engine import (DirectRequest, FullResponse, LiveEngine, LiveEngineError,
                                StreamInterrupted, check_handout_lead)
from mocker.live.outputs import CompletionUsage, LLMEngineOutput
from mocker.live.replay_table import ResponseReplayTable, replay_key, resolve_planned_tokens
from mocker.live.shaping import (ReasoningConfig, TokenShaper, health_check_payload,
                                 length_terminal, stamp_synthetic_logprobs, token_chunk)

if TYPE_CHECKING:                    # imported lazily at run time (optional dependencies)
    from mocker.events.metrics import FpmPublisher, PrometheusMetrics

log = logging.getLogger("mocker.live.context")


class EngineShutdown(RuntimeError):
    """The engine is not (or no longer) able to serve: not started, started twice, stopped."""


class InvalidArgument(ValueError):
    """A request the engine cannot run as given."""


class RequestContext:
    """The caller's handle on one request: ``stop_generating()`` makes its stream end with a
    ``cancelled`` chunk."""

    def __init__(self, id: str | None = None):
        self.id = id if id is not None else str(uuidlib.uuid4())
        self._stopped = False
        self._callbacks: list = []

    def stop_generating(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for cb in self._callbacks:
            cb()
        self._callbacks.clear()

    @property
    def is_stopped(self) -> bool:
        return self._stopped

    def _on_stop(self, cb) -> None:
        if self._stopped:
            cb()
        else:
            self._callbacks.append(cb)

    def _forget(self, cb) -> None:
        if cb in self._callbacks:
            self._callbacks.remove(cb)


@dataclass
class PreprocessedRequest:
    """What the frontend hands the engine (the fields the mocker reads)."""
    token_ids: list[int]
    stop_conditions: dict = field(default_factory=dict)        # max_tokens, ...
    sampling_options: dict = field(default_factory=dict)
    output_options: dict = field(default_factory=dict)         # logprobs
    annotations: list[str] = field(default_factory=list)       # e.g. "output_replay_id:<key>"
    routing: dict | None = None                                # {"dp_rank": n}
    prefill_result: dict | None = None                         # decode workers
    bootstrap_info: dict | None = None                         # disaggregated handoff
    request_timestamp_ms: float | None = None
    model: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PreprocessedRequest":
        if not isinstance(d, Mapping):
            raise InvalidArgument(f"request must be an object, got {type(d).__name__}")
        toks = d.get("token_ids")
        if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                 for t in toks):
            raise InvalidArgument("token_ids must be a list of non-negative integers")
        def obj(name):
            v = d.get(name)
            if v is not None and not isinstance(v, Mapping):
                raise InvalidArgument(f"{name} must be an object, got {type(v).__name__}")
            return dict(v) if v is not None else None
        return cls(token_ids=toks, stop_conditions=obj("stop_conditions") or {},
                   sampling_options=obj("sampling_options") or {},
                   output_options=obj("output_options") or {},
                   annotations=list(d.get("annotations") or []), routing=obj("routing"),
                   prefill_result=obj("prefill_result"), bootstrap_info=obj("bootstrap_info"),
                   request_timestamp_ms=d.get("request_timestamp_ms"), model=d.get("model"))


class MockerContext:
    """The engine behind a serving endpoint: ``await start()``, ``await generate(req, rctx)``,
    ``await cleanup()``."""

    def __init__(self, config: Any = None, *, model_name: str = "mocker-model", seed: int | None = None,
                 prometheus: bool = True, registry=None, fpm_sink=None, worker_id: str | None = None,
                 handout_lead: float | str = "auto"):
        """``fpm_sink(topic, payload)``: receives every forward-pass-metrics message (the msgpack
        map of docs/live.md §5.2 on topic ``forward-pass-metrics``, with idle heartbeats).
        ``handout_lead``: as ``LiveEngine`` ("auto" centres each pass's hand-out on its modeled
        end; 0 never hands a token out early)."""
        check_handout_lead(handout_lead)
        self._handout_lead = handout_lead
        try:
            self.config = normalize_config(config)
            eng, dyn = self.config["engine"], self.config["dynamo"]
            self.reasoning = ReasoningConfig.from_dict(dyn["reasoning"]) if dyn["reasoning"] else None
            dp = int(self.config["dp_size"])
            for name in ("zmq_kv_events_port", "zmq_replay_port", "bootstrap_port"):
                base = dyn[name]
                if base and base + dp - 1 > 65535:
                    raise ConfigError(f"dynamo.{name}: {base} + {dp - 1} (one port per dp rank) is beyond 65535")
        except ConfigError as e:
            raise ConfigError(f"invalid Mocker engine arguments: {e}") from e
        self.engine_type = eng["backend"]
        self.worker_type = eng["worker_type"]
        self.is_prefill = self.worker_type == "prefill"
        self.is_decode = self.worker_type == "decode"
        self.dp_size = int(self.config["dp_size"])
        self.max_model_len = eng["max_model_len"]
        self.model_name = model_name
        self._kv_bytes = eng["kv_transfer_bytes_per_token"]
        self._kv_bw = eng["kv_transfer_bandwidth"]
        path = dyn["response_replay_trace_path"]
        # a broken replay table is fatal: ReplayTableError names the file and line
        self.replay_table = ResponseReplayTable.load(path) if path else None
        self._rng = random.Random(seed)
        self._rr = itertools.count()
        self._state = "new"                 # new → starting → ready | failed → stopped
        self._failure: str | None = None
        self._ready = asyncio.Event()       # binds to the running loop when first waited on
        self.engine: LiveEngine | None = None
        self._sinks: list = []
        self._inflight: set[RequestContext] = set()
        self._tasks: set[asyncio.Task] = set()
        self._want_prometheus = prometheus
        self._registry = registry
        self.prometheus: PrometheusMetrics | None = None
        self._fpm_sink = fpm_sink
        self.worker_id = worker_id if worker_id is not None else str(uuidlib.uuid4())
        self._fpm: FpmPublisher | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "new":
            raise EngineShutdown("mocker backend already started")
        self._state = "starting"
        try:
            if self._want_prometheus:
                from mocker.events.metrics import PrometheusMetrics
                self.prometheus = PrometheusMetrics(self.engine_type, self._registry, dp_size=self.dp_size)
            self._sinks = self._make_kv_sinks()
            fpm_hook = None
            if self._fpm_sink is not None:
                try:
                    from mocker.events.metrics import FpmPublisher
                    fpm = self._fpm = FpmPublisher(self.worker_id, self._fpm_sink, dp_size=self.dp_size)
                    fpm.start()
                    fpm_hook = lambda rank, snap: fpm.publish(snap, rank)   # noqa: E731
                except Exception:     # noqa: BLE001 — serving goes on without forward-pass metrics
                    log.exception("creating the forward-pass metrics publisher failed")
                    self._fpm = None
            engine = self.engine = await LiveEngine.start(self.config, buffering=FullResponse(),
                                                          kv_event_sinks=self._sinks or None,
                                                          fpm_sink=fpm_hook, handout_lead=self._handout_lead)
            if self.prometheus is not None:
                for rank in range(self.dp_size):
                    self._spawn(self._watch_metrics(engine, self.prometheus, rank))
        except BaseException as e:
            for s in self._sinks:
                s.close()
            if self._fpm is not None:
                await self._fpm.aclose()
            self._failure = str(e) or type(e).__name__
            self._state = "failed"
            self._ready.set()
            raise
        self._state = "ready"
        self._ready.set()

    def _make_kv_sinks(self) -> list:
        """Per rank: a ZMQ publisher on ``zmq_kv_events_port + rank`` (replay on
        ``zmq_replay_port + rank``); none for decode workers or without prefix caching."""
        dyn, eng = self.config["dynamo"], self.config["engine"]
        port = dyn["zmq_kv_events_port"]
        if port is None or self.is_decode or not eng["enable_prefix_caching"]:
            return []
        from mocker.events.zmq import ZmqKvEventPublisher
        sinks = []
        try:
            for rank in range(self.dp_size):
                rp = dyn["zmq_replay_port"]
                sinks.append(ZmqKvEventPublisher(port=port + rank if port else 0,
                                                 replay_port=(rp + rank if rp else 0) if rp is not None else None))
        except Exception:
            for s in sinks:
                s.close()
            raise
        return sinks

    @staticmethod
    async def _watch_metrics(engine: LiveEngine, prometheus: PrometheusMetrics, rank: int) -> None:
        async for m in engine.watch_metrics(rank):
            try:
                prometheus.update([m])
            except Exception:     # noqa: BLE001
                log.exception("updating the Prometheus metrics failed")

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _await_ready(self) -> LiveEngine:
        if self._state == "new":
            raise EngineShutdown("generate called before start")
        if self._state == "starting":
            await self._ready.wait()
        if self._state == "failed":
            raise EngineShutdown(f"mocker startup failed: {self._failure}")
        if self._state != "ready" or self.engine is None:
            raise EngineShutdown("mocker engine is shut down")
        return self.engine

    async def cleanup(self) -> None:
        """Stop every in-flight request (each stream ends with ``cancelled``), then the engine.
        Repeated calls are fine."""
        for rctx in list(self._inflight):
            rctx.stop_generating()
        await asyncio.sleep(0)
        if self.engine is not None:
            await self.engine.shutdown()
        if self._fpm is not None:
            await self._fpm.aclose()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._state in ("ready", "starting"):
            self._state = "stopped"

    def health_check_payload(self) -> dict:
        return health_check_payload(self.is_decode)

    @property
    def registry(self):
        return self.prometheus.registry if self.prometheus is not None else None

    # -- requests ----------------------------------------------------------------------------
    async def generate(self, request: PreprocessedRequest | Mapping[str, Any],
                       rctx: RequestContext | None = None) -> AsyncIterator[LLMEngineOutput]:
        """Validate and submit ``request``; returns its chunk stream.  Raises ``InvalidArgument``
        / ``EngineShutdown`` / ``LiveEngineError`` with the reference's texts."""
        if not isinstance(request, PreprocessedRequest):
            request = PreprocessedRequest.from_dict(request)
        rctx = rctx if rctx is not None else RequestContext()
        engine = await self._await_ready()
        prompt = request.token_ids
        # 1. dp rank
        routing = request.routing or {}
        if routing.get("dp_rank") is not None:
            dp_rank = routing["dp_rank"]
            if isinstance(dp_rank, bool) or not isinstance(dp_rank, int) or dp_rank < 0:
                raise InvalidArgument(f"routing.dp_rank must be a non-negative integer, got {dp_rank!r}")
        else:
            dp_rank = next(self._rr) % self.dp_size
        if dp_rank >= self.dp_size:
            raise InvalidArgument(f"dp_rank {dp_rank} is out of bounds for dp_size {self.dp_size}")
        # 2. client id
        try:
            client_id = uuidlib.UUID(str(rctx.id))
        except ValueError:
            client_id = uuidlib.uuid4()
        # 3. handoff metadata (the bootstrap protocol is not implemented: no handoff ids)
        boot = request.bootstrap_info
        if boot is not None:
            if boot.get("handoff_id") is not None:
                if self.worker_type == "aggregated":
                    raise InvalidArgument("aggregated mocker request cannot carry handoff metadata")
                if self.engine_type == "trtllm":
                    raise InvalidArgument("mocker handoff does not support TRT-LLM")
                raise InvalidArgument("mocker does not implement the disaggregated bootstrap handoff yet; "
                                      "send prefill and decode requests without handoff_id")
            if self.worker_type != "aggregated":
                raise InvalidArgument("disaggregated mocker requires a handoff ID")
        if self.is_decode and request.prefill_result is None:
            raise InvalidArgument("mocker decode worker received request with no prefill_result; "
                                  "decode workers only serve requests a prefill worker has run")
        # 4. output budget
        if self.is_prefill:
            requested_max = 1
        else:
            mt = request.stop_conditions.get("max_tokens")
            if mt is None:
                raise InvalidArgument("max_output_tokens must be specified for mocker")
            if isinstance(mt, bool) or not isinstance(mt, int) or mt < 0:
                raise InvalidArgument(f"stop_conditions.max_tokens must be a non-negative integer, got {mt!r}")
            requested_max = mt
        logprobs = request.output_options.get("logprobs")
        # 5. response replay
        key = replay_key(request.annotations)
        plan = resolve_planned_tokens(self.replay_table, key, is_prefill=self.is_prefill) if key else None
        max_out = len(plan) if plan is not None else requested_max
        eff = max_out
        if self.max_model_len:
            eff = min(max_out, max(0, self.max_model_len - len(prompt)))
        model = request.model or self.model_name
        if self.prometheus is not None:
            self.prometheus.set_model_name(model)
        # 6. the max_tokens == 0 fast path (engines that cannot run zero-output requests)
        if max_out == 0 and plan is None and self.engine_type != "sglang":
            return self._zero_output(rctx, len(prompt))
        direct = DirectRequest(tokens=prompt, max_output_tokens=max_out, output_token_ids=plan,
                               uuid=client_id, dp_rank=dp_rank,
                               arrival_timestamp_ms=request.request_timestamp_ms)
        stream = await engine.submit(direct)
        timer = None
        if self.prometheus is not None:
            timer = self.prometheus.request_timer(self.is_prefill, dp_rank=dp_rank, model_name=model)
        shaper = TokenShaper(max_output_tokens=max_out, effective_max=eff, planned=plan is not None,
                             reasoning=self.reasoning, rng=self._rng)
        self._inflight.add(rctx)
        return ResponseStream(self._respond(rctx, stream, shaper, len(prompt), logprobs, timer, dp_rank),
                              stream)

    @staticmethod
    async def _zero_output(rctx: RequestContext, prompt_len: int) -> AsyncIterator[LLMEngineOutput]:
        out = LLMEngineOutput.cancelled() if rctx.is_stopped else LLMEngineOutput.length()
        out.completion_usage = CompletionUsage.of(prompt_len, 0)
        yield out


    def _handoff_delay_ms(self, prompt_len: int) -> float | None:
        if not self._kv_bytes or not self._kv_bw or self._kv_bw <= 0:
            return None
        return prompt_len * self._kv_bytes / (self._kv_bw * 1e9) * 1000.0

    async def _respond(self, rctx, stream, shaper, prompt_len, logprobs, timer, dp_rank
                       ) -> AsyncIterator[LLMEngineOutput]:
        interrupt = stream.interrupt
        rctx._on_stop(interrupt)
        cached_prefix = None
        normal = False
        try:
            while True:
                try:
                    sig = await stream.recv()
                except StreamInterrupted:
                    yield LLMEngineOutput.cancelled()
                    return
                if sig is None:
                    yield LLMEngineOutput.error("All output transmitters closed")
                    return
                if sig.rejected:
                    yield LLMEngineOutput.error("request rejected: request exceeds worker admission limits")
                    return
                if sig.cached_tokens is not None:
                    cached_prefix = sig.cached_tokens
                    if timer is not None:
                        timer.record_prefix_cache(prompt_len, sig.cached_tokens)
                tokens = shaper.next_token_ids(sig.token_id)
                chunk = token_chunk(tokens, is_prefill=self.is_prefill, prompt_tokens=prompt_len,
                                    token_count=shaper.token_count, cached_tokens=sig.cached_tokens)
                if logprobs is not None and tokens:
                    stamp_synthetic_logprobs(chunk, tokens[0], logprobs)
                if sig.completed and shaper.completed_early:
                    yield LLMEngineOutput.error("Completion signal received before max tokens reached")
                    return
                if timer is not None and tokens:
                    timer.on_tokens(len(tokens))
                yield chunk
                if not sig.completed:
                    continue
                if self.is_prefill:
                    # no bootstrap session: the KV transfer still takes its (unscaled) time
                    delay = self._handoff_delay_ms(prompt_len)
                    if delay:
                        try:
                            await _interruptible_sleep(rctx, max(0.0, delay) / 1000.0)
                        except StreamInterrupted:
                            yield LLMEngineOutput.cancelled()
                            return
                normal = True
                if timer is not None:
                    timer.on_complete()
                yield length_terminal(prompt_tokens=prompt_len, token_count=shaper.token_count,
                                      cached_prefix=cached_prefix)
                return
        finally:
            rctx._forget(interrupt)
            self._inflight.discard(rctx)
            if not normal:
                stream.close()          # cancel the live request (no-op once it ended)


class ResponseStream:
    """The chunks of one request.  ``aclose()`` (or leaving ``async with``) before the terminal
    cancels the request, even if the stream was never read."""

    __slots__ = ("_gen", "_live")

    def __init__(self, gen, live):
        self._gen = gen
        self._live = live

    def __aiter__(self):
        return self

    def __anext__(self):
        return self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()
        self._live.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


async def _interruptible_sleep(rctx: RequestContext, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)
    handle = loop.call_later(seconds, wake)

    def stop():
        if not fut.done():
            fut.set_exception(StreamInterrupted())
    rctx._on_stop(stop)
    try:
        await fut
    finally:
        handle.cancel()
        rctx._forget(stop)
