"""Live and offline share the core: a live run of a workload gives, per request, the modeled
token times and lengths of the offline replay of the same arrivals (issue 5, first point).

Each workload is replayed offline (``simulate``), then submitted to a ``LiveEngine`` with the
same arrival times on its modeled clock; the live run is paced on the wall clock (a high
speedup ratio keeps it short) or unpaced (speedup 0 is "infinite speed").  Per request we
compare the first, second and last token times, the token count, and the admission cache hit.
"""
import asyncio
import os
import json
import random

import numpy as np
import pytest

from mocker.config import normalize_config
from mocker.live.engine import DirectRequest, FullResponse, LiveEngine
from mocker.replay.run import simulate
from mocker.replay.traces import load_mooncake


def _trace(tmp_path, seed, n, span_ms, prefix_pool=6, max_blocks=10, max_out=60):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(10_000) for _ in range(rng.randint(1, 4))] for _ in range(prefix_pool)]
    rows, t, uniq = [], 0.0, 100_000
    for _ in range(n):
        t += rng.expovariate(n / span_ms)
        ids = list(rng.choice(prefixes))
        for _ in range(rng.randint(0, max_blocks)):
            ids.append(uniq)
            uniq += 1
        rows.append({"timestamp": round(t, 3), "input_length": len(ids) * 16 - rng.randint(0, 15),
                     "output_length": rng.randint(1, max_out), "hash_ids": ids})
    p = tmp_path / f"trace_{seed}.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def _requests(w):
    """Per request: (arrival_ms, prompt tokens, output length), from the workload's columns."""
    out = []
    arrival = dict(zip(w.session_heads.tolist(), w.head_arrival_ms.tolist()))
    for r in range(w.n):
        lo, hi = w.run_off[r], w.run_off[r + 1]
        assert (w.run_kind[lo:hi] == 0).all()
        tokens = np.repeat(w.run_v[lo:hi].astype(np.int64), w.run_n[lo:hi])
        out.append((arrival[r], tokens, int(w.output_length[r])))
    return out


async def _live(config, reqs):
    eng = await LiveEngine.start(config, buffering=FullResponse())
    streams = await asyncio.gather(*[
        eng.submit(DirectRequest(tokens=tok, max_output_tokens=out, arrival_ms=a, uuid=i,
                                 dp_rank=i % eng.dp_size))
        for i, (a, tok, out) in enumerate(reqs)])
    results = []
    for s in streams:
        sigs = []
        while (sig := await s.recv()) is not None:
            sigs.append(sig)
        results.append(sigs)
    await eng.shutdown()
    return results


CASES = [
    # (name, engine, dp, trace seed, requests, span ms)
    ("vllm", {"backend": "vllm", "num_gpu_blocks": 400, "block_size": 16, "max_num_batched_tokens": 256}, 1, 1, 120, 400),
    ("vllm-pressure", {"backend": "vllm", "num_gpu_blocks": 64, "block_size": 16, "max_num_seqs": 12}, 1, 2, 100, 300),
    ("sglang", {"backend": "sglang", "num_gpu_blocks": 3000, "block_size": 4}, 1, 3, 120, 400),
    ("sglang-retract", {"backend": "sglang", "num_gpu_blocks": 700, "block_size": 1,
                        "sglang": {"chunked_prefill_size": 64}}, 1, 4, 100, 300),
    ("trtllm", {"backend": "trtllm", "num_gpu_blocks": 300, "block_size": 16}, 1, 5, 80, 300),
    ("vllm-dp2", {"backend": "vllm", "num_gpu_blocks": 200, "block_size": 16}, 2, 6, 100, 300),
]


@pytest.mark.parametrize("paced", [True, False], ids=["paced", "unpaced"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_live_run_matches_offline_replay(tmp_path, case, paced):
    name, engine, dp, seed, n, span = case
    # paced: a high speedup ratio keeps the wall-clock run short; unpaced: speedup 0 (no sleeps)
    engine = dict(engine, speedup_ratio=20.0 if paced else 0.0)
    config = normalize_config({"engine": engine, "dp_size": dp})
    w = load_mooncake(_trace(tmp_path, seed, n, span / (1 if paced else 1)), trace_block_size=16)
    sim = simulate(w, config)
    cols = sim.table.columns()
    live = asyncio.run(asyncio.wait_for(_live(config, _requests(w)), 60))
    if dp > 1:
        # offline places requests round robin in arrival order; live uses i % dp in the same order
        order = sim.core.arrival_order()
        assert list(order) == sorted(order, key=lambda r: (cols["arrival_time_ms"][r], r))
    mismatches = []
    for r, sigs in enumerate(live):
        toks = [s for s in sigs if s.token_id is not None]
        got = (len(toks), toks[0].modeled_ms if toks else None,
               toks[1].modeled_ms if len(toks) > 1 else None,
               toks[-1].modeled_ms if toks else None, sigs[0].cached_tokens if sigs else None)
        want = (int(cols["output_length"][r]),
                float(cols["first_token_ms"][r]) if toks else None,
                float(cols["second_token_ms"][r]) if len(toks) > 1 else None,
                float(cols["last_token_ms"][r]) if toks else None,
                int(cols["reused_first"][r]))
        if (got[0], got[4]) != (want[0], want[4]) or any(
                a is not None and abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(got[1:4], want[1:4])):
            mismatches.append((r, got, want))
        assert sigs and sigs[-1].completed and sum(s.completed for s in sigs) == 1
    assert not mismatches, f"{len(mismatches)}/{len(live)} requests differ, first: {mismatches[:3]}"


from hypothesis import HealthCheck, assume, given, settings, strategies as st


@settings(max_examples=int(os.environ.get("MOCKER_LIVE_FUZZ_EXAMPLES", 30)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), backend=st.sampled_from(["vllm", "sglang", "trtllm"]),
       blocks=st.sampled_from([48, 96, 400]), bs=st.sampled_from([4, 16]),
       seqs=st.sampled_from([4, 16, 256]), n=st.integers(5, 60), dp=st.sampled_from([1, 1, 2]))
def test_live_matches_offline_on_random_workloads(tmp_path, seed, backend, blocks, bs, seqs, n, dp):
    """Unpaced live runs against the offline replay over random traces and pool pressures."""
    engine = {"backend": backend, "num_gpu_blocks": blocks, "block_size": bs, "max_num_seqs": seqs,
              "speedup_ratio": 0.0}
    if backend == "sglang":
        engine["sglang"] = {"chunked_prefill_size": 8 * bs}
    config = normalize_config({"engine": engine, "dp_size": dp})
    w = load_mooncake(_trace(tmp_path, seed, n, 200, max_blocks=6, max_out=30), trace_block_size=16)
    try:
        sim = simulate(w, config)
    except Exception:                       # the offline run refuses or stalls: nothing to compare
        assume(False)
    cols = sim.table.columns()
    live = asyncio.run(asyncio.wait_for(_live(config, _requests(w)), 60))
    for r, sigs in enumerate(live):
        toks = [s for s in sigs if s.token_id is not None]
        assert len(toks) == int(cols["output_length"][r]), r
        if toks:
            assert toks[0].modeled_ms == pytest.approx(float(cols["first_token_ms"][r]), rel=1e-9, abs=1e-9)
            assert toks[-1].modeled_ms == pytest.approx(float(cols["last_token_ms"][r]), rel=1e-9, abs=1e-9)
        assert sigs[-1].completed and sum(s.completed for s in sigs) == 1
