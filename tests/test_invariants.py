"""Property tests: random workloads on random engines keep the core's invariants."""
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from mocker._core.replay import ReplayInvariantError
from mocker.config import normalize_config
from mocker.replay.run import simulate
from mocker.replay.traces import load_mooncake

COMPLETED, REJECTED = 3, 4


@st.composite
def scenario(draw, backend):
    n = draw(st.integers(1, 25))
    tbs = draw(st.sampled_from([16, 32, 64, 100]))
    rows = []
    t = 0
    for i in range(n):
        t += draw(st.integers(0, 300))
        nb = draw(st.integers(1, 6))
        shared = draw(st.integers(0, nb))
        hids = [draw(st.integers(0, 3)) * 10 + k for k in range(shared)] + [1000 + i * 10 + k for k in range(nb - shared)]
        isl = draw(st.integers(1, nb * tbs))
        row = {"timestamp": t, "input_length": isl, "output_length": draw(st.integers(0, 60)), "hash_ids": hids}
        if draw(st.booleans()) and i > 0:
            row["session_id"] = f"s{draw(st.integers(0, 3))}"
        rows.append(row)
    engine = {
        "backend": backend,
        "block_size": draw(st.sampled_from([1, 4, 16, 64] if backend == "sglang" else [4, 16, 48, 64])),
        "num_gpu_blocks": draw(st.integers(8, 400)),
        "max_num_seqs": draw(st.sampled_from([None, 1, 3, 256])),
        "max_num_batched_tokens": draw(st.sampled_from([None, 64, 300, 8192])),
        "enable_prefix_caching": draw(st.booleans()),
        "enable_chunked_prefill": True if backend == "sglang" else draw(st.booleans()),
        "preemption_mode": draw(st.sampled_from(["lifo", "fifo"])),
        "max_model_len": draw(st.sampled_from([None, 200, 1000])),
        "timing_model": draw(st.sampled_from([{"type": "polynomial"},
                                               {"type": "fixed", "prefill_ms": 10, "decode_ms": 1}])),
    }
    if backend == "sglang":
        engine["sglang"] = {"schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
                            "clip_max_new_tokens": draw(st.sampled_from([4, 64, 4096])),
                            "chunked_prefill_size": 64 * draw(st.sampled_from([1, 8, 128]))}
        engine["prefill_decode_interval"] = draw(st.sampled_from([0, 0, 2]))
    workers = draw(st.integers(1, 3))
    conc = draw(st.sampled_from([None, 1, 4]))
    return rows, tbs, engine, workers, conc


@pytest.mark.parametrize("backend", ["vllm", "trtllm", "sglang"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_workloads_keep_invariants(tmp_path_factory, backend, data):
    sc = data.draw(scenario(backend))
    rows, tbs, engine, workers, conc = sc
    path = tmp_path_factory.mktemp("inv") / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = normalize_config({"engine": engine})
    wl = load_mooncake([str(path)], tbs, "mooncake", 1.0, timestamps_required=conc is None)
    try:
        sim = simulate(wl, config, num_workers=workers, concurrency=conc)
    except ReplayInvariantError as exc:
        assert "effect-free zero-duration pass" in str(exc)
        if backend == "sglang":
            # SGLang's retraction can also livelock with requests that fit one by one (the
            # reference then loops forever, warning "Failed to reserve speculative decode pages"):
            # no simple condition characterizes it
            event("sglang: refused (livelock)")
            return
        # vLLM / TRT-LLM refuse only when some request can never fit: its whole sequence (prompt
        # and the output it may generate) needs more KV blocks than a worker has
        def blocks_needed(row):
            isl, out = row["input_length"], row["output_length"]
            if engine["max_model_len"] is not None:
                if isl >= engine["max_model_len"]:
                    return 0                      # rejected at admission, never stuck
                out = min(out, engine["max_model_len"] - isl)
            return math.ceil((isl + out) / engine["block_size"])
        def over_budget(row):
            # without chunked prefill a prompt is scheduled whole, within one pass's token budget
            budget = engine["max_num_batched_tokens"]
            return (backend != "sglang" and not engine["enable_chunked_prefill"] and budget is not None
                    and row["input_length"] > budget)
        assert any(blocks_needed(r) > engine["num_gpu_blocks"] or over_budget(r) for r in rows), \
            "the run was refused although every request fits in a worker's KV pool and pass budget"
        event(f"{engine['backend']}: refused (a request can never fit)")
        return
    event(f"{engine['backend']}: completed")
    cols = sim.table.columns()
    n = wl.n
    # every request arrived and is terminal exactly once
    assert sim.core.arrived == n and sim.core.terminal == n
    assert set(np.unique(cols["status"])) <= {COMPLETED, REJECTED}
    # blocks / pages conserved and all released at the end
    for rank in sim.ranks:
        assert rank.num_running == 0 and rank.num_waiting == 0
        if engine["backend"] == "sglang":
            cache = rank.cache_view
            cache.check_invariants()
            assert cache.num_free_pages + cache.num_cached_pages == engine["num_gpu_blocks"]
            assert cache.num_evictable_pages == cache.num_cached_pages      # nothing locked
            continue
        pool = rank.pool_view
        pool.check_invariants()
        assert pool.num_active_blocks == 0
        assert pool.num_free_blocks + pool.num_inactive_blocks == engine["num_gpu_blocks"]
    done = cols["status"] == COMPLETED
    out = cols["output_length"]
    assert np.all(out <= cols["requested_output_length"])
    assert np.all(out[cols["status"] == REJECTED] == 0)
    mml = engine["max_model_len"]
    if mml:
        assert np.all(cols["input_length"][done] + out[done] <= mml)
    rej = cols["status"] == REJECTED
    too_long = cols["input_length"] >= mml if mml else np.zeros(n, dtype=bool)
    if engine["backend"] == "sglang":
        assert np.all(rej == too_long)       # SGLang rejects only over max_model_len
    else:
        too_big = -(-cols["input_length"] // engine["block_size"]) > engine["num_gpu_blocks"]
        trt_full = ((engine["backend"] == "trtllm") & (cols["requested_output_length"] > 0)
                    & (cols["input_length"] >= engine["num_gpu_blocks"] * engine["block_size"]))
        assert np.all(rej == (too_long | too_big | trt_full))
    has = done & (out > 0)
    arr = cols["arrival_time_ms"]
    assert np.all(cols["first_admit_ms"][done] >= arr[done])
    assert np.all(cols["first_token_ms"][has] > arr[has])
    assert np.all(cols["last_token_ms"][has] >= cols["first_token_ms"][has])
    assert np.all(cols["terminal_time_ms"][has] == cols["last_token_ms"][has])
    # readmissions may reuse their own generated tokens too
    assert np.all(cols["reused_max"] <= cols["input_length"] + out)
    assert all(math.isfinite(x) for x in cols["terminal_time_ms"])
