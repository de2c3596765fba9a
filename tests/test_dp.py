"""Attention data parallel (dp_size > 1): placement, ids, the shared pass clock, errors.

Golden comparisons of whole runs are in test_parity.py (dp*_ scenarios); these tests pin the
individual rules (reference 1.6.1 behaviour, tools/REFERENCE_NOTES.md "Data parallel").
"""
import json

import pytest

from mocker.config import ConfigError, normalize_config
from mocker.replay import run_synthetic_trace_replay, run_trace_replay

FIXED = {"block_size": 64, "timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 1}}


def _trace(tmp_path, rows):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": isl, "output_length": osl,
                                     "hash_ids": h}) + "\n" for t, isl, osl, h in rows))
    return str(p)


@pytest.mark.parametrize("nw, dp, expected", [
    (1, 2, [0, 1, 0, 1, 0, 1]),
    (2, 2, [0, 2, 1, 3, 0, 2]),
    (3, 2, [0, 2, 4, 1, 3, 5]),
    (2, 3, [0, 3, 1, 4, 2, 5]),
])
def test_round_robin_over_workers_then_ranks(nw, dp, expected):
    res = run_synthetic_trace_replay(200, 2, 6, arrival_interval_ms=50.0, num_workers=nw,
                                     extra_engine_args={"engine": {}, "dp_size": dp}, capture_per_request=True)
    recs = res.per_request
    assert [r["decode_worker_idx"] for r in recs] == expected
    for r in recs:
        h = r["routing_history"][0]
        assert h["scheduler_id"] == r["decode_worker_idx"]
        assert h["logical_worker_id"] == r["decode_worker_idx"] // dp
        assert h["dp_rank"] == r["decode_worker_idx"] % dp


def test_ranks_share_the_pass_clock(tmp_path):
    # R0 on rank 0 at 0; R1 arrives at 5 for the idle rank 1 but waits for the worker's pass end
    # (10); R2 joins rank 0 at 15 and its 11 ms pass (prefill + decode) moves rank 1's token too
    path = _trace(tmp_path, [(0, 64, 5, [1]), (5, 64, 3, [2]), (15, 64, 2, [3])])
    res = run_trace_replay(path, {"engine": FIXED, "dp_size": 2}, trace_block_size=64, capture_per_request=True)
    got = [(r["first_admit_ms"], r["first_token_ms"], r["last_token_ms"], r["decode_worker_idx"])
           for r in res.per_request]
    assert got == [(0.0, 10.0, 33.0, 0), (10.0, 20.0, 32.0, 1), (20.0, 31.0, 32.0, 0)]


def test_capacity_is_per_rank(tmp_path):
    # 5 blocks per rank: two 4-block prompts run side by side on two ranks; a 6-block one is rejected
    path = _trace(tmp_path, [(0, 256, 2, [1, 2, 3, 4]), (0, 256, 2, [5, 6, 7, 8]), (1, 384, 2, list(range(9, 15)))])
    res = run_trace_replay(path, {"engine": {**FIXED, "num_gpu_blocks": 5}, "dp_size": 2},
                           trace_block_size=64, capture_per_request=True)
    recs = sorted(res.per_request, key=lambda r: (r["arrival_time_ms"], r["decode_worker_idx"]))
    assert [r["first_admit_ms"] for r in recs[:2]] == [0.0, 0.0]
    assert recs[2]["terminal_status"] == "rejected"


def test_summary_counts_gpus_per_worker():
    s = run_synthetic_trace_replay(500, 5, 8, arrival_interval_ms=3.0, num_workers=2,
                                   extra_engine_args={"engine": {}, "dp_size": 3, "tensor_parallel_size": 2}).summary
    assert s["decode_gpus_per_worker"] == 6
    assert s["decode_worker_seconds"] == pytest.approx(2 * s["duration_ms"] / 1000.0)
    assert s["gpu_hours"] == pytest.approx(s["decode_worker_seconds"] * 6 / 3600.0)


@pytest.mark.parametrize("value, message", [
    (0, "dp_size must be positive"),
    (-1, "dp_size: invalid value: integer `-1`, expected u32"),
    (1.5, "dp_size: invalid type: floating point `1.5`, expected u32"),
    (2.0, "dp_size: invalid type: floating point `2.0`, expected u32"),
    ("2", 'dp_size: invalid type: string "2", expected u32'),
    (True, "dp_size: invalid type: boolean `true`, expected u32"),
    (None, "dp_size: invalid type: null, expected u32"),
    (2 ** 40, "dp_size: invalid value: integer `1099511627776`, expected u32"),
])
def test_dp_size_errors(value, message):
    with pytest.raises(ConfigError) as ei:
        normalize_config({"engine": {}, "dp_size": value})
    assert message in str(ei.value)


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_prefill_schedule_interval_is_vllm_only(backend):
    with pytest.raises(ConfigError, match="prefill_schedule_interval is supported only for backend=vllm; "
                                          "use prefill_decode_interval for backend=sglang"):
        run_synthetic_trace_replay(100, 2, 2, arrival_interval_ms=1.0,
                                   extra_engine_args={"engine": {"backend": backend, "prefill_schedule_interval": 2},
                                                      "dp_size": 2})


def test_kv_router_targets_ranks(tmp_path):
    # the same prompt again goes to the rank that holds it; a new prompt to the other (empty) rank
    a, b = list(range(1, 11)), list(range(20, 30))
    path = _trace(tmp_path, [(0, 640, 2, a), (20, 640, 2, a), (20, 640, 2, b), (40, 640, 2, b)])
    res = run_trace_replay(path, {"engine": FIXED, "dp_size": 2}, trace_block_size=64, router_mode="kv_router",
                           capture_per_request=True)
    recs = res.per_request           # arrival order, file order at equal times: A0, A20, B20, B40
    sid = [r["decode_worker_idx"] for r in recs]
    assert sid[0] == sid[1] and sid[2] == sid[3] and sid[0] != sid[2]
    assert [r["routing_history"][0]["reported_overlap_tokens"] for r in recs] == [0, 640, 0, 640]
    assert [r["reused_input_tokens"] for r in recs] == [0, 576, 0, 576]    # the last block is recomputed


def test_sglang_dp_chunk_budget_must_survive_the_split():
    with pytest.raises(ConfigError, match="engine error: constructing attention-DP rank 0: SGLang attention DP "
                                          "size 3 reduces chunked_prefill_size=2 to zero"):
        run_synthetic_trace_replay(100, 2, 2, arrival_interval_ms=1.0,
                                   extra_engine_args={"engine": {"backend": "sglang", "sglang": {"chunked_prefill_size": 2}},
                                                      "dp_size": 3})
