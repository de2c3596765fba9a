"""KV-aware router (docs/core-sim.md §6.5): costs, event timing, config, reproducibility.

The expected costs are the ones the reference (ai-dynamo-runtime 1.6.1) logs for the same
inputs (its `Selected worker ... logit=` line; see tools/REFERENCE_NOTES.md, "KV router").
"""
import json

import numpy as np
import pytest

from mocker.config import ConfigError, normalize_config, normalize_router_config
from mocker.replay import run_synthetic_trace_replay, run_trace_replay
from mocker.replay.run import simulate
from mocker.replay.traces import load_mooncake

FIXED = {"type": "fixed", "prefill_ms": 10, "decode_ms": 1}
A = list(range(100, 116))          # 16 blocks of 64 tokens
ROWS = [(0, 1024, A), (5, 1024, A), (10, 1024, A), (10.5, 640, list(range(500, 510))), (40, 1024, A)]


def _sim(tmp_path, rows, engine=None, num_workers=1, lag=None, tbs=64, **router):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": isl, "output_length": 3,
                                        "hash_ids": h}) + "\n" for t, isl, h in rows))
    cfg = normalize_config({"engine": engine or {"block_size": 64, "timing_model": FIXED}})
    wl = load_mooncake([str(path)], tbs, "mooncake", 1.0, timestamps_required=True)
    return simulate(wl, cfg, num_workers=num_workers, router=normalize_router_config(router),
                    kv_event_lag_ms=lag)


def _costs(sim):
    return [c for (_, c, _) in sim.router.decisions_of(sim.core.arrival_order())]


@pytest.mark.parametrize("router, lag, expected", [
    # A; A again while A prefills; A again at A's pass end (its blocks just became visible);
    # a fresh 640-token prompt; A once everything finished
    ({}, None, [32, 48, 32, 52, 16]),
    ({}, 5.0, [32, 48, 48, 68, 16]),                     # events not visible yet at 10 / 10.5
    ({}, 30.0, [32, 48, 48, 68, 16]),
    ({"decode_active_request_weight": 2}, None, [32, 50, 36, 58, 16]),
    ({"prefill_load_scale": 0.5, "overlap_score_credit": 2}, None, [24, 32, 16, 39, 16]),
    ({"router_track_prefill_tokens": False}, None, [16, 16, 16, 26, 16]),
    ({"router_assume_kv_reuse": False}, None, [32, 64, 64, 84, 16]),
    ({"router_track_active_blocks": False}, None, [16, 32, 16, 26, 0]),
])
def test_costs_match_the_reference_log(tmp_path, router, lag, expected):
    assert _costs(_sim(tmp_path, ROWS, lag=lag, **router)) == expected


def test_chunked_prefill_announces_blocks_per_chunk(tmp_path):
    # a 20000-token prompt in 8192-token chunks: an arrival after the first chunk sees 128 blocks
    big = list(range(100, 420))
    rows = [(0, 20000, big), (0, 640, list(range(900, 910))), (15, 20000, big)]
    sim = _sim(tmp_path, rows)
    dec = sim.router.decisions_of(sim.core.arrival_order())
    assert [c for _, c, _ in dec] == [624.5, 644.5, 829.0]
    assert dec[2][2] == 128


@pytest.mark.parametrize("engine, expected", [
    ({"backend": "sglang", "timing_model": FIXED}, [2000, 3000, 1000]),          # pages of 1 token
    ({"backend": "sglang", "block_size": 16, "timing_model": FIXED}, [124.5, 187.0, 62.5]),
    ({"block_size": 16, "timing_model": FIXED}, [124.5, 187.0, 62.5]),
])
def test_costs_per_backend(tmp_path, engine, expected):
    ids = list(range(100, 102))      # trace blocks of 512 tokens
    rows = [(0, 1000, ids), (5, 1000, ids), (40, 1000, ids)]
    assert _costs(_sim(tmp_path, rows, engine=engine, tbs=512)) == expected


def test_books_balance_and_indexer_mirrors_the_caches(tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for i in range(120):
        g = int(rng.integers(0, 4))
        rows.append((int(i * 7), int(rng.integers(100, 3000)),
                     [g * 100 + k for k in range(3)] + [10_000 + i * 10 + k for k in range(4)]))
    for engine in ({"block_size": 16, "num_gpu_blocks": 300},
                   {"backend": "sglang", "block_size": 4, "num_gpu_blocks": 1500}):
        sim = _sim(tmp_path, rows, engine=engine, num_workers=3, tbs=512)
        assert sim.core.terminal == len(rows)
        assert sim.router.worker_loads() == [(0, 0, 0)] * 3
        assert sim.router.num_active_hashes == 0
        for w, rank in enumerate(sim.ranks):
            cache = rank.cache_view if engine.get("backend") == "sglang" else rank.pool_view
            assert sim.router.cached_hashes(w) == cache.cached_hashes()


def test_same_seed_same_run_and_seeds_break_ties(tmp_path):
    # a burst of identical-cost requests onto 4 equal workers: every placement is a tie
    def run(seed):
        res = run_synthetic_trace_replay(1000, 50, 40, num_workers=4, router_mode="kv_router",
                                         arrival_interval_ms=0.0, capture_per_request=True,
                                         router_config={"router_seed": seed})
        return res.summary, [r["decode_worker_idx"] for r in res.per_request]
    s0, w0 = run(0)
    s0b, w0b = run(0)
    s1, w1 = run(1)
    assert w0 == w0b and s0 == {**s0b, "wall_time_ms": s0["wall_time_ms"],
                                "processed_tokens_per_s": s0["processed_tokens_per_s"],
                                "processed_output_tokens_per_s": s0["processed_output_tokens_per_s"]}
    assert w0 != w1                                     # other tie-breaks ...
    assert s0["mean_ttft_ms"] == s1["mean_ttft_ms"]     # ... between equal workers change nothing
    # workers fill evenly through ties: each group of 4 consecutive requests covers all 4
    for k in range(0, 40, 4):
        assert sorted(w0[k:k + 4]) == [0, 1, 2, 3]


def test_kv_router_beats_round_robin_on_shared_prefixes(tmp_path):
    kw = dict(num_workers=4, request_rate=20.0, shared_prefix_ratio=0.75, num_prefix_groups=4)
    rr = run_synthetic_trace_replay(2048, 32, 200, **kw).summary
    kv = run_synthetic_trace_replay(2048, 32, 200, router_mode="kv_router", **kw).summary
    assert kv["prefix_cache_reused_ratio"] > rr["prefix_cache_reused_ratio"]


@pytest.mark.parametrize("cfg, message", [
    ({"overlap_score_credit": -1}, "overlap_score_credit must be a finite, non-negative number"),
    ({"prefill_load_scale": float("nan")}, "prefill_load_scale must be finite and non-negative"),
    ({"overlap_score_weight": -1}, "prefill_load_scale must be finite and non-negative"),
    ({"decode_active_request_weight": -2}, "decode_active_request_weight must be finite and non-negative"),
    ({"router_temperature": -0.5}, "router_temperature must be finite and non-negative"),
    ({"overlap_score_credit_decay": -1}, "overlap_score_credit_decay must be finite and non-negative"),
    ({"router_queue_threshold": -1}, "router_queue_threshold must be greater than or equal to 0"),
    ({"router_queue_policy": "xyz"}, "unknown queue policy: \"xyz\", expected 'fcfs', 'lcfs', or 'wspt'"),
    ({"router_tracking_hash": "abc"}, "router_tracking_hash must be public-xxh3-v1 or keyed-xxh3-v1, got \"abc\""),
    ({"router_prefill_load_model": "abc"}, "unknown prefill load model: \"abc\", expected 'none' or 'ais'"),
    ({"router_approximate_cache_policy": "lru"}, "router_approximate_cache_policy=lru requires use_kv_events=false"),
    ({"router_event_threads": 0}, "router_event_threads must be at least 1"),
    ({"foo": 1}, "unknown field `foo`"),
    ({"use_kv_events": "yes"}, "use_kv_events: invalid type"),
    ({"router_queue_threshold": 0.5}, "not supported by mocker yet"),
    ({"router_seed": -1}, "router_seed"),
])
def test_router_config_errors(cfg, message):
    with pytest.raises(ConfigError) as ei:
        normalize_router_config(cfg)
    assert message in str(ei.value)
    assert "\n" not in str(ei.value)


def test_router_config_forms(tmp_path):
    assert normalize_router_config('{"router_temperature": 0.5}')["router_temperature"] == 0.5
    p = tmp_path / "rc.json"
    p.write_text('{"overlap_score_weight": 0}')
    cfg = normalize_router_config(str(p))
    assert cfg["prefill_load_scale"] == 0.0 and cfg["overlap_score_credit"] == 0.0   # alias semantics
    assert normalize_router_config({"overlap_score_weight": 2})["overlap_score_credit"] == 1.0
    with pytest.raises(ConfigError, match="not valid JSON"):
        normalize_router_config("{nope")


def test_temperature_sampling_is_seeded(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": i * 3, "input_length": 700, "output_length": 20, "hash_ids": [i % 3, 100 + i]}
            for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(seed):
        res = run_trace_replay(str(path), num_workers=3, router_mode="kv_router", capture_per_request=True,
                               router_config={"router_temperature": 0.7, "router_seed": seed})
        return [r["decode_worker_idx"] for r in res.per_request]
    assert run(3) == run(3)
    assert run(3) != run(4)


def test_kv_event_lag_must_be_valid(tmp_path):
    from mocker.replay.run import ReplayError
    with pytest.raises(ReplayError, match="kv_event_lag_ms"):
        run_synthetic_trace_replay(100, 2, 2, router_mode="kv_router", kv_event_lag_ms=-1)
