"""The execution context (docs/live.md §2, docs/live.md §6): preprocessed requests in, chunk streams out, one
terminal chunk per stream whatever happens (checklist docs/live.md §9 items 19–31, 57–60)."""
import asyncio
import json
import random
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mocker.live.context import (EngineShutdown, InvalidArgument, MockerContext, PreprocessedRequest,
                                 RequestContext)
from mocker.live.engine import LiveEngineError
from mocker.live.outputs import FinishReason


def cfg(backend="vllm", speedup=1000.0, dynamo=None, dp_size=1, **engine):
    e = {"backend": backend, "speedup_ratio": speedup, "num_gpu_blocks": 256, "block_size": 4}
    e.update(engine)
    c = {"engine": e, "dp_size": dp_size}
    if dynamo:
        c["dynamo"] = dynamo
    return c


def req(tokens=(1, 2, 3), max_tokens=4, **kw):
    return PreprocessedRequest(token_ids=list(tokens), stop_conditions={"max_tokens": max_tokens}, **kw)


def run(coro, timeout=20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def chunks(stream):
    return [c async for c in stream]


async def started(config, **kw):
    ctx = MockerContext(config, seed=1, **kw)
    await ctx.start()
    return ctx


def test_tokens_then_one_length_terminal_with_usage():
    async def main():
        ctx = await started(cfg(max_model_len=4))
        out = await chunks(await ctx.generate(req((1, 2, 3), 4)))
        assert [c.finish_reason for c in out] == [None, FinishReason.LENGTH]
        assert len(out[0].token_ids) == 1 and 1000 <= out[0].token_ids[0] < 2000
        for c in out:
            assert c.completion_usage.to_dict() == {
                "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
                "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
                "completion_tokens_details": None}
        assert out[1].token_ids == []
        await ctx.cleanup()
    run(main())


def test_request_errors_use_the_reference_texts():
    async def main():
        ctx = await started(cfg(dp_size=2))
        with pytest.raises(InvalidArgument, match="max_output_tokens must be specified for mocker"):
            await ctx.generate(PreprocessedRequest(token_ids=[1, 2]))
        with pytest.raises(InvalidArgument, match="dp_rank 2 is out of bounds for dp_size 2"):
            await ctx.generate(req(routing={"dp_rank": 2}))
        with pytest.raises(InvalidArgument, match="disaggregated mocker requires a handoff ID|"
                                                  "aggregated mocker request cannot carry handoff metadata"):
            await ctx.generate(req(bootstrap_info={"bootstrap_host": "127.0.0.1", "bootstrap_port": 1,
                                                   "bootstrap_room": 1, "handoff_id": "h"}))
        assert ctx.engine.active_request_count() == 0
        await ctx.cleanup()
    run(main())


def test_requests_without_a_rank_rotate_over_ranks():
    async def main():
        ctx = await started(cfg(dp_size=2, speedup=1.0))
        streams = [await ctx.generate(req(max_tokens=500)) for _ in range(4)]
        for _ in range(100):
            per_rank = [ctx.engine.metrics(r).running_requests + ctx.engine.metrics(r).waiting_requests
                        for r in range(2)]
            if per_rank == [2, 2]:
                break
            await asyncio.sleep(0.01)
        assert per_rank == [2, 2]
        for s in streams:
            await s.aclose()
        await ctx.cleanup()
    run(main())


def test_prefill_worker_delays_its_terminal_by_the_transfer_time():
    async def main():
        ctx = await started(cfg(worker_type="prefill", kv_transfer_bytes_per_token=250_000_000,
                                kv_transfer_bandwidth=1.0))
        t0 = time.monotonic()
        s = await ctx.generate(PreprocessedRequest(token_ids=[1, 2, 3, 4]))
        first = await s.__anext__()
        assert len(first.token_ids) == 1 and first.finish_reason is None
        assert first.disaggregated_params == "dummy"
        t_first = time.monotonic() - t0
        term = await s.__anext__()
        t_term = time.monotonic() - t0
        assert t_term >= 1.0                                   # 4 × 250 MB at 1 GB/s = 1 s
        assert t_first < t_term - 0.5                          # the first token does not wait for it
        assert term.finish_reason == FinishReason.LENGTH and term.token_ids == []
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        await ctx.cleanup()
    run(main())


def test_decode_worker_requires_a_prefill_result():
    async def main():
        ctx = await started(cfg(worker_type="decode"))
        with pytest.raises(InvalidArgument, match="no prefill_result"):
            await ctx.generate(req())
        out = await chunks(await ctx.generate(req(prefill_result={"disaggregated_params": {}})))
        assert out[-1].finish_reason == FinishReason.LENGTH
        assert all(c.disaggregated_params is None for c in out)
        assert ctx.health_check_payload()["prefill_result"] == {"disaggregated_params": {}}
        await ctx.cleanup()
    run(main())


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_response_replay_plans_the_tokens(tmp_path, backend, caplog):
    table = tmp_path / "replay.jsonl"
    table.write_text(json.dumps({"request_id": "planned", "output_length": 2, "output_token_ids": [7, 8]}) + "\n")
    async def main():
        dyn = {"response_replay_trace_path": str(table)}
        dec = await started(cfg(backend, dynamo=dyn, worker_type="decode"))
        out = await chunks(await dec.generate(req(max_tokens=9, annotations=["output_replay_id:planned"],
                                                  prefill_result={})))
        assert [t for c in out for t in c.token_ids] == [7, 8]
        # an unknown key falls back to random tokens, with a warning
        out = await chunks(await dec.generate(req(max_tokens=3, annotations=["output_replay_id:nope"],
                                                  prefill_result={})))
        toks = [t for c in out for t in c.token_ids]
        assert len(toks) == 3 and all(1000 <= t < 2000 for t in toks)
        await dec.cleanup()
        pre = await started(cfg(backend, dynamo=dyn, worker_type="prefill"))
        out = await chunks(await pre.generate(req(annotations=["output_replay_id:planned"])))
        assert [t for c in out for t in c.token_ids] == [7]
        await pre.cleanup()
    run(main())
    assert any("nope" in r.getMessage() for r in caplog.records)


def test_reasoning_shapes_the_thinking_block():
    async def main():
        ctx = await started(cfg(dynamo={"reasoning": {"start_thinking_token_id": 11, "end_thinking_token_id": 12,
                                                      "thinking_ratio": 0.5}}))
        toks = [t for c in await chunks(await ctx.generate(req(max_tokens=10))) for t in c.token_ids]
        assert toks[0] == 11 and toks[4] == 12 and len(toks) == 10
        assert all(1000 <= t < 2000 for i, t in enumerate(toks) if i not in (0, 4))
        await ctx.cleanup()
    run(main())


def test_rejected_request_gets_an_error_terminal():
    async def main():
        ctx = await started(cfg(num_gpu_blocks=4, block_size=4))
        out = await chunks(await ctx.generate(req(tokens=range(1, 100), max_tokens=2)))
        assert len(out) == 1 and out[0].finish_reason == FinishReason.ERROR
        assert out[0].error_message == "request rejected: request exceeds worker admission limits"
        assert out[0].token_ids == []
        await ctx.cleanup()
    run(main())


def test_stopped_context_ends_with_one_cancelled_chunk_and_cancels_the_request():
    async def main():
        ctx = await started(cfg(speedup=1.0))
        rctx = RequestContext()
        s = await ctx.generate(req(max_tokens=10_000), rctx)
        first = await s.__anext__()
        assert first.finish_reason is None
        rctx.stop_generating()
        rest = await chunks(s)
        assert [c.finish_reason for c in rest] == [FinishReason.CANCELLED]
        for _ in range(200):
            if ctx.engine.active_request_count() == 0 and ctx.engine.metrics().running_requests == 0:
                break
            await asyncio.sleep(0.005)
        assert ctx.engine.active_request_count() == 0 and ctx.engine.metrics().running_requests == 0
        await ctx.cleanup()
    run(main())


def test_dropped_stream_cancels_and_the_id_is_reusable():
    async def main():
        ctx = await started(cfg(speedup=1.0))
        rid = "6f1c8a52-7d0e-4f3b-9a51-4c2e8b1d0f77"
        s = await ctx.generate(req(max_tokens=10_000), RequestContext(rid))
        await s.__anext__()
        await s.aclose()
        for _ in range(200):
            if ctx.engine.active_request_count() == 0:
                break
            await asyncio.sleep(0.005)
        out = await chunks(await ctx.generate(req(max_tokens=2), RequestContext(rid)))
        assert out[-1].finish_reason == FinishReason.LENGTH
        # a stream never read, then dropped, is cancelled too
        s = await ctx.generate(req(max_tokens=10_000), RequestContext(rid))
        await s.aclose()
        for _ in range(200):
            if ctx.engine.active_request_count() == 0:
                break
            await asyncio.sleep(0.005)
        assert ctx.engine.active_request_count() == 0
        await ctx.cleanup()
    run(main())


def test_max_tokens_zero_fast_path():
    async def main():
        ctx = await started(cfg())
        out = await chunks(await ctx.generate(req(max_tokens=0)))
        assert len(out) == 1 and out[0].finish_reason == FinishReason.LENGTH
        u = out[0].completion_usage
        assert (u.prompt_tokens, u.completion_tokens) == (3, 0)
        rctx = RequestContext()
        rctx.stop_generating()
        out = await chunks(await ctx.generate(req(max_tokens=0), rctx))
        assert [c.finish_reason for c in out] == [FinishReason.CANCELLED]
        await ctx.cleanup()
    run(main())


def test_sglang_zero_output_runs_in_the_engine():
    async def main():
        ctx = await started(cfg("sglang"))
        out = await chunks(await ctx.generate(req(max_tokens=0)))
        assert [c.token_ids for c in out] == [[], []] and out[-1].finish_reason == FinishReason.LENGTH
        await ctx.cleanup()
    run(main())


def test_synthetic_logprobs():
    async def main():
        ctx = await started(cfg())
        out = await chunks(await ctx.generate(req(max_tokens=2, output_options={"logprobs": 3})))
        tok = out[0].token_ids[0]
        assert out[0].log_probs == [pytest.approx(-0.1 * (tok % 10))]
        assert [e.rank for e in out[0].top_logprobs[0]] == [1, 2, 3, 4]
        out = await chunks(await ctx.generate(req(max_tokens=1)))
        assert out[0].log_probs is None and out[0].top_logprobs is None
        await ctx.cleanup()
    run(main())


def test_lifecycle_errors():
    async def main():
        ctx = MockerContext(cfg())
        with pytest.raises(EngineShutdown, match="generate called before start"):
            await ctx.generate(req())
        await ctx.start()
        with pytest.raises(EngineShutdown, match="mocker backend already started"):
            await ctx.start()
        out = await chunks(await ctx.generate(req(max_tokens=1)))     # still serving
        assert out[-1].finish_reason == FinishReason.LENGTH
        await ctx.cleanup()
        await ctx.cleanup()
    run(main())


def test_startup_failure_wakes_waiters():
    import zmq
    async def main():
        c = zmq.Context()
        busy = c.socket(zmq.PUB)
        port = busy.bind_to_random_port("tcp://127.0.0.1")
        try:
            ctx = MockerContext(cfg(dynamo={"zmq_kv_events_port": port}))
            starting = asyncio.ensure_future(ctx.start())
            await asyncio.sleep(0)
            waiter = asyncio.ensure_future(ctx.generate(req()))
            with pytest.raises(Exception):
                await starting
            with pytest.raises(EngineShutdown, match="mocker startup failed: .*" + str(port)):
                await waiter
        finally:
            busy.close(0)
            c.term()
    run(main())


def test_cleanup_ends_inflight_streams_with_cancelled():
    async def main():
        ctx = await started(cfg(speedup=1.0))
        streams = [await ctx.generate(req(max_tokens=10_000)) for _ in range(5)]
        for s in streams:
            await s.__anext__()
        await ctx.cleanup()
        for s in streams:
            rest = await chunks(s)
            assert rest[-1].finish_reason == FinishReason.CANCELLED
            assert sum(c.finish_reason is not None for c in rest) == 1
        assert ctx.engine.active_request_count() == 0
    run(main())


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_every_stream_ends_with_exactly_one_terminal(backend):
    """Completions, stops, drops, rejections and a shutdown in the middle of it all."""
    async def main():
        rng = random.Random(5)
        ctx = await started(cfg(backend, speedup=50.0, num_gpu_blocks=128))
        ended: list = []
        streaming: list = []

        async def client(i):
            rctx = RequestContext()
            big = rng.random() < 0.05
            tokens = range(1, 700) if big else [1 + i % 5] * rng.randint(4, 40)
            try:
                s = await ctx.generate(req(tokens, rng.randint(1, 30)), rctx)
            except (LiveEngineError, EngineShutdown):
                return                               # refused at submission (engine stopping)
            mode = rng.random()
            got = []
            try:
                async for c in s:
                    if not got:
                        streaming.append(i)
                    got.append(c)
                    if mode < 0.15 and len(got) == 2:
                        rctx.stop_generating()
                    if mode > 0.9 and len(got) == 1:
                        await s.aclose()
                        return
            finally:
                pass
            ended.append((i, got))

        async def stopper():
            # shut down while streams are in flight, however fast or slow this machine is
            while len(streaming) < 40:
                await asyncio.sleep(0.002)
            await ctx.cleanup()
        await asyncio.gather(stopper(), *[client(i) for i in range(250)])
        assert ended
        for i, got in ended:
            terms = [c for c in got if c.finish_reason is not None]
            assert len(terms) == 1 and got[-1] is terms[0], (i, [c.finish_reason for c in got])
        assert ctx.engine.active_request_count() == 0
        reasons = {got[-1].finish_reason for _, got in ended}
        assert FinishReason.LENGTH in reasons and FinishReason.CANCELLED in reasons
    run(main(), timeout=60)


def test_prometheus_exposition_names():
    async def main():
        ctx = await started(cfg(speedup=100.0))
        for _ in range(3):
            await chunks(await ctx.generate(req(tokens=range(1, 33), max_tokens=5)))
        await asyncio.sleep(0.02)
        from prometheus_client import generate_latest
        text = generate_latest(ctx.registry).decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                     "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                     "vllm:e2e_request_latency_seconds", "vllm:prefix_cache_queries"):
            assert name in fams, sorted(fams)
        ttft = [s for s in fams["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
        assert ttft and ttft[0].value == 3
        q = [s for s in fams["vllm:prefix_cache_queries"].samples if s.name.endswith("_total")]
        assert q[0].value == 3 * 32
        await ctx.cleanup()
    run(main())


def test_engine_shutdown_under_open_streams_still_ends_each_with_a_terminal():
    async def main():
        ctx = await started(cfg(speedup=1.0))
        streams = [await ctx.generate(req(max_tokens=10_000)) for _ in range(3)]
        await streams[0].__anext__()
        await ctx.engine.shutdown()                      # not a cleanup: the engine just goes away
        for s in streams:
            rest = await chunks(s)
            assert [c.finish_reason for c in rest if c.finish_reason is not None] == [FinishReason.ERROR]
            assert rest[-1].error_message == "All output transmitters closed"
        assert ctx.engine.active_request_count() == 0
        await ctx.cleanup()
    run(main())


def test_forward_pass_metrics_reach_the_sink_as_msgpack_maps():
    import msgpack
    async def main():
        got = []
        ctx = MockerContext(cfg(speedup=100.0), fpm_sink=lambda topic, payload: got.append((topic, payload)),
                            worker_id="w1")
        await ctx.start()
        await chunks(await ctx.generate(req(tokens=range(1, 21), max_tokens=3)))
        await ctx.cleanup()
        msgs = [msgpack.unpackb(p) for t, p in got]
        assert {t for t, _ in got} == {"forward-pass-metrics"}
        assert [m["counter_id"] for m in msgs] == list(range(1, len(msgs) + 1))
        assert msgs[0]["worker_id"] == "w1" and msgs[0]["version"] == 1
        assert msgs[0]["scheduled_requests"]["num_prefill_requests"] == 1
        assert msgs[0]["scheduled_requests"]["sum_prefill_tokens"] == 20
        assert sum(m["scheduled_requests"]["num_decode_requests"] for m in msgs) == 2
    run(main())


def test_handout_lead_reaches_the_engine_and_is_checked_up_front():
    from mocker.live.engine import LiveEngineError

    async def main():
        ctx = await started(cfg(), handout_lead=0)
        strict = ctx.engine._handout_lead(2000, 100.0)          # never early, however many tokens
        await ctx.cleanup()
        ctx = await started(cfg(), handout_lead=0.002)
        fixed = ctx.engine._handout_lead(2000, 100.0)
        capped = ctx.engine._handout_lead(2000, 2.0)            # at most half the pass
        await ctx.cleanup()
        return strict, fixed, capped

    assert run(main()) == (0.0, 0.002, 0.001)
    with pytest.raises(LiveEngineError, match="handout_lead"):
        MockerContext(cfg(), handout_lead="soon")
