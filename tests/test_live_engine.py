"""LiveEngine: streams, identity, cancellation, buffering, pacing and the shared core
(docs/live.md §1 and the checklist of docs/live.md §9).  Every test runs its own event loop and bounds every
wait, so a hang fails instead of stalling the suite."""
import asyncio
import random

import numpy as np
import pytest

from mocker.live.engine import (CancelOnOverflow, DirectRequest, FullResponse, LiveEngine,
                                LiveEngineError)

FAST = 1000.0      # speedup ratio for tests that only care about order, not wall time

BACKENDS = ["vllm", "sglang"]


def cfg(backend="vllm", speedup=FAST, **engine):
    e = {"backend": backend, "speedup_ratio": speedup, "num_gpu_blocks": 512, "block_size": 16}
    e.update(engine)
    dp = e.pop("dp_size", 1)
    return {"engine": e, "dp_size": dp}


def run(coro, timeout=20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def collect(stream, limit=10_000):
    out = []
    for _ in range(limit):
        sig = await stream.recv()
        if sig is None:
            return out
        out.append(sig)
    raise AssertionError("stream did not end")


async def idle(eng, timeout=5.0):
    """Wait until the engine has no routes and no scheduled requests."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        m = [eng.metrics(r) for r in range(eng.dp_size)]
        if eng.active_request_count() == 0 and all(x.running_requests == 0 and x.waiting_requests == 0 for x in m):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"engine not idle: {eng.active_request_count()} routes, {m}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_planned_request_streams_its_tokens_then_ends(backend):
    async def main():
        eng = await LiveEngine.start(cfg(backend))
        s = await eng.submit(DirectRequest(tokens=list(range(1, 40)), max_output_tokens=99,
                                           output_token_ids=[41, 42, 43], uuid="a"))
        sigs = await collect(s)
        assert [(x.uuid, x.token_id, x.completed) for x in sigs] == [
            ("a", 41, False), ("a", 42, False), ("a", 43, True)]
        assert sigs[0].cached_tokens == 0 and sigs[1].cached_tokens is None
        assert all(b.modeled_ms > a.modeled_ms for a, b in zip(sigs, sigs[1:]))
        assert eng.active_request_count() == 0
        await eng.shutdown()
    run(main())


def test_duplicate_active_id_is_refused_and_original_survives():
    async def main():
        eng = await LiveEngine.start(cfg(speedup=1.0))
        s = await eng.submit(DirectRequest(tokens=[1] * 20, max_output_tokens=5, uuid="x"))
        with pytest.raises(LiveEngineError, match="request x is already active"):
            await eng.submit(DirectRequest(tokens=[2] * 20, max_output_tokens=5, uuid="x"))
        assert eng.active_request_count() == 1
        sigs = await collect(s)
        assert len(sigs) == 5 and sigs[-1].completed
        await eng.shutdown()
    run(main())


def test_dropped_registration_closes_stream_and_frees_id():
    async def main():
        eng = await LiveEngine.start(cfg())
        reg, s = eng.prepare_request(DirectRequest(tokens=[1] * 8, max_output_tokens=2, uuid="p"))
        assert eng.active_request_count() == 1
        reg.close()
        assert await s.recv() is None
        assert eng.active_request_count() == 0
        s2 = await eng.submit(DirectRequest(tokens=[1] * 8, max_output_tokens=2, uuid="p"))
        assert len(await collect(s2)) == 2
        await eng.shutdown()
    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_and_drop_leave_engine_idle_and_id_reusable(backend):
    async def main():
        eng = await LiveEngine.start(cfg(backend, speedup=20.0))
        assert await eng.cancel("nobody") is False
        s = await eng.submit(DirectRequest(tokens=[3] * 64, max_output_tokens=500, uuid="c"))
        first = await s.recv()
        assert first.token_id is not None
        assert await eng.cancel("c") is True
        rest = await collect(s)
        assert all(not x.completed for x in rest)           # no terminal after a cancel
        await idle(eng)
        # drop (consumer gone) instead of cancel
        s = await eng.submit(DirectRequest(tokens=[3] * 64, max_output_tokens=500, uuid="c"))
        await s.recv()
        s.close()
        await idle(eng)
        s = await eng.submit(DirectRequest(tokens=[3] * 64, max_output_tokens=1, uuid="c"))
        sigs = await collect(s)
        assert len(sigs) == 1 and sigs[0].completed
        await eng.shutdown()
    run(main())


def test_cancel_after_terminal_returns_false_and_id_reusable():
    async def main():
        eng = await LiveEngine.start(cfg())
        s = await eng.submit(DirectRequest(tokens=[5] * 16, max_output_tokens=1, uuid="t"))
        await asyncio.sleep(0.05)                     # completed in the scheduler, unread
        assert await eng.cancel("t") is False
        sigs = await collect(s)
        assert len(sigs) == 1 and sigs[0].completed
        s = await eng.submit(DirectRequest(tokens=[5] * 16, max_output_tokens=2, uuid="t"))
        assert len(await collect(s)) == 2
        await eng.shutdown()
    run(main())


def test_cancel_on_overflow_abandons_slow_stream_without_stalling_others():
    async def main():
        eng = await LiveEngine.start(cfg(), buffering=CancelOnOverflow(1))
        slow, fast = await asyncio.gather(
            eng.submit(DirectRequest(tokens=[1] * 16, max_output_tokens=3, uuid="slow")),
            eng.submit(DirectRequest(tokens=[2] * 16, max_output_tokens=1, uuid="fast")))
        f = await collect(fast)
        assert len(f) == 1 and f[0].completed
        await idle(eng)
        got = await collect(slow)
        assert len(got) == 1 and not got[0].completed
        assert eng.passes == 2
        await eng.shutdown()
    run(main())


def test_full_response_buffers_whole_unread_responses():
    async def main():
        eng = await LiveEngine.start(cfg(), buffering=FullResponse())
        streams = await asyncio.gather(*[
            eng.submit(DirectRequest(tokens=[i + 1] * 16, max_output_tokens=32)) for i in range(4)])
        await idle(eng)
        for s in streams:
            sigs = await collect(s)
            assert len(sigs) == 32 and sigs[-1].completed and sum(x.completed for x in sigs) == 1
        await eng.shutdown()
    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_output_rules(backend):
    async def main():
        eng = await LiveEngine.start(cfg(backend))
        with pytest.raises(LiveEngineError, match="at least one output token"):
            eng.prepare_request(DirectRequest(tokens=[1] * 8, max_output_tokens=4, output_token_ids=[]))
        assert eng.active_request_count() == 0
        req = DirectRequest(tokens=[1] * 8, max_output_tokens=0)
        if backend == "vllm":
            with pytest.raises(LiveEngineError, match="at least one output token"):
                await eng.submit(req)
        else:
            sigs = await collect(await eng.submit(req))
            assert [(x.token_id, x.completed, x.rejected) for x in sigs] == [(None, True, False)]
        assert eng.active_request_count() == 0
        await eng.shutdown()
    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_oversized_prompt_is_rejected_with_one_terminal(backend):
    async def main():
        eng = await LiveEngine.start(cfg(backend, num_gpu_blocks=4, block_size=4))
        sigs = await collect(await eng.submit(DirectRequest(tokens=list(range(100)), max_output_tokens=3)))
        assert [(x.token_id, x.completed, x.rejected) for x in sigs] == [(None, True, True)]
        await idle(eng)
        await eng.shutdown()
    run(main())


def test_submits_during_a_pass_are_acknowledged_together_at_the_boundary():
    async def main():
        eng = await LiveEngine.start(cfg(speedup=1.0))
        first = await eng.submit(DirectRequest(tokens=list(range(2000)), max_output_tokens=2, uuid="big"))
        # the big prefill pass is running now; a burst of submits waits for its end
        t0 = eng.now_ms()
        acks = []

        async def one(i):
            s = await eng.submit(DirectRequest(tokens=[7 + i] * 16, max_output_tokens=1))
            acks.append(eng.now_ms())
            return s
        streams = await asyncio.gather(*[one(i) for i in range(10)])
        assert max(acks) - min(acks) < 2.0              # acknowledged together
        firsts = [(await collect(s))[0] for s in streams]
        assert len({x.modeled_ms for x in firsts}) == 1  # all joined the same pass
        big = await collect(first)
        assert big[0].modeled_ms <= firsts[0].modeled_ms and min(acks) >= big[0].modeled_ms - 1.0
        assert t0 < big[0].modeled_ms
        await eng.shutdown()
    run(main())


def test_data_parallel_ranks_share_the_pass_barrier():
    async def main():
        eng = await LiveEngine.start(cfg(dp_size=2, speedup=1.0))
        a, b = await asyncio.gather(
            eng.submit(DirectRequest(tokens=list(range(1, 1500)), max_output_tokens=1, dp_rank=0)),
            eng.submit(DirectRequest(tokens=[9] * 16, max_output_tokens=1, dp_rank=1)))
        sa, sb = await collect(a), await collect(b)
        assert sa[0].modeled_ms == sb[0].modeled_ms     # the short rank waits for the long one
        with pytest.raises(LiveEngineError, match="dp_rank 2 is out of bounds for dp_size 2"):
            eng.prepare_request(DirectRequest(tokens=[1], max_output_tokens=1, dp_rank=2))
        await eng.shutdown()
    run(main())


def test_sglang_cache_metrics_see_repeated_prompts():
    async def main():
        eng = await LiveEngine.start(cfg("sglang", block_size=1))
        prompt = list(range(100, 400))
        await collect(await eng.submit(DirectRequest(tokens=prompt, max_output_tokens=2)))
        m = eng.metrics(0)
        assert m.sglang_cache_hit_tokens == 0 and m.sglang_cache_total_tokens > 0
        await collect(await eng.submit(DirectRequest(tokens=prompt, max_output_tokens=2)))
        m = eng.metrics(0)
        assert 0 < m.sglang_cache_hit_tokens <= m.sglang_cache_total_tokens
        await eng.shutdown()
    run(main())


def test_shutdown_ends_every_stream_and_is_idempotent():
    async def main():
        eng = await LiveEngine.start(cfg(speedup=1.0))
        streams = [await eng.submit(DirectRequest(tokens=[i + 1] * 32, max_output_tokens=10_000))
                   for i in range(5)]
        await streams[0].recv()
        await eng.shutdown()
        await eng.shutdown()
        for s in streams:
            await collect(s)                              # ends (EOS), nothing hangs
        assert eng.active_request_count() == 0
        with pytest.raises(LiveEngineError, match="not running"):
            eng.prepare_request(DirectRequest(tokens=[1], max_output_tokens=1))
    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_streams_with_random_cancellations_each_end_once(backend):
    async def main():
        rng = random.Random(7)
        eng = await LiveEngine.start(cfg(backend, speedup=50.0, num_gpu_blocks=256))
        results = {}

        async def client(i):
            tokens = [1 + (i % 7)] * rng.randint(16, 64) + [1000 + i] * rng.randint(1, 40)
            s = await eng.submit(DirectRequest(tokens=tokens, max_output_tokens=rng.randint(1, 40), uuid=i))
            mode = rng.random()
            got = []
            while True:
                if mode < 0.2 and len(got) >= 2:
                    await eng.cancel(i)
                    got.extend(await collect(s))
                    results[i] = ("cancelled", got)
                    return
                if mode > 0.9 and len(got) >= 1:
                    s.close()
                    results[i] = ("dropped", got)
                    return
                sig = await s.recv()
                if sig is None:
                    results[i] = ("ended", got)
                    return
                got.append(sig)

        await asyncio.gather(*[client(i) for i in range(300)])
        await idle(eng)
        for i, (how, got) in results.items():
            terminals = sum(x.completed for x in got)
            if how == "ended":
                assert terminals == 1 and got[-1].completed, (i, got)
            else:
                assert terminals <= 1
        await eng.shutdown()
    run(main(), timeout=60)


class _Collect:
    def __init__(self):
        self.batches = []
        self.closed = False

    def publish(self, batch):
        self.batches.append(batch)

    def close(self):
        self.closed = True


@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_events_rebuild_the_cached_hash_set(backend):
    async def main():
        sink = _Collect()
        eng = await LiveEngine.start(cfg(backend, num_gpu_blocks=40, block_size=4), kv_event_sinks=[sink])
        rng = random.Random(3)
        prefixes = [[rng.randrange(1, 50) for _ in range(12)] for _ in range(4)]
        streams = []
        for i in range(40):
            tokens = rng.choice(prefixes) + [rng.randrange(1, 50) for _ in range(rng.randint(1, 20))]
            streams.append(await eng.submit(DirectRequest(tokens=tokens, max_output_tokens=rng.randint(1, 9))))
        for s in streams:
            await collect(s)
        await idle(eng)
        held = set()
        removed_any = False
        for b in sink.batches:
            for ev in b.events:
                if type(ev).__name__ == "BlockStored":
                    assert len(ev.token_ids) == len(ev.block_hashes) * ev.block_size
                    held.update(ev.block_hashes)
                else:
                    removed_any = True
                    held.difference_update(ev.block_hashes)
        assert removed_any                                # the pool was small enough to evict
        assert held == eng._core.cached_hashes(0)
        await eng.shutdown()
        assert sink.closed
    run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_pass_metrics_describe_each_pass(backend):
    async def main():
        snaps = []
        eng = await LiveEngine.start(cfg(backend, speedup=1.0, block_size=4),
                                     fpm_sink=lambda rank, s: snaps.append((rank, s)))
        a, b = await asyncio.gather(
            eng.submit(DirectRequest(tokens=list(range(1, 41)), max_output_tokens=3)),
            eng.submit(DirectRequest(tokens=list(range(100, 124)), max_output_tokens=3)))
        await collect(a)
        await collect(b)
        await eng.shutdown()
        first = snaps[0][1]
        assert (first.num_prefill_requests, first.sum_prefill_tokens, first.sum_prefill_kv_tokens) == (2, 64, 0)
        assert first.var_prefill_length == pytest.approx(64.0)          # lengths 40 and 24
        assert first.wall_time_secs > 0
        decodes = [s for _, s in snaps if s.num_decode_requests]
        assert decodes and all(s.num_prefill_requests == 0 for s in decodes)
        assert decodes[0].num_decode_requests == 2
        assert decodes[0].sum_decode_kv_tokens == 40 + 24 + 2          # context before the 2nd token
        assert sum(s.num_decode_requests for s in decodes) == 4           # tokens 2 and 3 of each
    run(main())


def test_closing_a_stream_while_its_submit_waits_does_not_hang_the_submitter():
    async def main():
        eng = await LiveEngine.start(cfg(speedup=1.0))
        await eng.submit(DirectRequest(tokens=list(range(3000)), max_output_tokens=2))   # a long pass runs
        reg, s = eng.prepare_request(DirectRequest(tokens=[1] * 8, max_output_tokens=5, uuid="q"))
        pending = asyncio.ensure_future(eng.submit_prepared(reg))
        await asyncio.sleep(0)
        s.close()
        await asyncio.wait_for(pending, 5)
        assert await s.recv() is None
        await idle(eng)
        await eng.shutdown()
    run(main())


def test_admissions_are_observed_before_the_request_output():
    async def main():
        seen = []
        eng = await LiveEngine.start(cfg(), admission_observer=lambda cid, rank, at: seen.append(cid))
        s = await eng.submit(DirectRequest(tokens=[4] * 16, max_output_tokens=2, uuid="obs"))
        first = await s.recv()
        assert seen == ["obs"] and first.token_id is not None
        await collect(s)
        await eng.shutdown()
    run(main())


def test_a_failing_admission_observer_fails_shutdown_the_same_way_twice():
    async def main():
        def boom(cid, rank, at):
            raise RuntimeError("admission receiver closed")
        eng = await LiveEngine.start(cfg(), admission_observer=boom)
        s = await eng.submit(DirectRequest(tokens=[4] * 16, max_output_tokens=2))
        assert await collect(s) == []                   # the stream still ends
        for _ in range(2):
            with pytest.raises(RuntimeError, match="admission receiver closed"):
                await eng.shutdown()
        assert eng.active_request_count() == 0
    run(main())


def test_aborting_the_caller_of_a_deferred_submit_still_cancels_the_request():
    async def main():
        eng = await LiveEngine.start(cfg(speedup=1.0))
        await eng.submit(DirectRequest(tokens=list(range(3000)), max_output_tokens=1))    # a long pass
        task = asyncio.ensure_future(eng.submit(DirectRequest(tokens=[1] * 8, max_output_tokens=500)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await idle(eng)
        await eng.shutdown()
    run(main())


def test_closing_one_rank_of_a_group_leaves_the_others_serving():
    async def main():
        eng = await LiveEngine.start(cfg(dp_size=2, speedup=1.0))
        s0, s1 = await asyncio.gather(
            eng.submit(DirectRequest(tokens=[1] * 16, max_output_tokens=40, dp_rank=0)),
            eng.submit(DirectRequest(tokens=[2] * 16, max_output_tokens=10_000, dp_rank=1)))
        await s1.recv()
        eng.close_rank(1)
        await collect(s1)                                      # rank 1's stream ends (EOS)
        assert s1.closed
        got = await collect(s0)
        assert len(got) == 40 and got[-1].completed           # rank 0 finishes undisturbed
        await idle(eng)
        with pytest.raises(LiveEngineError, match="rank 1 was closed"):
            eng.prepare_request(DirectRequest(tokens=[1], max_output_tokens=1, dp_rank=1))
        again = await collect(await eng.submit(DirectRequest(tokens=[3] * 8, max_output_tokens=2, dp_rank=0)))
        assert len(again) == 2
        await eng.shutdown()
    run(main())
