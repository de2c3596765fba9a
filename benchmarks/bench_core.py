"""Micro and end-to-end benchmarks (pytest-benchmark).  Timing targets live here, not in tests.

Run: python -m pytest benchmarks/ --benchmark-only
"""
import pytest

from mocker._core.blocks import BlockPool, churn
from mocker._core.table import ReqTable
from mocker._core.vllm import VllmRank
from mocker.config import normalize_config
from mocker.replay import run_synthetic_trace_replay


@pytest.mark.benchmark(group="block-pool")
def test_block_pool_churn(benchmark):
    def run():
        pool = BlockPool(4096)
        return churn(pool, 20000, 32, 64)
    hits = benchmark(run)
    assert hits > 0


def _rank_with_running(n_running: int):
    engine = normalize_config({"engine": {"num_gpu_blocks": n_running * 12, "max_num_seqs": None,
                                          "max_num_batched_tokens": None}})["engine"]
    table = ReqTable(n_running, engine["block_size"])
    rank = VllmRank(table, engine)
    for r in range(n_running):
        table.set_prompt(r, [r + 1] * 200, 1_000_000)
        rank.submit(r)
    now = rank.run_pass(0.0)[0]            # prefill everything: all are decoding afterwards
    return rank, now


@pytest.mark.benchmark(group="one-pass")
@pytest.mark.parametrize("n_running", [1000, 10000])
def test_one_decode_pass(benchmark, n_running):
    rank, now = _rank_with_running(n_running)
    state = {"now": now}

    def one_pass():
        end, emitted, _, _ = rank.run_pass(state["now"])
        state["now"] = end
        return emitted
    # 200 passes: sequences grow from 201 to 400 tokens, well inside the pool (no preemption)
    emitted = benchmark.pedantic(one_pass, rounds=200, iterations=1)
    assert emitted == n_running


@pytest.mark.benchmark(group="replay")
def test_replay_1000_100_x5000_rate20(benchmark):
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(1000, 100, 5000),
                             kwargs={"request_rate": 20}, rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000


@pytest.mark.benchmark(group="replay")
def test_replay_3000_300_x5000_conc64(benchmark):
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(3000, 300, 5000),
                             kwargs={"replay_concurrency": 64}, rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000


@pytest.mark.benchmark(group="replay")
def test_replay_sglang_1000_100_x5000_rate20(benchmark):
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(1000, 100, 5000),
                             kwargs={"request_rate": 20, "extra_engine_args": {"engine": {"backend": "sglang"}}},
                             rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000


@pytest.mark.benchmark(group="cluster")
def test_replay_kv_router_8_workers(benchmark):
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(2000, 100, 5000),
                             kwargs={"request_rate": 80.0, "shared_prefix_ratio": 0.5, "num_prefix_groups": 20,
                                     "num_workers": 8, "router_mode": "kv_router"}, rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000


@pytest.mark.benchmark(group="cluster")
def test_replay_disaggregated_2p2d(benchmark):
    kw = {"prefill_engine_args": {"engine": {"worker_type": "prefill", "kv_transfer_bytes_per_token": 131072,
                                             "kv_transfer_bandwidth": 50}},
          "decode_engine_args": {"engine": {"worker_type": "decode"}},
          "num_prefill_workers": 2, "num_decode_workers": 2, "router_mode": "kv_router", "request_rate": 30.0}
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(2000, 100, 5000), kwargs=kw, rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000


@pytest.mark.benchmark(group="cluster")
def test_replay_dp4(benchmark):
    kw = {"request_rate": 40.0, "num_workers": 2,
          "extra_engine_args": {"engine": {"prefill_schedule_interval": 2}, "dp_size": 4}}
    res = benchmark.pedantic(run_synthetic_trace_replay, args=(2000, 100, 5000), kwargs=kw, rounds=3, iterations=1)
    assert res.summary["completed_requests"] == 5000
