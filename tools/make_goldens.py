#!/usr/bin/env python
"""Generate golden parity files from the reference simulator.

Run with the *reference* virtual environment's interpreter (it needs
``ai-dynamo-runtime==1.6.1`` importable as ``dynamo._core``)::

    /tmp/refvenv/bin/python tools/make_goldens.py            # all scenarios
    /tmp/refvenv/bin/python tools/make_goldens.py --only r1_single r9_tiny
    /tmp/refvenv/bin/python tools/make_goldens.py --list

For every scenario it writes ``tests/golden/<name>.json``::

    {"name", "kind": "trace"|"synthetic", "description",
     "trace_lines": [str, ...]            # trace kind only: exact JSONL lines
     "args": [input_tokens, output_tokens, request_count]   # synthetic only
     "kwargs": {...},                     # every other call kwarg (JSON-able);
                                          # extra_engine_args is a JSON *string*
     "summary": {...},                    # the reference summary dict, verbatim
     "per_request": [...] | null}         # per-request records minus `uuid`,
                                          # in canonical order (see canonical_key)

It also writes ``tests/golden/config_normalize.json`` (``_normalize_mocker_config``
outputs), ``tests/golden/errors.json`` and ``tests/golden/errors_sglang.json`` (exact error
strings; a case whose run succeeds has ``error_type``/``message`` null).

Every scenario is run twice and the two results are compared (minus wall-clock
fields) so only deterministic scenarios become goldens.

Per-request order: the reference orders ``per_request`` by arrival time but
breaks ties between requests arriving at the same instant non-deterministically
(run-to-run), so goldens are stored sorted by ``canonical_key`` and the parity
test sorts our records with the same key.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_rules import canonical_key  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GOLDEN_DIR = REPO / "tests" / "golden"

# Summary fields that depend on the wall clock of the machine running the replay.
WALL_CLOCK_KEYS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
# Per-request fields that are random per run.
NONDETERMINISTIC_RECORD_KEYS = ("uuid",)
# kv_router scenarios whose outcome depends on the tie-breaks: runs and compared metrics
STAT_RUNS = 10
STAT_KEYS = ("completed_requests", "mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms",
             "mean_e2e_latency_ms", "p90_e2e_latency_ms", "prefix_cache_reused_ratio", "duration_ms")
# worker labels under kv_router: equal workers swap at (unseeded) cost ties
TIE_LABEL_KEYS = ("decode_worker_idx", "prefill_worker_idx", "routing_history")
# Keep per-request records only if the golden stays below this size (bytes).
MAX_PER_REQUEST_BYTES = 350_000


# --------------------------------------------------------------------------------------------
# canonical ordering: tools/parity_rules.py
# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# trace builders (all deterministic)
# --------------------------------------------------------------------------------------------
def line(ts, isl, osl, hash_ids, **extra):
    d = {"timestamp": ts, "input_length": isl, "output_length": osl, "hash_ids": list(hash_ids)}
    d.update(extra)
    return json.dumps(d)


def tiny_trace():
    """mooncake_tiny-like: 16 lines, ISL 3000-8000, OSL 100-600, ts over ~5 s, shared prefixes."""
    rng = random.Random(1234)
    prefixes = [[1000 * g + j for j in range(rng.randint(4, 9))] for g in range(4)]
    lines, ts, uniq = [], 0, 50_000
    for i in range(16):
        isl = rng.randint(3000, 8000)
        osl = rng.randint(100, 600)
        nb = -(-isl // 512)
        g = rng.randrange(len(prefixes))
        pre = prefixes[g][: min(nb, len(prefixes[g]))]
        ids = list(pre)
        while len(ids) < nb:
            ids.append(uniq)
            uniq += 1
        lines.append(line(ts, isl, osl, ids))
        ts += rng.choice([0, 0, 120, 250, 333, 400, 500, 610])
    return lines


def r1():
    return [line(0, 1000, 100, [1, 2])]


def r2():
    return [line(0, 1000, 50, [10 * i + 1, 10 * i + 2]) for i in range(20)]


def r3():
    return [line(200 * i, 2048, 20, [7, 8, 9, 100 + i]) for i in range(8)]


def r4():
    return [line(0, 2000, 600, [10 * i + j for j in range(4)]) for i in range(12)]


def r5():
    return [line(0, 20000, 20, list(range(100, 140))), line(5, 3000, 30, list(range(200, 206)))]


def mixed_trace(seed, n=24, span_ms=3000, isl=(50, 4000), osl=(1, 300), tbs=512, groups=3):
    """Random-but-deterministic trace with shared prefixes and bursts."""
    rng = random.Random(seed)
    prefixes = [[10_000 * (g + 1) + j for j in range(rng.randint(2, 6))] for g in range(groups)]
    uniq = 900_000
    lines = []
    ts = 0
    for _ in range(n):
        L = rng.randint(*isl)
        O = rng.randint(*osl)
        nb = -(-L // tbs)
        ids = []
        if rng.random() < 0.7:
            ids = prefixes[rng.randrange(groups)][:nb]
        while len(ids) < nb:
            ids.append(uniq)
            uniq += 1
        lines.append(line(ts, L, O, ids))
        if rng.random() < 0.4:
            ts += 0  # burst
        else:
            ts += rng.randint(1, max(1, 2 * span_ms // n))
    return lines


def pressure_trace(n=10, isl=1500, osl=400, seed=7):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(line(rng.randint(0, 50) * (i > 0), isl + rng.randint(-300, 300), osl + rng.randint(-100, 100),
                        [100 * i + j for j in range(4)]))
    return out


def r11():
    return [
        line(0, 3000, 50, [1, 2, 3, 4, 5, 6]),
        line(0, 2000, 100, [11, 12, 13, 14]),
        line(10, 500, 0, [21]),
        line(20, 800, 40, [31, 32]),
    ]


def session_trace(delay_key="delay"):
    """Multi-turn sessions (string session ids), turn delays given explicitly or via timestamps."""
    rows = []
    # session A: 3 turns, explicit delays
    rows.append(json.dumps({"timestamp": 0, "session_id": "A", "input_length": 700, "output_length": 40, "hash_ids": [1, 2]}))
    rows.append(json.dumps({"timestamp": 0, "session_id": "A", "input_length": 900, "output_length": 30, "hash_ids": [1, 2], delay_key: 150}))
    rows.append(json.dumps({"timestamp": 0, "session_id": "A", "input_length": 1400, "output_length": 25, "hash_ids": [1, 2, 3], delay_key: 50}))
    # independent single requests
    rows.append(line(5, 1200, 60, [7, 8, 9]))
    rows.append(line(5, 300, 10, [1]))
    # session B: delays implied by timestamps
    rows.append(json.dumps({"timestamp": 40, "session_id": "B", "input_length": 1000, "output_length": 20, "hash_ids": [40, 41]}))
    rows.append(json.dumps({"timestamp": 340, "session_id": "B", "input_length": 600, "output_length": 20, "hash_ids": [42, 43]}))
    rows.append(json.dumps({"timestamp": 700, "session_id": "B", "input_length": 800, "output_length": 20, "hash_ids": [44, 45], delay_key: 0}))
    # session C: starts later, 2 turns
    rows.append(json.dumps({"timestamp": 120, "session_id": "C", "input_length": 2500, "output_length": 80, "hash_ids": [1, 2, 3, 60, 61]}))
    rows.append(json.dumps({"timestamp": 130, "session_id": "C", "input_length": 300, "output_length": 15, "hash_ids": [62], delay_key: 25}))
    rows.append(line(200, 64, 1, [70]))
    return rows


def alias_trace():
    return [
        json.dumps({"created_time": 0, "input_tokens": 800, "output_tokens": 20, "hash_ids": [1, 2]}),
        json.dumps({"created_time": 10, "input_tokens": 1000, "output_tokens": 15, "hash_ids": [1, 2]}),
        json.dumps({"timestamp": 20, "output_length": 12, "hash_ids": [1, 5]}),  # input_length omitted -> 1024
        json.dumps({"created_time": 30, "output_tokens": 1, "hash_ids": [9]}),  # -> 512
        json.dumps({"timestamp": 35, "input_length": 77, "output_tokens": 3, "hash_ids": [1], "request_id": "x"}),
    ]


def offset_trace():
    return [line(5000 + 37 * i, 600 + 50 * i, 20 + i, [1, 2 + i]) for i in range(6)]


# --------------------------------------------------------------------------------------------
# scenario table
# --------------------------------------------------------------------------------------------
def eng(**engine):
    return json.dumps({"engine": engine})


def eng_top(engine, **top):
    d = {"engine": engine}
    d.update(top)
    return json.dumps(d)


RR = {"router_mode": "round_robin"}


def T(name, lines, desc="", **kwargs):
    return {"name": name, "kind": "trace", "description": desc, "trace_lines": lines, "kwargs": {**RR, **kwargs}}


def S(name, args, desc="", keep_per_request=True, **kwargs):
    return {"name": name, "kind": "synthetic", "description": desc, "args": list(args),
            "kwargs": {**RR, **kwargs}, "_keep_per_request": keep_per_request}


def scenarios():
    tiny = tiny_trace()
    mix = mixed_trace(11)
    sc = [
        # ---- docs/core-sim.md §9 rows
        T("r1_single", r1(), "R1: 1 request 1000/100"),
        T("r2_batch20", r2(), "R2: 20 x 1000/50 at t=0"),
        T("r3_prefix_every200", r3(), "R3: 8 x 2048/20 every 200 ms, shared prefix"),
        T("r4_pressure_lifo", r4(), "R4: 12 x 2000/600, 256 blocks, LIFO",
          extra_engine_args=eng(num_gpu_blocks=256)),
        T("r4b_pressure_fifo", r4(), "R4b: R4 with FIFO preemption",
          extra_engine_args=eng(num_gpu_blocks=256, preemption_mode="fifo")),
        T("r5_long_chunked", r5(), "R5: 20000/20 + 3000/30, chunked"),
        T("r5b_long_unchunked", r5(), "R5b: chunking off, budget 32768",
          extra_engine_args=eng(enable_chunked_prefill=False, max_num_batched_tokens=32768)),
        T("r9_tiny", tiny, "R9: tiny-like trace, 1 worker"),
        T("r9b_tiny_600blocks", tiny, "R9b: num_gpu_blocks=600", extra_engine_args=eng(num_gpu_blocks=600)),
        T("r9c_tiny_arrival_speedup2", tiny, "R9c: arrival_speedup_ratio=2", arrival_speedup_ratio=2.0),
        T("r9d_tiny_concurrency4", tiny, "R9d: replay_concurrency=4", replay_concurrency=4),
        T("r9e_tiny_tbs1024", tiny, "R9e: trace_block_size=1024", trace_block_size=1024),
        T("r9f_tiny_sla", tiny, "R9f: SLA ttft<=1000 itl<=12", sla_ttft_ms=1000.0, sla_itl_ms=12.0),
        S("r10_synth_rate20", (1000, 100, 500), "R10: synthetic rate 20", request_rate=20.0),
        S("r10b_synth_conc32", (1000, 100, 500), "R10b: synthetic concurrency 32", replay_concurrency=32),
        S("r10c_synth_prefix_groups", (4096, 128, 400), "R10c: rate 8, prefix 0.75, 8 groups",
          request_rate=8.0, shared_prefix_ratio=0.75, num_prefix_groups=8),
        T("r11_max_model_len", r11(), "R11: max_model_len=2048 edge cases",
          extra_engine_args=eng(max_model_len=2048)),
        # ---- speedups / timing
        T("speedup_0", r1() + r3(), "speedup_ratio=0 == 1.0", extra_engine_args=eng(speedup_ratio=0.0)),
        T("speedup_2_5", mix, "speedup_ratio=2.5", extra_engine_args=eng(speedup_ratio=2.5)),
        T("decode_speedup_1_7", mix, "decode_speedup_ratio=1.7", extra_engine_args=eng(decode_speedup_ratio=1.7)),
        T("fixed_timing", mix, "fixed timing 10/1 ms",
          extra_engine_args=eng(timing_model={"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0})),
        T("fixed_timing_pressure", pressure_trace(), "fixed timing + small pool",
          extra_engine_args=eng(num_gpu_blocks=120, block_size=32,
                                timing_model={"type": "fixed", "prefill_ms": 7.5, "decode_ms": 1.25})),
        # ---- block sizes
        T("bs16", mix, "block_size 16", extra_engine_args=eng(block_size=16)),
        T("bs32", mix, "block_size 32", extra_engine_args=eng(block_size=32)),
        T("bs48_tbs100", mixed_trace(12, tbs=100), "block_size 48, trace_block_size 100",
          trace_block_size=100, extra_engine_args=eng(block_size=48)),
        T("bs48_tbs512", mix, "block_size 48 (not power of two)", extra_engine_args=eng(block_size=48)),
        # ---- scheduler knobs
        T("prefix_caching_off", r3() , "prefix caching off", extra_engine_args=eng(enable_prefix_caching=False)),
        T("prefix_caching_off_mix", mix, "prefix caching off (mixed)", extra_engine_args=eng(enable_prefix_caching=False)),
        T("chunked_off", mix, "chunked prefill off", extra_engine_args=eng(enable_chunked_prefill=False)),
        T("chunked_off_budget300", mixed_trace(13, isl=(50, 280)), "chunking off, budget 300",
          extra_engine_args=eng(enable_chunked_prefill=False, max_num_batched_tokens=300)),
        T("max_num_seqs_3", mix, "max_num_seqs=3", extra_engine_args=eng(max_num_seqs=3)),
        T("budget_300", mix, "max_num_batched_tokens=300", extra_engine_args=eng(max_num_batched_tokens=300)),
        T("lifo_heavy", pressure_trace(12), "LIFO, 100 blocks of 32",
          extra_engine_args=eng(num_gpu_blocks=100, block_size=32, preemption_mode="lifo")),
        T("fifo_heavy", pressure_trace(12), "FIFO, 100 blocks of 32",
          extra_engine_args=eng(num_gpu_blocks=100, block_size=32, preemption_mode="fifo")),
        T("fifo_heavy_bs16_mix", mixed_trace(14, n=20, osl=(100, 400)), "FIFO, 300 blocks of 16, mixed",
          extra_engine_args=eng(num_gpu_blocks=300, block_size=16, preemption_mode="fifo")),
        T("lifo_heavy_budget", mixed_trace(15, n=20, osl=(100, 400)), "LIFO, 400 blocks of 16, budget 512",
          extra_engine_args=eng(num_gpu_blocks=400, block_size=16, max_num_batched_tokens=512)),
        T("max_model_len_pressure", pressure_trace(10, isl=900, osl=500), "max_model_len 1100 + small pool",
          extra_engine_args=eng(max_model_len=1100, num_gpu_blocks=80, block_size=32)),
        # ---- sessions
        T("sessions_mooncake_delay", session_trace("delay"), "multi-turn sessions, mooncake, delay"),
        T("sessions_mooncake_delay_ms", session_trace("delay_ms"), "multi-turn sessions, mooncake, delay_ms"),
        T("sessions_mooncake_delta", session_trace("delay"), "multi-turn sessions, mooncake-delta",
          trace_format="mooncake-delta"),
        T("sessions_mooncake_delta_ms_bs16", session_trace("delay_ms"), "mooncake-delta, delay_ms, bs 16",
          trace_format="mooncake-delta", extra_engine_args=eng(block_size=16)),
        T("sessions_concurrency2", session_trace("delay"), "sessions under replay_concurrency=2",
          replay_concurrency=2),
        T("sessions_delta_concurrency2_rr2", session_trace("delay_ms"), "delta sessions, concurrency 2, 2 workers",
          trace_format="mooncake-delta", replay_concurrency=2, num_workers=2),
        T("sessions_arrival_speedup", session_trace("delay"), "sessions, arrival_speedup_ratio=3",
          arrival_speedup_ratio=3.0),
        # ---- workers / run control
        T("rr2_tiny", tiny, "2 workers round robin", num_workers=2),
        T("rr3_mix", mix, "3 workers round robin", num_workers=3),
        T("rr2_pressure_fifo", pressure_trace(12), "2 workers, small pools, FIFO", num_workers=2,
          extra_engine_args=eng(num_gpu_blocks=70, block_size=32, preemption_mode="fifo")),
        T("max_sim_time_cut", tiny, "max_sim_time_ms=4000 cuts the run", max_sim_time_ms=4000.0),
        T("sla_e2e", tiny, "sla_e2e_ms=5000", sla_e2e_ms=5000.0),
        T("sla_ttft_only_mix", mix, "sla_ttft_ms only", sla_ttft_ms=100.0),
        T("concurrency3_mix", mix, "replay_concurrency=3", replay_concurrency=3),
        T("timestamp_offset", offset_trace(), "first timestamp 5000 is shifted to 0"),
        # ---- trtllm
        T("trtllm_default_tiny", tiny, "trtllm defaults", extra_engine_args=eng(backend="trtllm")),
        T("trtllm_default_mix", mix, "trtllm defaults, mixed", extra_engine_args=eng(backend="trtllm")),
        T("trtllm_pressure", pressure_trace(12), "trtllm small pool",
          extra_engine_args=eng(backend="trtllm", num_gpu_blocks=100)),
        T("trtllm_pressure_bs16_seqs", mixed_trace(16, n=20, osl=(100, 400)), "trtllm small pool, bs16, seqs 4",
          extra_engine_args=eng(backend="trtllm", num_gpu_blocks=250, block_size=16, max_num_seqs=4)),
        T("trtllm_sessions_rr2", session_trace("delay"), "trtllm sessions, 2 workers",
          num_workers=2, extra_engine_args=eng(backend="trtllm")),
        # ---- synthetic
        S("synth_turns3", (800, 30, 12), "3 turns per session, inter-turn delay 40",
          request_rate=15.0, turns_per_session=3, inter_turn_delay_ms=40.0),
        S("synth_turns3_conc", (600, 20, 8), "3 turns, concurrency 3",
          replay_concurrency=3, turns_per_session=3, inter_turn_delay_ms=25.0),
        S("synth_shared_prefix", (2000, 50, 60), "shared prefix 0.5, 3 groups, bs 32",
          request_rate=12.0, shared_prefix_ratio=0.5, num_prefix_groups=3,
          extra_engine_args=eng(block_size=32)),
        S("synth_prefix_no_groups", (2000, 50, 30), "shared prefix ratio without groups: no sharing",
          request_rate=12.0, shared_prefix_ratio=0.5, num_prefix_groups=0),
        S("synth_burst", (1500, 40, 40), "arrival_interval_ms=0 burst", arrival_interval_ms=0.0),
        S("synth_interval", (1500, 40, 40), "arrival_interval_ms=35", arrival_interval_ms=35.0),
        S("synth_output1", (700, 1, 30), "output 1", arrival_interval_ms=3.0),
        S("synth_rate_seed7_rr2", (1200, 60, 80), "Poisson rate 25, seed 7, 2 workers",
          request_rate=25.0, arrival_seed=7, num_workers=2),
        S("synth_pressure_lifo", (1000, 300, 40), "small pool LIFO burst",
          arrival_interval_ms=0.0, extra_engine_args=eng(num_gpu_blocks=200, block_size=32)),
        S("synth_trtllm_pressure", (1000, 300, 40), "trtllm small pool burst",
          arrival_interval_ms=0.0, extra_engine_args=eng(backend="trtllm", num_gpu_blocks=200)),
        S("synth_large_summary_only", (1000, 100, 5000), "5000 requests rate 20 (summary only)",
          keep_per_request=False, request_rate=20.0),
        # ---- output 0/1, aliases
        T("output_0_and_1", [line(0, 100, 0, [1]), line(0, 100, 1, [2]), line(3, 100, 2, [3]),
                             line(3, 900, 0, [1, 2]), line(50, 2000, 1, [1, 2, 3, 4])],
          "zero and one output tokens"),
        T("field_aliases", alias_trace(), "created_time/input_tokens/output_tokens/omitted input_length"),
    ]
    sc += sglang_scenarios()
    sc += kv_router_scenarios()
    sc += dp_scenarios()
    sc += disagg_scenarios()
    return sc


# --------------------------------------------------------------------------------------------
# Disaggregated prefill -> decode (prefill_engine_args + decode_engine_args; names prefixed pd_)
# --------------------------------------------------------------------------------------------
def pd_args(prefill=None, decode=None, top_p=None, top_d=None, **common):
    """prefill_engine_args / decode_engine_args JSON for a vLLM 1P1D-style run."""
    pe = {"worker_type": "prefill", **common, **(prefill or {})}
    de = {"worker_type": "decode", **common, **(decode or {})}
    return {"prefill_engine_args": json.dumps({"engine": pe, **(top_p or {})}),
            "decode_engine_args": json.dumps({"engine": de, **(top_d or {})})}


def pd_req(t, n, o, base, bs=64):
    return line(t, n, o, list(range(base, base + -(-n // bs))))


def disagg_scenarios():
    tiny = tiny_trace()
    mix = mixed_trace(11)
    fixed = {"block_size": 64, "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}}
    x1 = {"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1.0}
    r8b = {"kv_transfer_bytes_per_token": 131072, "kv_transfer_bandwidth": 50.0}
    t3 = [pd_req(0, 1000, 30, 100), pd_req(0, 1001, 10, 200), pd_req(12, 300, 10, 400)]
    t6 = [pd_req(0, 1000, 5, 100), pd_req(500, 640, 5, 200), pd_req(600, 1000, 5, 100)]
    t8 = [pd_req(0, 1000, 10, 100), pd_req(0, 1001, 10, 200)]
    restart_rej = [pd_req(0, 300, 50, 100), pd_req(0, 2500, 5, 200), pd_req(0, 2500, 5, 250),
                   line(0, 2500, 5, range(300, 340), session_id="sW"),
                   line(0, 2500, 5, range(400, 440), session_id="sW", delay_ms=5),
                   pd_req(0, 300, 5, 500), pd_req(0, 2500, 5, 600), pd_req(0, 2500, 5, 700),
                   pd_req(0, 2500, 5, 800), pd_req(0, 200, 5, 900)]
    pd_fail_sessions = [line(0, 3000, 10, range(418, 465), session_id="s2"),
                        line(0, 292, 5, range(2000, 2005), session_id="s2", delay_ms=0),
                        line(0, 100, 3, [9000, 9001], session_id="s3"),
                        line(0, 200, 3, range(9100, 9104), session_id="s3", delay_ms=5),
                        line(0, 128, 4, [9500, 9501])]
    return [
        T("pd_r8_tiny", tiny, "R8: 1P1D, kv_router, no transfer cost", **KVR, **pd_args()),
        T("pd_r8_tiny_rr", tiny, "R8 with round robin", **pd_args()),
        T("pd_r8b_tiny", tiny, "R8b: 131072 B/token at 50 GB/s, full_prompt", **KVR, **pd_args(prefill=r8b, decode=r8b)),
        T("pd_r8c_tiny", tiny, "R8c: destination_missing", **KVR,
          **pd_args(prefill={**r8b, "kv_transfer_timing_mode": "destination_missing"}, decode=r8b)),
        T("pd_t1_transfer", [pd_req(0, 1000, 3, 100)], "1000 ms transfer", trace_block_size=64, **KVR,
          **pd_args(prefill=x1, **fixed)),
        T("pd_t2_dest_missing_repeat", [pd_req(0, 1000, 3, 100), pd_req(2000, 1000, 3, 100)],
          "destination_missing, resident prefix on decode", trace_block_size=64, **KVR,
          **pd_args(prefill={**x1, "kv_transfer_timing_mode": "destination_missing"}, **fixed)),
        T("pd_t3_decode_room", t3, "decode pool of 24 blocks: reservations wait in order", trace_block_size=64,
          **KVR, **pd_args(decode={"num_gpu_blocks": 24}, **fixed)),
        T("pd_t4_busy_decode", [pd_req(0, 1000, 10, 100), pd_req(12, 1000, 5, 200)],
          "3 ms decode passes: reservation/activation at pass ends", trace_block_size=64, **KVR,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0},
                    decode={"timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 3.0}},
                    block_size=64, timing_model=fixed["timing_model"])),
        T("pd_t6_router", t6, "prefill/decode router costs with a held source", trace_block_size=64, **KVR,
          **pd_args(prefill=x1, **fixed)),
        T("pd_t7_decode_seqs1", t8, "decode max_num_seqs 1", trace_block_size=64, **KVR,
          **pd_args(decode={"max_num_seqs": 1}, **fixed)),
        T("pd_t8_held_blocks", t8, "held source blocks delay prefill admissions", trace_block_size=64, **KVR,
          **pd_args(prefill={**x1, "num_gpu_blocks": 20}, **fixed)),
        T("pd_mix_1p1d", mix, "mixed trace 1P1D", **pd_args()),
        T("pd_mix_2p2d_rr", mix, "mixed trace, 2 prefill + 2 decode workers, round robin",
          num_prefill_workers=2, num_decode_workers=2, **pd_args()),
        T("pd_mix_1p2d_rr_transfer", mix, "1 prefill + 2 decode, round robin, transfer cost",
          num_decode_workers=2, **pd_args(prefill=r8b)),
        T("pd_pressure_1p1d", pressure_trace(12), "small decode pool: preemption after transfer",
          **pd_args(decode={"num_gpu_blocks": 200, "block_size": 32}, prefill={"block_size": 32})),
        T("pd_pressure_queue_order", [pd_req(0, 640, 250, 100), pd_req(0, 641, 300, 200), pd_req(0, 642, 300, 300),
                                      pd_req(100, 900, 10, 400), pd_req(101, 320, 10, 500)],
          "decode pool of 40 blocks: activated requests queue behind a preempted one", trace_block_size=64,
          **KVR, **pd_args(decode={"num_gpu_blocks": 40}, **fixed)),
        T("pd_pressure_pending_dest", [pd_req(0, 840, 300, 100), pd_req(0, 841, 300, 200), pd_req(0, 842, 300, 300),
                                       pd_req(5, 1600, 20, 400), pd_req(30, 900, 10, 500)],
          "a waiting destination lets only transferred requests in, past a preempted one", trace_block_size=64,
          **KVR, **pd_args(prefill={"kv_transfer_bytes_per_token": 100000, "kv_transfer_bandwidth": 1.0},
                           decode={"num_gpu_blocks": 68}, **fixed)),
        T("pd_pressure_stall_new_dest", [pd_req(0, 1780, 106, 100), pd_req(0, 2128, 137, 200), pd_req(0, 2453, 128, 300),
                                         pd_req(0, 2882, 1056, 400), pd_req(0, 2843, 454, 500),
                                         pd_req(5000, 2250, 134, 600), pd_req(0, 11058, 58, 700)],
          "decode pool of 195 blocks, round robin: an activated request stuck behind a preempted head is "
          "admitted when a new destination queues (fuzz 2113/75)", trace_block_size=64,
          **pd_args(decode={"num_gpu_blocks": 195}, prefill={"num_gpu_blocks": 195}, **fixed)),
        T("pd_failed_handoff_ends_session", pd_fail_sessions, "decode pool of 40 blocks: a prompt it cannot hold "
          "fails at the handoff and its session's later turns never arrive", trace_block_size=64,
          **pd_args(decode={"num_gpu_blocks": 40}, **fixed)),
        T("pd_failed_handoff_ends_session_c1", pd_fail_sessions, "as pd_failed_handoff_ends_session, closed loop "
          "concurrency 1 (the next session starts at the failure)", trace_block_size=64, replay_concurrency=1,
          **pd_args(decode={"num_gpu_blocks": 40}, **fixed)),
        T("pd_failed_handoff_rr_turn", [pd_req(0, 100, 3, 9000), pd_req(20, 3000, 10, 418), pd_req(40, 292, 5, 2000),
                                        pd_req(60, 128, 5, 3000)],
          "2 decode pools of 40 blocks, round robin: a failed handoff takes its decode router turn",
          trace_block_size=64, num_decode_workers=2, **pd_args(decode={"num_gpu_blocks": 40}, **fixed)),
        T("pd_zero_output_full_hit", [pd_req(0, 1327, 0, 100), line(500, 128, 0, [100, 101]),
                                      pd_req(500, 300, 5, 200), line(800, 192, 0, [100, 101, 102]),
                                      line(800, 192, 0, [100, 101, 102])],
          "a zero-output prompt fully cached on the prefill worker takes the whole hit (no last-token "
          "recompute for the hidden token) and adds no decode time (fuzz 2115/56)", trace_block_size=64,
          **pd_args(**fixed)),
        T("pd_failed_handoff_release_order", [line(0, 128, 5, [1, 2]), pd_req(11, 768, 5, 100),
                                              pd_req(100, 1088, 5, 200), line(200, 192, 5, [1, 2, 3])],
          "a source release that waited for the prefill pass end frees its blocks before the failed "
          "handoff of that pass does: LRU eviction then takes one of its prefix blocks (fuzz 2113/62)",
          trace_block_size=64,
          **pd_args(prefill={"num_gpu_blocks": 30, "kv_transfer_bytes_per_token": 1000000,
                             "kv_transfer_bandwidth": 25.6}, decode={"num_gpu_blocks": 10}, **fixed)),
        T("pd_hold_at_decode_pass_end", [pd_req(0, 64, 100, 100), pd_req(1, 64, 20, 200), pd_req(1, 64, 20, 300),
                                         pd_req(1, 64, 20, 400)],
          "prefills held at the instant a decode pass ends find the decode worker idle: all reserved at once",
          trace_block_size=64,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 64.0}, **fixed)),
        T("pd_gated_retry", [pd_req(0, 64, 576, 100), pd_req(0, 64, 300, 200), pd_req(530, 64, 5, 300),
                             pd_req(530, 64, 6, 400), pd_req(530, 64, 7, 500)],
          "decode pool of 10 blocks: at the pass end that frees it, a decode pass held back by waiting "
          "destinations (a preempted request waits) takes one more destination per try, all three are "
          "reserved at 587 and the preempted request is readmitted then (fuzz 2123/47)", trace_block_size=64,
          **KVR, **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 64.0},
                           decode={"num_gpu_blocks": 10}, **fixed)),
        S("pd_gated_retry_fuzz2123", (10, 100, 8), "fuzz 2123/47 shrunk: closed loop (7 of 8 sessions, 3 turns), "
          "decode pool of 8 blocks of 32: two destinations and two preempted requests at one decode pass end",
          replay_concurrency=7, turns_per_session=3, **KVR,
          **pd_args(prefill={"num_gpu_blocks": 13, "kv_transfer_bytes_per_token": 1000000,
                             "kv_transfer_bandwidth": 50.0},
                    decode={"num_gpu_blocks": 8}, block_size=32, preemption_mode="lifo")),
        T("pd_successor_zero_pass", [pd_req(0, 1000, 0, 100), pd_req(0, 2500, 5, 200), pd_req(0, 300, 5, 300),
                                     pd_req(0, 400, 5, 400)],
          "closed loop 2, max_model_len 2000: at 10 the rejected session's successor (300) is prefilled "
          "10-20; the successor of the no-output request that ends in the idle decode worker's "
          "zero-duration pass is routed after the workers restarted (400: prefilled 20-30)",
          trace_block_size=64, replay_concurrency=2, **pd_args(max_model_len=2000, **fixed)),
        T("pd_successor_zero_pass_fuzz2125",
          [line(5050, 17542, 0, [1000000, 1000001, 1000002] + list(range(43, 75))),
           json.dumps({"timestamp": 5050, "output_length": 0, "hash_ids": [1000000], "input_tokens": 53}),
           line(5050, 13, 43, [1000000]), line(5050, 1825, 134, [1000000, 1000001, 1000002, 78]),
           line(5050, 1573, 147, range(79, 84))],
          "fuzz 2125/9 shrunk: closed loop 3, 1P2D round robin; the 1573-token successor of a no-output "
          "request waits for the prefill pass the 1825-token one (successor of a rejection) started",
          replay_concurrency=3, num_decode_workers=2,
          **pd_args(prefill={"num_gpu_blocks": 148}, decode={"num_gpu_blocks": 74}, block_size=64)),
        T("pd_pressure_seqs2", [pd_req(0, 1000, 30, 100), pd_req(0, 1001, 30, 200), pd_req(15, 600, 10, 300),
                                pd_req(16, 500, 10, 400), pd_req(17, 700, 40, 500)],
          "decode max_num_seqs 2: destinations wait for a sequence slot", trace_block_size=64,
          **KVR, **pd_args(decode={"max_num_seqs": 2, "num_gpu_blocks": 40}, **fixed)),
        T("pd_pressure_fifo_transfer", pressure_trace(14, seed=11), "decode FIFO preemption, 180 blocks of 32, transfer",
          **pd_args(prefill={"block_size": 32, **r8b}, decode={"num_gpu_blocks": 180, "block_size": 32,
                                                               "preemption_mode": "fifo"})),
        T("pd_pressure_2p2d", pressure_trace(20, seed=5), "2 prefill + 2 decode, round robin, decode pools of 200 blocks",
          num_prefill_workers=2, num_decode_workers=2,
          **pd_args(prefill={"block_size": 32, **r8b}, decode={"num_gpu_blocks": 200, "block_size": 32})),
        T("pd_pressure_2p2d_fifo", pressure_trace(20, seed=5), "2P2D round robin, decode pools of 170 blocks, FIFO",
          num_prefill_workers=2, num_decode_workers=2,
          **pd_args(prefill={"block_size": 32, **r8b}, decode={"num_gpu_blocks": 170, "block_size": 32,
                                                               "preemption_mode": "fifo"})),
        T("pd_prefill_pressure", pressure_trace(12), "small prefill pool: held sources block admissions",
          **pd_args(prefill={"num_gpu_blocks": 120, "block_size": 32, **r8b}, decode={"block_size": 32})),
        # ---- TRT-LLM in both pools (guaranteed-no-evict destinations)
        T("pd_trtllm_tiny", tiny, "trtllm 1P1D, kv_router", **KVR, **pd_args(backend="trtllm")),
        T("pd_trtllm_fixed_room", [pd_req(0, 640, 200, 100), pd_req(0, 641, 200, 200), pd_req(0, 642, 200, 300),
                                   pd_req(100, 320, 10, 400), pd_req(101, 900, 30, 500)],
          "trtllm, decode pool of 60 blocks: destinations wait for their to-completion room", trace_block_size=64,
          **KVR, **pd_args(decode={"num_gpu_blocks": 56}, backend="trtllm", **fixed)),
        T("pd_trtllm_held_tails", [pd_req(0, 640, 200, 100), pd_req(0, 641, 150, 200), pd_req(5, 1000, 100, 300),
                                   pd_req(6, 1300, 100, 400), pd_req(7, 200, 20, 500)],
          "trtllm: reserved and activated destinations' completion tails count against new ones",
          trace_block_size=64, **KVR,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 100000, "kv_transfer_bandwidth": 1.0},
                    decode={"num_gpu_blocks": 60, "max_num_seqs": 3}, backend="trtllm", **fixed)),
        T("pd_trtllm_pressure", pressure_trace(12), "trtllm, 200 decode blocks of 32",
          **pd_args(decode={"num_gpu_blocks": 200, "block_size": 32}, prefill={"block_size": 32}, backend="trtllm")),
        T("pd_trtllm_2p2d_transfer", pressure_trace(20, seed=5), "trtllm 2P2D round robin, transfer, 170 decode blocks",
          num_prefill_workers=2, num_decode_workers=2,
          **pd_args(prefill={"block_size": 32, **r8b}, decode={"num_gpu_blocks": 170, "block_size": 32},
                    backend="trtllm")),
        T("pd_trtllm_repeat_missing", [pd_req(0, 1000, 3, 100), pd_req(2000, 1000, 3, 100)],
          "trtllm destination_missing: no prefix credit at the destination", trace_block_size=64, **KVR,
          **pd_args(prefill={**x1, "kv_transfer_timing_mode": "destination_missing"}, backend="trtllm", **fixed)),
        T("pd_trtllm_full_hit_free", [pd_req(0, 128, 3, 100), pd_req(100, 128, 3, 100), pd_req(200, 128, 3, 100),
                                      pd_req(200, 192, 3, 300), pd_req(299, 64, 3, 400), pd_req(300, 128, 4, 100)],
          "trtllm: a prefill worker's full prefix hit samples its hidden token for free (alone: a "
          "zero-duration pass, held at 100; beside a prefill: held at 210); the zero pass at 309 "
          "hands off after the decode worker started its pass (reserved at 310)", trace_block_size=64,
          **pd_args(backend="trtllm", **fixed)),
        T("pd_trtllm_full_hit_fuzz2126",
          [json.dumps({"timestamp": 7, "session_id": "s1", "input_length": 1197, "output_length": 5,
                       "hash_ids": [50, 51, 52]}),
           json.dumps({"timestamp": 17, "session_id": "s1", "input_length": 174, "output_length": 135,
                       "hash_ids": [1000000], "delay_ms": 250}),
           json.dumps({"timestamp": 17, "session_id": "s1", "input_length": 8, "output_length": 84,
                       "hash_ids": [1000000]})],
          "fuzz 2126/6 shrunk: trtllm 1P1D, bs 8, max_model_len 1000; the 8-token turn is a full "
          "prefix hit held at its admission (we took one decode pass: 5.74 ms of duration)",
          **pd_args(backend="trtllm", block_size=8, max_model_len=1000, speedup_ratio=0.0)),
        T("pd_zero_pass_round", [pd_req(0, 128, 3, 100), pd_req(20, 128, 3, 300), pd_req(25, 128, 0, 100),
                                 pd_req(25, 64, 0, 100), pd_req(25, 64, 5, 500), pd_req(30, 64, 6, 600)],
          "prefill max_num_seqs 2: at 30 the prefill worker's zero-duration pass (two no-output full "
          "hits) hands off after the decode worker started (reserved at 31); the worker's next pass "
          "starts before the arrival at 30 is routed", trace_block_size=64,
          **pd_args(prefill={"max_num_seqs": 2}, **fixed)),
        T("pd_pass_end_attempt_first", [pd_req(0, 64, 30, 100), pd_req(5, 640, 5, 200), pd_req(5, 640, 6, 200)],
          "3 ms decode passes, destination_missing: at the decode pass end 25.064 the waiting twin is "
          "reserved before the first one's transfer activates there, so none of its blocks is resident "
          "(10 blocks to move: activated at 28.064, not 25.064)", trace_block_size=64,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0,
                             "kv_transfer_timing_mode": "destination_missing"},
                    decode={"timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 3.0}},
                    block_size=64, timing_model=fixed["timing_model"])),
        T("pd_pass_end_attempt_first_fuzz2135",
          [json.dumps({"timestamp": 1000, "input_length": 363, "output_length": 97, "hash_ids": [1000000]}),
           json.dumps({"timestamp": 1200, "input_length": 388, "output_length": 61, "hash_ids": [1000000]}),
           json.dumps({"timestamp": 1200, "session_id": "s1", "input_length": 1003, "output_length": 1,
                       "hash_ids": [1000000]})],
          "fuzz 2135/160 shrunk: 1003 tokens reserved at the pass end where the 388-token prompt of the "
          "same prefix activates; 11 blocks to move, not 10 (activated one decode pass later)",
          trace_block_size=1024, **KVR,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 50.0,
                             "kv_transfer_timing_mode": "destination_missing"},
                    preemption_mode="fifo", decode_speedup_ratio=1.7)),
        T("pd_restart_rejection_batch", restart_rej, "closed loop 4, max_model_len 2000: at 20 the pass end "
          "rejects one request and the restart's zero-duration pass the turn that waited (arrived at "
          "15); the first's successor (2500) is rejected in a zero-duration pass, then the restart's "
          "(2500) in another, before the 200-token successor of the first is routed (prefilled 20-30; "
          "we had the restart's successor routed beside it and rejected at 30)", trace_block_size=64,
          replay_concurrency=4, **pd_args(max_model_len=2000, **fixed)),
        T("pd_trtllm_restart_rejection_batch", restart_rej, "pd_restart_rejection_batch with TRT-LLM",
          trace_block_size=64, replay_concurrency=4, **pd_args(max_model_len=2000, backend="trtllm", **fixed)),
        T("pd_restart_successor_after_batch", restart_rej[:8] + [pd_req(0, 200, 5, 800), pd_req(0, 250, 5, 900)],
          "as pd_restart_rejection_batch with a 200-token successor of the restart's rejection: it is "
          "routed after the pass end's successor (2500) was rejected alone in a zero-duration pass at "
          "20 and is prefilled 20-30; the successor of that rejection (250) comes after it (30-40)",
          trace_block_size=64, replay_concurrency=4, **pd_args(max_model_len=2000, **fixed)),
        T("pd_trtllm_restart_successor_after_batch",
          restart_rej[:8] + [pd_req(0, 200, 5, 800), pd_req(0, 250, 5, 900)],
          "pd_restart_successor_after_batch with TRT-LLM", trace_block_size=64, replay_concurrency=4,
          **pd_args(max_model_len=2000, backend="trtllm", **fixed)),
        T("pd_restart_failed_handoff_batch",
          [pd_req(0, 1024, 0, 100), pd_req(0, 300, 50, 200), pd_req(0, 2500, 5, 300),
           line(0, 2500, 5, range(400, 440), session_id="sW"),
           line(0, 1024, 0, range(100, 116), session_id="sW", delay_ms=5)] + restart_rej[5:],
          "as pd_restart_rejection_batch, but the waiting turn is a no-output full prefix hit whose "
          "handoff fails (1024 tokens, 10 decode blocks) in the restart's zero-duration pass: its "
          "session's successor is routed before the successor of the pass end's one's rejection", trace_block_size=64, replay_concurrency=4,
          **pd_args(decode={"num_gpu_blocks": 10}, max_model_len=2000, **fixed)),
        T("pd_trtllm_restart_rejection_fuzz2126",
          [
           "{\"session_id\": \"s0\", \"input_length\": 913, \"output_length\": 0, \"hash_ids\": [1000000, 1000001]}",
           "{\"session_id\": \"s0\", \"input_length\": 54, \"output_length\": 48, \"hash_ids\": [30], \"delay\": 50}",
           "{\"input_length\": 2745, \"output_length\": 84, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004, 45]}",
           "{\"output_length\": 44, \"hash_ids\": [1000000, 1000001]}",
           "{\"input_length\": 2743, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004, 46], \"output_tokens\": 196}",
           "{\"input_length\": 885, \"output_length\": 133, \"hash_ids\": [47, 48]}",
           "{\"session_id\": \"s1\", \"input_length\": 19, \"output_length\": 128, \"hash_ids\": [1000000]}",
           "{\"input_length\": 2630, \"output_length\": 1, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004, 51]}",
           "{\"input_length\": 2900, \"output_length\": 130, \"hash_ids\": [52, 53, 54, 55, 56, 57]}",
           "{\"output_length\": 158, \"hash_ids\": [1000000, 1000001, 1000002, 1000003]}",
           "{\"input_length\": 17468, \"output_length\": 39, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87]}",
           "{\"input_length\": 772, \"output_length\": 8, \"hash_ids\": [88, 89]}",
           "{\"input_length\": 1810, \"output_length\": 5, \"hash_ids\": [1000000, 1000001, 1000002, 1000003]}",
           "{\"session_id\": \"s2\", \"input_length\": 1107, \"output_length\": 1, \"hash_ids\": [1000000, 1000001, 1000002]}",
           "{\"session_id\": \"s2\", \"input_length\": 2503, \"output_length\": 0, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004], \"delay_ms\": 2.5}",
           "{\"input_length\": 732, \"output_length\": 25, \"hash_ids\": [1000000, 1000001]}",
           "{\"input_length\": 582, \"output_length\": 152, \"hash_ids\": [1000000, 1000001, 90]}",
           "{\"input_length\": 20, \"output_length\": 1, \"hash_ids\": [91]}",
           "{\"input_length\": 1664, \"output_length\": 1, \"hash_ids\": [92, 93, 94, 95]}",
           "{\"input_length\": 2800, \"output_length\": 60, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 1000004, 96]}",
           "{\"input_length\": 2509, \"output_length\": 1, \"hash_ids\": [97, 98, 99, 100, 101]}",
           "{\"session_id\": \"s3\", \"input_length\": 1833, \"output_length\": 110, \"hash_ids\": [1000000, 1000001, 1000002, 1000003, 104]}",
           "{\"input_length\": 1, \"hash_ids\": [1000000], \"output_tokens\": 79}"],
          "fuzz 2126/244 shrunk: closed loop 6, max_model_len 64; at 33.6 the 2503-token turn that "
          "waited is rejected by the restart's zero-duration pass and its successor (1833) is rejected "
          "at 33.6 before the 1-token successor of the pass end's successors' rejection is routed "
          "(we had them in one pass: 50.1)",
          replay_concurrency=6, **pd_args(backend="trtllm", block_size=32, max_model_len=64)),
        T("pd_successor_zero_pass_decode_end",
          [line(0, 950, 0, range(100, 115), session_id="sA"),
           line(0, 200, 5, range(200, 204), session_id="sA", delay_ms=0),
           pd_req(0, 100, 9, 300), pd_req(0, 2500, 5, 400), pd_req(0, 2500, 5, 500), pd_req(0, 300, 5, 600),
           pd_req(0, 2500, 5, 700), pd_req(0, 150, 5, 800), pd_req(0, 180, 5, 900)],
          "closed loop 4: the no-output 950-token turn's transfer ends mid decode pass (19.5) and it "
          "ends at that pass end (20) in the decode worker's zero-duration pass; its successor is "
          "routed after the workers started with the pass end's successors (prefilled 30-40)",
          trace_block_size=64, replay_concurrency=4,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 100.0},
                    max_model_len=2000, **fixed)),
        T("pd_sessions", session_trace("delay"), "multi-turn sessions 1P1D", **pd_args()),
        T("pd_concurrency", mix, "closed loop concurrency 3, 1P1D", replay_concurrency=3, **pd_args()),
        T("pd_tp_dp", tiny, "prefill tp 2, decode dp 2", **pd_args(top_p={"tensor_parallel_size": 2},
                                                                    top_d={"dp_size": 2})),
        S("pd_synth", (2000, 40, 60), "synthetic 1P1D, rate 10, shared prefixes", request_rate=10.0,
          shared_prefix_ratio=0.5, num_prefix_groups=3, **KVR, **pd_args(prefill=r8b)),
        S("pd_synth_2p3d", (1500, 60, 80), "synthetic 2 prefill + 3 decode, kv_router", request_rate=25.0,
          num_prefill_workers=2, num_decode_workers=3, **KVR, **pd_args()),
    ] + sglang_disagg_scenarios()


def sglang_disagg_scenarios():
    """SGLang in both pools: destination first (the decode rank reserves at arrival, then the
    prefill runs; tools/REFERENCE_NOTES.md, "SGLang disaggregation")."""
    tiny = tiny_trace()
    mix = mixed_trace(11)
    sgf = {"backend": "sglang", "block_size": 64,
           "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}}
    x1 = {"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1.0}
    xm = {**x1, "kv_transfer_timing_mode": "destination_missing"}
    r8b = {"kv_transfer_bytes_per_token": 131072, "kv_transfer_bandwidth": 50.0}
    sg16 = {"backend": "sglang", "block_size": 16}
    gated_retry_lines = [
        "{\"timestamp\": 5000, \"input_length\": 2089, \"output_length\": 100, \"hash_ids\": [10, 11, 12, 13, 14]}",
        "{\"timestamp\": 5003, \"output_length\": 94, \"hash_ids\": [2000000, 2000001, 2000002, 2000003], \"input_tokens\": 1806}",
        "{\"timestamp\": 5006, \"input_length\": 956, \"output_length\": 928, \"hash_ids\": [48, 49]}",
        "{\"timestamp\": 5006, \"session_id\": \"s1\", \"input_length\": 987, \"output_length\": 154, \"hash_ids\": [1000000, 1000001]}",
        "{\"timestamp\": 5009, \"input_length\": 1688, \"output_length\": 42, \"hash_ids\": [112, 113, 114, 115]}",
        "{\"input_length\": 7385, \"output_length\": 47, \"hash_ids\": [2000000, 2000001, 2000002, 2000003, 2000004, 2000005, 2000006, 2000007, 116, 117, 118, 119, 120, 121, 122], \"created_time\": 5009}",
        "{\"timestamp\": 5009, \"input_length\": 307, \"output_length\": 81, \"hash_ids\": [123]}",
        "{\"timestamp\": 5009, \"input_length\": 11932, \"output_length\": 152, \"hash_ids\": [3000000, 3000001, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146]}",
        "{\"timestamp\": 5009, \"session_id\": \"s3\", \"input_length\": 2922, \"output_length\": 22, \"hash_ids\": [3000000, 3000001, 147, 148, 149, 150]}",
        "{\"timestamp\": 5010, \"input_length\": 2236, \"output_length\": 61, \"hash_ids\": [1000000, 1000001, 1000002, 159, 160]}",
    ]
    pass_end_first_lines = [
        "{\"timestamp\": 0, \"session_id\": \"s0\", \"input_length\": 2030, \"output_length\": 110, \"hash_ids\": [2000000, 2000001, 2000002, 2000003]}",
        "{\"timestamp\": 0, \"input_length\": 1222, \"output_length\": 191, \"hash_ids\": [2000000, 2000001, 2000002]}",
        "{\"timestamp\": 0, \"input_length\": 1887, \"output_length\": 108, \"hash_ids\": [23, 24, 25, 26]}",
        "{\"timestamp\": 0, \"input_length\": 1505, \"output_length\": 86, \"hash_ids\": [2000000, 2000001, 2000002]}",
    ]
    return [
        T("pd_sglang_t1_transfer", [pd_req(0, 1000, 5, 100)], "SGLang: reserved at arrival, 1000 ms transfer",
          trace_block_size=64, **KVR, **pd_args(prefill=x1, **sgf)),
        T("pd_sglang_repeat_missing", [pd_req(0, 1024, 3, 100), pd_req(2000, 1024, 3, 100),
                                       pd_req(4000, 1100, 3, 100)],
          "SGLang destination_missing: resident prefix pages (whole prompt pages) are not moved",
          trace_block_size=64, **KVR, **pd_args(prefill=xm, **sgf)),
        T("pd_sglang_decode_room", [pd_req(0, 1000, 30, 100), pd_req(0, 1001, 10, 200), pd_req(12, 300, 10, 400)],
          "SGLang decode pool of 24 pages: prefills wait for their destinations, in order",
          trace_block_size=64, **KVR, **pd_args(decode={"num_gpu_blocks": 24}, **sgf)),
        T("pd_sglang_busy_decode", [pd_req(0, 1000, 10, 100), pd_req(12, 1000, 5, 200)],
          "SGLang decode_ms 3: an arrival during a decode pass is reserved at its end",
          trace_block_size=64, **KVR,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0},
                    decode={"timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 3.0}}, **sgf)),
        T("pd_sglang_seqs1", [pd_req(0, 1000, 10, 100), pd_req(15, 1001, 10, 200)],
          "SGLang decode max_num_seqs 1: the seat limit does not hold the reservation back",
          trace_block_size=64, **KVR, **pd_args(decode={"max_num_seqs": 1}, **sgf)),
        T("pd_sglang_held_pages", [pd_req(0, 1000, 10, 100), pd_req(0, 1001, 10, 200)],
          "SGLang prefill pool of 20 pages: held source pages delay the next prefill",
          trace_block_size=64, **KVR, **pd_args(prefill={**x1, "num_gpu_blocks": 20}, **sgf)),
        T("pd_sglang_retract", [pd_req(0, 1024, 3, 100), pd_req(0, 1024, 3, 200), pd_req(1, 1000, 30, 300),
                                pd_req(1, 1000, 30, 400)],
          "SGLang decode pool of 33 pages: decode retraction recomputes without prefill time",
          trace_block_size=64, **KVR, **pd_args(decode={"num_gpu_blocks": 33}, **sgf)),
        T("pd_sglang_too_big", [pd_req(0, 1000, 3, 100), pd_req(5, 300, 3, 200)],
          "SGLang: a prompt larger than the decode pool fails at arrival", trace_block_size=64, **KVR,
          **pd_args(decode={"num_gpu_blocks": 10}, **sgf)),
        T("pd_sglang_2p2d_rr", [pd_req(0, 1000, 5, 100), pd_req(0, 1001, 5, 200), pd_req(0, 1002, 5, 300),
                                pd_req(1, 1003, 5, 400)],
          "SGLang 2P2D round robin", trace_block_size=64, num_prefill_workers=2, num_decode_workers=2,
          **pd_args(**sgf)),
        T("pd_sglang_tiny", tiny, "SGLang bs 16, 1P1D, kv_router", **KVR, **pd_args(**sg16)),
        T("pd_sglang_tiny_transfer", tiny, "SGLang bs 16, 1P1D, round robin, destination_missing transfer",
          **pd_args(prefill={**r8b, "kv_transfer_timing_mode": "destination_missing"}, **sg16)),
        T("pd_sglang_mix_2p2d", mix, "SGLang bs 32, mixed trace, 2P2D round robin, transfer",
          num_prefill_workers=2, num_decode_workers=2,
          **pd_args(prefill=r8b, backend="sglang", block_size=32)),
        T("pd_sglang_mix_pressure", mix, "SGLang bs 32, mixed trace, decode pool of 400 pages",
          **pd_args(decode={"num_gpu_blocks": 400}, backend="sglang", block_size=32)),
        T("pd_sglang_dp", tiny, "SGLang bs 16, decode dp 2, round robin", **pd_args(top_d={"dp_size": 2}, **sg16)),
        T("pd_sglang_dedupe_retry", [pd_req(0, 640, 20, 100), pd_req(0, 640, 20, 100), pd_req(0, 630, 20, 300)],
          "SGLang decode pool of 25 pages: an activation whose pages are already cached frees its "
          "copies and the waiting destination is retried at once",
          trace_block_size=64, **KVR, **pd_args(decode={"num_gpu_blocks": 25}, **sgf)),
        T("pd_sglang_release_after_end", [pd_req(0, 1000, 0, 100), pd_req(5, 1000, 5, 200),
                                          pd_req(12, 1100, 5, 100)],
          "SGLang: a no-output request ends on the decode side before its source is released; "
          "the released prompt pages are still matched (reuse 960)",
          trace_block_size=64, **KVR,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0}, **sgf)),
        T("pd_sglang_2p_seats", [pd_req(0, 500, 10, 100), pd_req(0, 600, 10, 200), pd_req(0, 700, 10, 300),
                                 pd_req(0, 800, 10, 400)],
          "SGLang 2P1D round robin, decode max_num_seqs 2: transfers ending at one instant activate "
          "in the order they started (prefill worker 0's first), not by request id",
          trace_block_size=64, num_prefill_workers=2, **pd_args(decode={"max_num_seqs": 2}, **sgf)),
        T("pd_sglang_fail_successor", [pd_req(0, 1000, 3, 100), pd_req(0, 300, 5, 200), pd_req(0, 200, 5, 300)],
          "SGLang, concurrency 2, decode pool of 10 pages: the first prompt fails at arrival; the "
          "session started in its place arrives at 0 but joins the prefill pass after (10)",
          trace_block_size=64, replay_concurrency=2, **KVR, **pd_args(decode={"num_gpu_blocks": 10}, **sgf)),
        T("pd_sglang_successor_zero_pass", [pd_req(0, 1000, 0, 100), pd_req(0, 300, 5, 200),
                                            pd_req(10, 300, 5, 300)],
          "SGLang, concurrency 2, decode pool of 17 pages: the no-output prompt ends at its activation "
          "(10) in a zero-duration decode pass that reserves the next destination; the successor it "
          "starts is reserved at 10 but prefilled in the next pass (20)",
          trace_block_size=64, replay_concurrency=2, **KVR, **pd_args(decode={"num_gpu_blocks": 17}, **sgf)),
        T("pd_sglang_gated_retry", gated_retry_lines,
          "SGLang bs 48 (fuzz 2117/29, shrunk): with a retracted request waiting and a destination "
          "waiting for room, the decode rank's effect-free pass still takes one destination (2236 "
          "reserved at 7464.239 beside 2922), then the readmission runs at that instant",
          **KVR, **pd_args(prefill={"num_gpu_blocks": 512, "kv_transfer_bytes_per_token": 1000,
                                    "kv_transfer_bandwidth": 5.0},
                           decode={"num_gpu_blocks": 256}, backend="sglang", block_size=48, speedup_ratio=2.5,
                           prefill_decode_interval=1,
                           sglang={"schedule_policy": "lpm", "chunked_prefill_size": 3072})),
        T("pd_sglang_pass_end_first", pass_end_first_lines,
          "SGLang bs 1, 2P1D round robin (fuzz 2117/65, shrunk): a decode pass end tries its "
          "reservation before the activation applied there frees duplicate prompt pages; 1887 is "
          "reserved at that activation (54.484), the fully resident 1505 at the next pass end (86.134)",
          num_prefill_workers=2,
          **pd_args(prefill={"num_gpu_blocks": 8765}, decode={"num_gpu_blocks": 4382}, backend="sglang")),
        T("pd_sglang_chunked_recompute", [pd_req(0, 1024, 3, 100), pd_req(0, 1024, 3, 200),
                                          pd_req(1, 1000, 30, 300), pd_req(1, 1000, 30, 400)],
          "SGLang decode pool of 33 pages, decode prefill_decode_interval 1 and 64-token chunks: the "
          "retracted request's zero-duration recompute passes still count as prefill rounds (readmitted "
          "at 51, first token at 61)",
          trace_block_size=64, **KVR,
          **pd_args(decode={"num_gpu_blocks": 33, "prefill_decode_interval": 1,
                            "sglang": {"chunked_prefill_size": 64}}, **sgf)),
        T("pd_sglang_ready_queue_lpm", [pd_req(0, 640, 30, 100), pd_req(0, 128, 5, 200), pd_req(0, 1024, 5, 300)],
          "SGLang lpm, decode max_num_seqs 1, 1000 GB/s: transferred requests wait for a seat in "
          "activation order (640 before the fully cached 1024 at 15.128), outside the lpm sort "
          "(fuzz 2305/61, 2305/253)",
          trace_block_size=64,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0},
                    decode={"max_num_seqs": 1}, sglang={"schedule_policy": "lpm"}, **sgf)),
        T("pd_sglang_failed_reserve_refresh",
          [pd_req(0, 505, 0, 100), pd_req(0, 1152, 0, 200), pd_req(0, 1938, 56, 300), pd_req(0, 6003, 60, 400),
           line(5, 87 * 64, 0, list(range(100, 108)) + list(range(600, 679)))],
          "SGLang decode pool of 151 pages, destination_missing: the waiting 5568-token destination's "
          "failed attempts lock (refresh) the 505-token prompt's 7 cached pages, so a later eviction "
          "takes the 1152-token prompt's tail instead; 80 pages to move, not 81",
          trace_block_size=64,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 1000.0,
                             "kv_transfer_timing_mode": "destination_missing"},
                    decode={"num_gpu_blocks": 151}, **sgf)),
        T("pd_sglang_failed_reserve_fuzz2305", [
            '{"input_length": 1938, "hash_ids": [4000000, 4000001, 4000002, 4000003, 4000004, 10, 11, 12], "created_time": 0, "output_tokens": 56}',
            '{"timestamp": 3, "session_id": "s1", "input_length": 505, "output_length": 0, "hash_ids": [2000000, 2000001, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48]}',
            '{"timestamp": 3, "session_id": "s2", "input_length": 6003, "output_length": 14, "hash_ids": [3000000, 3000001, 3000002, 3000003, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68]}',
            '{"timestamp": 4, "input_length": 1152, "output_length": 0, "hash_ids": [71, 72, 73, 74, 75]}',
            '{"timestamp": 4, "input_length": 2174, "output_length": 0, "hash_ids": [2000000, 2000001, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85]}'],
          "fuzz 2305/172 shrunk: SGLang 2P1D, default timing, destination_missing at 0.5 GB/s; the "
          "2174-token destination's failed attempts keep the 505-token prompt's pages fresh: 27 pages "
          "moved, not 28 (16.78 ms of duration)",
          trace_block_size=256, trace_format="mooncake-delta", num_prefill_workers=2,
          **pd_args(prefill={"num_gpu_blocks": 303, "kv_transfer_bytes_per_token": 131072,
                             "kv_transfer_bandwidth": 0.5, "kv_transfer_timing_mode": "destination_missing"},
                    decode={"num_gpu_blocks": 151}, backend="sglang", block_size=64,
                    preemption_mode="lifo", speedup_ratio=0.5)),
        T("pd_sglang_transfer_reservation_order",
          [pd_req(0, 64, 30, 100), pd_req(1, 64, 30, 200), pd_req(12.5, 64, 5, 300), pd_req(24.5, 64, 5, 400),
           pd_req(24.6, 64, 5, 500)],
          "SGLang 2P1D round robin, 50 GB/s, decode max_num_seqs 3: 24.5 and 24.6 are reserved at "
          "the decode pass end 25.28 (24.5 first, prefill worker 1; 24.6 on worker 0), prefilled "
          "together, and their transfers end together at 36.56: they activate in reservation order, "
          "so 24.5 takes the free seat at 37.28 and 24.6 waits to 41.28 (fuzz 99105/51)",
          trace_block_size=64, num_prefill_workers=2,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 50.0},
                    decode={"max_num_seqs": 3}, **sgf)),
        T("pd_sglang_transfer_reservation_not_start", [
            '{"timestamp": 5.72, "input_length": 100, "output_length": 30, "hash_ids": [8000, 8001]}',
            '{"timestamp": 6.56, "input_length": 64, "output_length": 10, "hash_ids": [1000]}',
            '{"timestamp": 9.12, "input_length": 128, "output_length": 30, "hash_ids": [0, 1]}',
            '{"timestamp": 9.18, "input_length": 128, "output_length": 3, "hash_ids": [6000, 6001]}',
            '{"timestamp": 35.64, "input_length": 64, "output_length": 5, "hash_ids": [4000]}',
            '{"timestamp": 36.9, "input_length": 64, "output_length": 5, "hash_ids": [2000]}',
            '{"timestamp": 36.99, "input_length": 200, "output_length": 40, "hash_ids": [7000, 7001, 7002, 7003]}',
            '{"timestamp": 37.22, "input_length": 100, "output_length": 3, "hash_ids": [5000, 5001]}',
            '{"timestamp": 38.38, "input_length": 200, "output_length": 30, "hash_ids": [3000, 3001, 3002, 3003]}',
          ],
          "SGLang 2P1D round robin, 50 GB/s, decode max_num_seqs 1: three transfers end at the "
          "decode pass end 54 -- two 200-token prompts from worker 0's pass (held 50, reserved at 33 "
          "and 35), one 100-token prompt from worker 1 (held 52, "
          "reserved at 34): they activate in reservation order (33, 34, 35), not in the order the "
          "transfers started; the 100-token one decodes at 135, not 165",
          trace_block_size=64, num_prefill_workers=2,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 50.0},
                    decode={"max_num_seqs": 1}, **sgf)),
        S("pd_sglang_reservation_order_fuzz99105", (1, 20, 9),
          "fuzz 99105/51 shrunk (17 -> 9 requests): SGLang 2P1D, 1-token prompts, Poisson 200/s; the "
          "requests at 64.951 and 64.957 are reserved at one decode pass end (in that order; prefill "
          "workers 1 and 0), prefilled together, transfers end together: the first reserved activates "
          "first",
          request_rate=200.0, arrival_seed=544, num_prefill_workers=2,
          **pd_args(prefill={"kv_transfer_bytes_per_token": 1000000, "kv_transfer_bandwidth": 50.0},
                    backend="sglang", max_num_seqs=2,
                    sglang={"schedule_policy": "lpm", "clip_max_new_tokens": 256})),
        S("pd_sglang_synth", (2000, 40, 60), "SGLang synthetic 1P1D, rate 10, shared prefixes, kv_router",
          request_rate=10.0, shared_prefix_ratio=0.5, num_prefix_groups=3, **KVR,
          **pd_args(prefill=r8b, backend="sglang", block_size=64)),
    ]


# --------------------------------------------------------------------------------------------
# Attention data parallel (dp_size > 1; names prefixed dp_): a worker is dp_size ranks that
# share one pass clock; prefill_schedule_interval throttles prefills of decoding ranks.
# --------------------------------------------------------------------------------------------
DRAIN2252_LINES = [
    '{"timestamp": 0, "output_length": 0, "hash_ids": [1000000, 1000001, 10, 11, 12, 13, 14, 15, 16, 17], '
    '"input_tokens": 917}',
    line(50, 1536, 160, [1000000, 1000001] + list(range(128, 142))),
    line(50, 2351, 56, [1000000, 1000001] + list(range(166, 188))),
]
DRAIN_RATIO_LINES = [line(0, 34, 300, [1]), line(0, 10, 1, [2]), line(305, 20, 0, [3]), line(305, 10, 0, [4]),
                     line(400, 22, 400, [5]), line(400, 10, 1, [6]), line(401, 30, 400, [7])]
# fuzz case 2253/44, shrunk (fixed 10/1 timing, chunk 32 per rank): on rank 1 the 1-token second turn
# of s5 (arrived at 850) is fully cached (the 5889-token prompt starts with its token), so lpm ranks
# it ahead of the 13145-token prompt and both join at 1840; with the "seq - 1" cap in the sort key
# (our bug) it tied at 0, the long prompt took the whole chunk and the short one waited until 5957
FUZZ2253_LINES = [
    json.dumps({"timestamp": 253, "hash_ids": [2000000, 2000001, 2000002] + list(range(642, 653)),
                "output_tokens": 0}),
    line(253, 5889, 18, [4000000, 4000001, 4000002, 4000003] + list(range(653, 742))),
    line(1003, 1, 0, [790]),
    line(313, 1, 47, [4000000], session_id="s5"),
    line(413, 1, 21, [4000000], session_id="s5"),
    line(316, 13145, 1, list(range(1276, 1482))),
]
# fuzz case 922049/78 (shrunk; dp 2 SGLang, polynomial timing, chunk 2 per rank, interval 1): on rank 1
# the 1-token last chunk of a 2634-token prompt (prefix 2633), a fully cached 235-token zero-output
# turn and a 1-token first chunk of a 2-token prompt form one batch whose mean prompt and mean prefix
# floor to the same value, so it takes no time; it computed prompt tokens all the same, so the next
# pass is the interval's decode round (we ran the 2-token prompt's last chunk first)
FUZZ922049_LINES = [
    '{"timestamp": 1000, "input_length": 1869, "output_length": 0, "hash_ids": [10, 11, 12, 13]}',
    '{"timestamp": 1710, "session_id": "s0", "input_length": 2915, "output_length": 0, "hash_ids": [17, 18, 19, 20, 21, 22]}',
    '{"timestamp": 1720, "session_id": "s0", "input_length": 235, "output_length": 0, "hash_ids": [1000000]}',
    '{"timestamp": 1000, "input_length": 2829, "output_length": 0, "hash_ids": [49, 50, 51, 52, 53, 54]}',
    '{"timestamp": 1000, "session_id": "s2", "input_length": 1, "output_length": 0, "hash_ids": [60]}',
    '{"timestamp": 1800, "session_id": "s2", "input_length": 1, "output_length": 0, "hash_ids": [61, 62, 63, 64, 65]}',
    '{"timestamp": 1000, "input_length": 498, "output_length": 0, "hash_ids": [1000000]}',
    '{"timestamp": 1200, "input_length": 1653, "output_length": 0, "hash_ids": [1000000, 1000001, 1000002, 1000003]}',
    '{"timestamp": 2200, "session_id": "s3", "input_length": 1, "output_length": 1, "hash_ids": [1000000]}',
    '{"timestamp": 3000, "session_id": "s3", "input_length": 2634, "output_length": 2, "hash_ids": [67, 68, 69, 70, 71, 72, 73]}',
    '{"timestamp": 2200, "input_length": 1, "output_length": 0, "hash_ids": [1000000, 1000001]}',
    '{"timestamp": 2200, "session_id": "s4", "input_length": 2448, "output_length": 0, "hash_ids": [74, 75, 76, 77, 78]}',
    '{"timestamp": 2900, "session_id": "s4", "input_length": 1, "output_length": 0, "hash_ids": [85, 86, 87, 88]}',
    '{"timestamp": 2200, "session_id": "s5", "input_length": 2, "output_length": 0, "hash_ids": [91]}',
    '{"timestamp": 2210, "session_id": "s5", "input_length": 1, "output_length": 0, "hash_ids": [97, 98, 99, 100]}',
    '{"timestamp": 2210, "session_id": "s6", "input_length": 166, "output_length": 0, "hash_ids": [105]}',
    '{"timestamp": 3710, "session_id": "s6", "input_length": 2, "output_length": 0, "hash_ids": [107]}',
    '{"timestamp": 2210, "input_length": 1, "output_length": 0, "hash_ids": [121]}',
]
FUZZ108_LINES = [
    '{"timestamp": 5000, "input_length": 19, "output_length": 170, "hash_ids": [1000000]}',
    '{"timestamp": 5200, "session_id": "s0", "input_length": 909, "output_length": 147, "hash_ids": [1000000, 1000001]}',
    '{"timestamp": 5400, "session_id": "s1", "input_length": 12022, "output_length": 156, "hash_ids": [17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40]}',
    '{"timestamp": 5400, "input_length": 4, "output_length": 177, "hash_ids": [1000000]}',
    '{"timestamp": 5400, "session_id": "s2", "input_length": 1517, "output_length": 42, "hash_ids": [76, 77, 78]}',
    '{"timestamp": 5400, "session_id": "s3", "input_length": 2239, "output_length": 0, "hash_ids": [1000000, 1000001, 80, 81, 82]}',
    '{"timestamp": 5400, "session_id": "s4", "input_length": 202, "output_length": 150, "hash_ids": [88, 89]}',
    '{"timestamp": 5400, "input_length": 1233, "output_length": 60, "hash_ids": [1000000, 1000001, 94]}',
    '{"timestamp": 5400, "input_length": 1802, "hash_ids": [95, 96, 97, 98], "output_tokens": 1}',
    '{"timestamp": 5403, "session_id": "s5", "input_length": 2887, "output_length": 79, "hash_ids": [99, 100, 101, 102, 103, 104]}',
    '{"timestamp": 5403, "input_length": 512, "output_length": 49, "hash_ids": [110]}',
    '{"timestamp": 5603, "session_id": "s6", "input_length": 2890, "output_length": 113, "hash_ids": [1000000, 1000001, 111, 112, 113, 114]}',
    '{"input_length": 1907, "output_length": 49, "hash_ids": [1000000, 1000001, 122, 123], "created_time": 5603}',
    '{"timestamp": 5603, "output_length": 112, "hash_ids": [1000000]}',
    '{"timestamp": 5603, "session_id": "s7", "input_length": 2373, "output_length": 1, "hash_ids": [1000000, 1000001, 124, 125, 126]}',
    '{"timestamp": 5713, "session_id": "s7", "input_length": 2618, "output_length": 91, "hash_ids": [1000000, 1000001, 163, 164, 165, 166], "delay_ms": 0}',
    '{"timestamp": 5603, "session_id": "s8", "input_length": 2605, "output_length": 1, "hash_ids": [1000000, 1000001, 167, 168, 169, 170]}',
    '{"timestamp": 5613, "session_id": "s8", "input_length": 805, "output_length": 972, "hash_ids": [171, 172], "delay_ms": 40}',
    '{"timestamp": 5653, "input_length": 2397, "output_length": 0, "hash_ids": [173, 174, 175, 176, 177]}',
    '{"timestamp": 5653, "output_length": 413, "hash_ids": [1000000], "input_tokens": 316}',
    '{"timestamp": 5653, "input_length": 19392, "output_length": 136, "hash_ids": [1000000, 1000001, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213]}',
    '{"timestamp": 5653, "input_length": 2910, "output_length": 0, "hash_ids": [1000000, 1000001, 214, 215, 216, 217]}',
    '{"timestamp": 5654, "input_length": 545, "hash_ids": [1000000, 1000001], "output_tokens": 511}',
    '{"timestamp": 5854, "session_id": "s9", "input_length": 1932, "output_length": 197, "hash_ids": [218, 219, 220, 221]}',
    '{"timestamp": 5854, "input_length": 343, "output_length": 193, "hash_ids": [227]}',
]


def dp_scenarios():
    fixed = {"block_size": 64, "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}}
    s1 = [line(0, 64, 5, [1]), line(5, 64, 3, [2]), line(15, 64, 2, [3])]
    s2 = [line(0, 64, 200, [1]), line(20, 128, 3, [2, 3]), line(20, 192, 3, [4, 5, 6]),
          line(70.5, 256, 100, [7, 8, 9, 10]), line(70.5, 320, 3, [11, 12, 13, 14, 15]),
          line(100.5, 384, 3, [20, 21, 22, 23, 24, 25])]
    s3 = [line(0, 64, 60, [1]), line(0, 64, 60, [2]), line(0, 64, 1, [3]), line(12.5, 128, 2, [30, 31]),
          line(12.5, 64, 1, [40]), line(12.5, 128, 2, [50, 51])]
    s5 = [line(0, 64, 2, [1]), line(11, 128, 50, [2, 3]), line(11, 192, 50, [4, 5, 6]),
          line(21.5, 256, 3, [7, 8, 9, 10])]
    tiny = tiny_trace()
    mix = mixed_trace(11)
    out = [
        T("dp2_barrier", s1, "dp 2: shared pass clock, fixed timing", trace_block_size=64,
          extra_engine_args=eng_top(fixed, dp_size=2)),
        T("dp2_sglang_barrier", s1, "dp 2, SGLang", trace_block_size=64,
          extra_engine_args=eng_top({**fixed, "backend": "sglang"}, dp_size=2)),
        T("dp2_wave_reset_i3", s5, "dp 2, prefill_schedule_interval 3, worker drains", trace_block_size=64,
          extra_engine_args=eng_top({**fixed, "prefill_schedule_interval": 3}, dp_size=2)),
        T("dp2_chunk_capacity_i4", s3, "dp 2, interval 4, budget 100 (capacity-bound escape)",
          trace_block_size=64,
          extra_engine_args=eng_top({**fixed, "prefill_schedule_interval": 4, "max_num_batched_tokens": 100},
                                    dp_size=2)),
        # fuzz 2403/149, 2404/119 (shrunk): budget 16 < block 32, interval 4; P's 16-token
        # second chunk shares the budget with L's decode, leaving one prompt token that is still
        # a prefill continuation (deferred on throttled passes), not a decode
        T("dp2_last_prompt_token_i4", [line(0, 16, 600, [1]), line(0, 1500, 100, list(range(10, 34))),
                                       line(50, 19, 1, [40]), line(50, 20, 11, [50])],
          "dp 2, interval 4, budget 16 < block 32: a single prompt token left is still a prefill chunk",
          trace_block_size=64,
          extra_engine_args=eng_top({**fixed, "block_size": 32, "prefill_schedule_interval": 4,
                                     "max_num_batched_tokens": 16}, dp_size=2)),
        T("dp_tiny_dp2", tiny, "tiny trace, dp 2", extra_engine_args=eng_top({}, dp_size=2)),
        T("dp_tiny_dp4_tp2", tiny, "tiny trace, dp 4, tp 2", extra_engine_args=eng_top({}, dp_size=4,
                                                                                     tensor_parallel_size=2)),
        T("dp_mix_2x2", mix, "mixed trace, 2 workers x dp 2", num_workers=2, extra_engine_args=eng_top({}, dp_size=2)),
        T("dp_mix_3x2_i2", mix, "mixed, 3 workers x dp 2, interval 2", num_workers=3,
          extra_engine_args=eng_top({"prefill_schedule_interval": 2}, dp_size=2)),
        T("dp_tiny_sglang_dp2", tiny, "tiny, SGLang bs 16, dp 2",
          extra_engine_args=eng_top({"backend": "sglang", "block_size": 16}, dp_size=2)),
        T("dp_tiny_sglang_dp3", tiny, "tiny, SGLang bs 16, dp 3 (per-rank chunk 8192/3 floored to 2720)",
          extra_engine_args=eng_top({"backend": "sglang", "block_size": 16}, dp_size=3)),
        T("dp2_sglang_pdi2", [line(0, 64, 30, [1]), line(5, 64, 30, [2]), line(12, 64, 3, [3]),
                              line(12.5, 64, 3, [4])],
          "dp 2, SGLang, prefill_decode_interval 2: the countdown is the worker's", trace_block_size=64,
          extra_engine_args=eng_top({**fixed, "backend": "sglang", "prefill_decode_interval": 2}, dp_size=2)),
        T("dp_mix_sglang_2x2_pdi3", mix, "mixed, SGLang, 2 workers x dp 2, prefill_decode_interval 3, chunk 2048",
          num_workers=2, extra_engine_args=eng_top({"backend": "sglang", "block_size": 32, "prefill_decode_interval": 3,
                                                    "sglang": {"chunked_prefill_size": 2048}}, dp_size=2)),
        T("dp_tiny_trtllm_dp3", tiny, "tiny, TRT-LLM, dp 3", extra_engine_args=eng_top({"backend": "trtllm"}, dp_size=3)),
        T("dp_pressure_dp2", pressure_trace(12), "small pools per rank, dp 2",
          extra_engine_args=eng_top({"num_gpu_blocks": 100, "block_size": 32}, dp_size=2)),
        S("dp_synth_2x4", (1000, 20, 10), "synthetic, 2 workers x dp 4", arrival_interval_ms=5.0, num_workers=2,
          extra_engine_args=eng_top({}, dp_size=4)),
        S("dp_synth_i3_rate", (1500, 80, 120), "synthetic, dp 4, interval 3, rate 30",
          request_rate=30.0, extra_engine_args=eng_top({"prefill_schedule_interval": 3}, dp_size=4)),
        T("dp_kvr_tiny_dp2", tiny, "kv_router over 2 workers x dp 2", num_workers=2,
          extra_engine_args=eng_top({}, dp_size=2), **KVR),
        S("dp_kvr_synth_groups", (1000, 50, 40), "kv_router, dp 2, shared prefixes", num_workers=2,
          arrival_interval_ms=0.0, shared_prefix_ratio=0.5, num_prefix_groups=2,
          extra_engine_args=eng_top({}, dp_size=2), **KVR),
    ]
    # attention DP scales schedule_conservativeness by 0.3: the admission ratio starts at 0.21
    # (not 0.7) and decays 0.3x as fast.  bs 1, pools at the reference's admission threshold:
    # the third request joins rank 0 at 10 (pool 232; ratio 0.7 would wait until 89), at 310
    # after 300 decode passes (pool 881), and with conservativeness 2 (pool 249)
    bs1 = {"backend": "sglang", "block_size": 1, "timing_model": fixed["timing_model"]}
    ratio_s = [line(0, 34, 80, [1]), line(0, 10, 5, [2]), line(1, 22, 158, [3])]
    out += [
        T("dp2_sglang_ratio_init", ratio_s, "dp 2, SGLang bs 1: admission ratio starts at 0.3 x 0.7",
          extra_engine_args=eng_top({**bs1, "num_gpu_blocks": 232}, dp_size=2)),
        T("dp2_sglang_ratio_sc2", ratio_s, "dp 2, SGLang bs 1, schedule_conservativeness 2 (ratio 0.42)",
          extra_engine_args=eng_top({**bs1, "num_gpu_blocks": 249, "sglang": {"schedule_conservativeness": 2.0}},
                                    dp_size=2)),
        T("dp2_sglang_ratio_decay", [line(0, 34, 500, [1]), line(0, 10, 5, [2]), line(310, 22, 500, [3])],
          "dp 2, SGLang bs 1: the ratio decays by 0.3 x the single-rank step",
          extra_engine_args=eng_top({**bs1, "num_gpu_blocks": 881, "sglang": {"clip_max_new_tokens": 4096}},
                                    dp_size=2)),
        # fuzz case 2201/108 (shrunk, fixed 80/10 timing): dp 2, prefill_decode_interval 5, bs 1
        T("dp2_sglang_pdi5_fuzz108", FUZZ108_LINES, "fuzz 2201/108: dp 2 SGLang, interval 5, reserve pressure",
          extra_engine_args=eng_top({"backend": "sglang", "num_gpu_blocks": 39056, "prefill_decode_interval": 5,
                                     "sglang": {"clip_max_new_tokens": 256},
                                     "timing_model": {"type": "fixed", "prefill_ms": 80.0, "decode_ms": 10.0}},
                                    dp_size=2)),
        # fuzz case 2252/11 (shrunk): the worker drains after a zero-output prefill with interval
        # rounds left; it ran them at that pass end, so the over-long prompt arriving later is
        # rejected at the end of its companion's prefill (90.82), not in a zero-duration round
        T("dp2_sglang_mml_drain_fuzz2252", DRAIN2252_LINES, "fuzz 2252/11: dp 2 SGLang, interval 5, "
          "max_model_len 2048: a drained worker runs its interval rounds at once",
          extra_engine_args=eng_top({"backend": "sglang", "num_gpu_blocks": 40102, "max_model_len": 2048,
                                     "prefill_decode_interval": 5}, dp_size=2)),
        # the same drain resets the admission ratio of a rank that decoded (bs 1, fixed 10/1):
        # the request at 401 joins at 415 only from a pool of 550 (without the zero-output
        # prefill at 305: 510)
        T("dp2_sglang_drain_ratio", DRAIN_RATIO_LINES, "dp 2 SGLang bs 1, interval 5: a drained worker's "
          "idle interval rounds reset the admission ratio",
          extra_engine_args=eng_top({"backend": "sglang", "block_size": 1, "num_gpu_blocks": 540,
                                     "prefill_decode_interval": 5,
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}},
                                    dp_size=2)),
        # a prefill batch that computes prompt tokens but takes no time (batch-mean prompt and prefix
        # floor to the same value) still counts as the interval's prefill round
        T("dp2_sglang_zero_time_prefill_fuzz922049", FUZZ922049_LINES, "fuzz 922049/78: dp 2 SGLang, "
          "interval 1, chunk 4: a zero-time prefill batch that computed tokens is followed by a decode round",
          extra_engine_args=eng_top({"backend": "sglang", "num_gpu_blocks": 25932, "prefill_decode_interval": 1,
                                     "sglang": {"schedule_policy": "fifo", "chunked_prefill_size": 4,
                                                "max_prefill_tokens": 1024}}, dp_size=2)),
        T("dp2_sglang_zero_time_prefill_fixed", SG_ZERO_TIME_PREFILL_DP2, "dp 2 SGLang bs 1, fixed 10/1, "
          "interval 1, chunk 4: as sglang_zero_time_prefill_pdi1 on rank 0", trace_block_size=1,
          extra_engine_args=eng_top({"backend": "sglang", "block_size": 1, "num_gpu_blocks": 10000,
                                     "prefill_decode_interval": 1,
                                     "sglang": {"chunked_prefill_size": 4, "max_prefill_tokens": 1024},
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}},
                                    dp_size=2)),
        # lpm ranks by the cached prefix of the whole sequence (no "seq - 1" cap): a fully cached
        # short prompt goes ahead of an uncached one (fuzz 2253/44: committed 94694 vs 94310)
        T("dp2_sglang_lpm_full_hit_fuzz2253", FUZZ2253_LINES, "fuzz 2253/44: dp 2 SGLang bs 1 lpm, a fully "
          "cached 1-token prompt is sorted ahead of an uncached one",
          trace_block_size=64,
          extra_engine_args=eng_top({"backend": "sglang", "block_size": 1, "num_gpu_blocks": 18783,
                                     "sglang": {"schedule_policy": "lpm", "chunked_prefill_size": 64,
                                                "max_prefill_tokens": 128},
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}},
                                    dp_size=2)),
    ]
    for i in (1, 2, 3, 5):
        out.append(T(f"dp2_throttle_i{i}", s2, f"dp 2, prefill_schedule_interval {i}", trace_block_size=64,
                     extra_engine_args=eng_top({**fixed, "prefill_schedule_interval": i}, dp_size=2)))
    return out


# --------------------------------------------------------------------------------------------
# KV router scenarios (router_mode kv_router; names prefixed kvr_).  The reference breaks
# cost ties with an unseeded generator, so equal workers swap labels run to run: these
# goldens keep everything but the worker indices ("worker_labels": "ties"), and only
# scenarios whose outcome does not depend on the tie-breaks (checked by running the
# reference several times) are kept.
# --------------------------------------------------------------------------------------------
KVR = {"router_mode": "kv_router"}


def kv_router_scenarios():
    tiny = tiny_trace()
    mix = mixed_trace(11)
    shared = mixed_trace(31, n=30, groups=2)
    rc = lambda **kw: json.dumps(kw)  # noqa: E731
    fixed = {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}
    return [
        T("kvr_tiny_2", tiny, "kv_router, 2 workers (vLLM)", num_workers=2, **KVR),
        T("kvr_tiny_4", tiny, "kv_router, 4 workers (vLLM)", num_workers=4, **KVR),
        T("kvr_tiny_2_sglang", tiny, "kv_router, 2 workers (SGLang bs 1)", num_workers=2,
          extra_engine_args=sg(), **KVR),
        T("kvr_tiny_4_sglang", tiny, "kv_router, 4 workers (SGLang bs 1)", num_workers=4,
          extra_engine_args=sg(), **KVR),
        T("kvr_mix_3", mix, "kv_router, 3 workers, mixed trace", num_workers=3, **KVR),
        T("kvr_shared_2", shared, "kv_router, 2 workers, 2 prefix groups", num_workers=2, **KVR),
        T("kvr_shared_8", shared, "kv_router, 8 workers, 2 prefix groups", num_workers=8, **KVR),
        T("kvr_shared_3_bs16", shared, "kv_router, 3 workers, bs 16", num_workers=3,
          extra_engine_args=eng(block_size=16), **KVR),
        T("kvr_shared_3_weight2", shared, "decode_active_request_weight 2", num_workers=3,
          router_config=rc(decode_active_request_weight=2.0), **KVR),
        T("kvr_shared_3_scale_credit", shared, "prefill_load_scale 0.5, overlap_score_credit 2", num_workers=3,
          router_config=rc(prefill_load_scale=0.5, overlap_score_credit=2.0), **KVR),
        T("kvr_shared_3_osw0", shared, "deprecated overlap_score_weight 0", num_workers=3,
          router_config=rc(overlap_score_weight=0.0), **KVR),
        T("kvr_shared_3_no_prefill", shared, "router_track_prefill_tokens false", num_workers=3,
          router_config=rc(router_track_prefill_tokens=False), **KVR),
        T("kvr_shared_3_no_blocks", shared, "router_track_active_blocks false", num_workers=3,
          router_config=rc(router_track_active_blocks=False), **KVR),
        T("kvr_shared_3_no_reuse", shared, "router_assume_kv_reuse false", num_workers=3,
          router_config=rc(router_assume_kv_reuse=False), **KVR),
        T("kvr_shared_3_lag30", shared, "kv_event_lag_ms 30", num_workers=3, kv_event_lag_ms=30.0, **KVR),
        T("kvr_shared_2_fixed_pressure", shared, "2 workers, small pools, fixed timing", num_workers=2,
          extra_engine_args=eng(num_gpu_blocks=200, block_size=32, timing_model=fixed), **KVR),
        T("kvr_shared_3_sglang_bs16", shared, "SGLang bs 16, 3 workers", num_workers=3,
          extra_engine_args=sg(block_size=16), **KVR),
        T("kvr_sessions_2", session_trace("delay"), "sessions, 2 workers", num_workers=2, **KVR),
        T("kvr_sessions_delta_conc", session_trace("delay_ms"), "delta sessions, concurrency 2, 2 workers",
          trace_format="mooncake-delta", replay_concurrency=2, num_workers=2, **KVR),
        S("kvr_synth_burst_4", (1000, 50, 40), "synthetic burst, 4 workers", arrival_interval_ms=0.0,
          num_workers=4, **KVR),
        S("kvr_synth_groups_3", (2000, 60, 90), "synthetic, 3 prefix groups, rate 15, 3 workers",
          request_rate=15.0, shared_prefix_ratio=0.5, num_prefix_groups=3, num_workers=3, **KVR),
        # larger runs: tie-breaks average out, the 2% bar applies
        S("kvr_synth_r7d_2", (4096, 128, 400), "R7d: 4096/128 x400, rate 8, prefix 0.75, 8 groups, 2 workers",
          request_rate=8.0, shared_prefix_ratio=0.75, num_prefix_groups=8, num_workers=2,
          keep_per_request=False, **KVR),
        T("kvr_big_4", mixed_trace(41, n=300, span_ms=30000, groups=6), "300 requests, 6 prefix groups, 4 workers",
          num_workers=4, **KVR),
        T("kvr_big_8_sglang", mixed_trace(42, n=300, span_ms=30000, groups=6),
          "300 requests, 6 prefix groups, 8 workers, SGLang bs 16", num_workers=8,
          extra_engine_args=sg(block_size=16), **KVR),
    ]


# --------------------------------------------------------------------------------------------
# SGLang scenarios (backend "sglang"; names prefixed sglang_)
# --------------------------------------------------------------------------------------------
def sg(sglang=None, **engine):
    """Engine args JSON for the SGLang backend (``sglang`` = the nested sglang.* options)."""
    engine = {"backend": "sglang", **engine}
    if sglang:
        engine["sglang"] = sglang
    return json.dumps({"engine": engine})


FIXED_10_1 = {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}
SG_ZERO_TIME_PREFILL = [line(0, 30, 0, range(1, 31)), line(1, 30, 0, range(1, 31)), line(1, 1, 3, [50]),
                        line(1, 2, 0, [60, 61])]
# dp 2 (chunk 4 = 2 per rank): the same on rank 0, 1-token fillers take rank 1
SG_ZERO_TIME_PREFILL_DP2 = [SG_ZERO_TIME_PREFILL[0], line(0, 1, 0, [101]), SG_ZERO_TIME_PREFILL[1],
                            line(1, 1, 0, [102]), SG_ZERO_TIME_PREFILL[2], line(1, 1, 0, [103]),
                            SG_ZERO_TIME_PREFILL[3]]


def sg_retract_trace(n=6, isl=300, osl=600, gap=0, seed=3):
    """Several concurrent long decodes with short prompts (all unique) -> retractions."""
    rng = random.Random(seed)
    return [line(i * gap, isl + rng.randint(-40, 40), osl + rng.randint(-60, 60),
                 [5000 + 10 * i + j for j in range(4)]) for i in range(n)]


def sg_lpm_trace():
    """For trace_block_size 16: a warm request caches [1..20]; then a burst of requests that
    (a) match the cached prefix at different depths, (b) share only their first 2 ids (= 32 tokens)
    with each other (in-batch duplicates), (c) are unique."""
    rows = [line(0, 320, 3, list(range(1, 21)))]
    uniq = 1000
    kinds = ["dup", "cached4", "dup", "uniq", "dup", "cached12", "dup2", "cached1", "dup2", "uniq",
             "dup", "cached20", "dup2", "uniq", "short"]
    for k, kind in enumerate(kinds):
        nb = 6 + (k * 5) % 9
        if kind == "dup":
            ids = [900, 901]
        elif kind == "dup2":
            ids = [910, 911]
        elif kind.startswith("cached"):
            ids = list(range(1, 1 + int(kind[6:])))
        elif kind == "short":
            ids, nb = [900], 1            # shorter than 32 tokens: never deprioritized
        else:
            ids = []
        while len(ids) < nb:
            ids.append(uniq)
            uniq += 1
        isl = 16 * len(ids) - (k % 5)
        rows.append(line(1, isl, 4 + k % 7, ids))
    return rows


def sg_mml_idle_trace():
    """max_model_len 200, prefill_decode_interval 5: over-long prompts that arrive while a
    zero/one-output prefill runs (nothing left to decode at its end: idle interval rounds),
    at such a pass end exactly, during deferred decode rounds, and while the worker is idle."""
    def ids(k, n):
        return [1000 * k + j for j in range(-(-n // 16))]
    return [
        line(0, 50, 0, ids(1, 50)), line(5, 300, 5, ids(2, 300)), line(5, 40, 3, ids(3, 40)),
        line(40, 60, 1, ids(4, 60)), line(45, 250, 2, ids(5, 250)), line(50, 640, 2, ids(6, 640)),
        line(50, 30, 2, ids(7, 30)),
        line(80, 50, 6, ids(8, 50)), line(92.5, 210, 3, ids(9, 210)), line(93, 45, 2, ids(10, 45)),
        line(94.5, 200, 1, ids(11, 200)),
        line(300, 220, 4, ids(12, 220)), line(300, 20, 2, ids(13, 20)),
    ]


def sg_mml_ratio_trace():
    """A long decode lowers the admission ratio; a zero-output prefill just before it ends
    leaves interval rounds with nothing to decode (they reset the ratio), so the late big
    prompt waits for room; over-long prompts arrive around the idle rounds."""
    def ids(k, n):
        return [1000 * k + j for j in range(-(-n // 16))]
    return [
        line(0, 100, 400, ids(1, 100)), line(405.5, 16, 0, ids(2, 16)), line(410, 200, 1000, ids(3, 200)),
        line(412, 1600, 3, ids(4, 1600)), line(419, 1500, 2, ids(5, 1500)), line(440, 700, 50, ids(6, 700)),
    ]


def sg_mml_chunk_trace():
    """Chunked prefill (128 tokens per pass) with max_model_len 600: over-long prompts arrive
    during chunk passes, with and without a short prompt next to them."""
    def ids(k, n):
        return [1000 * k + j for j in range(-(-n // 16))]
    return [
        line(0, 500, 3, ids(1, 500)), line(5, 700, 5, ids(2, 700)), line(15, 700, 5, ids(3, 700)),
        line(15, 40, 3, ids(4, 40)), line(60, 450, 0, ids(5, 450)), line(75, 601, 1, ids(6, 601)),
        line(75, 600, 1, ids(7, 600)), line(100, 120, 2, ids(8, 120)),
    ]


def sg_mml_session_trace():
    """Sessions whose turns are over max_model_len (300) between short turns, plus loose
    requests; replayed closed-loop, so rejected turns refill at once."""
    rows = []
    for sid, t0, turns in (("a", 0, [(50, 0), (400, 3), (40, 2), (310, 1), (60, 4)]),
                           ("b", 3, [(120, 1), (300, 2), (299, 1)]),
                           ("c", 7, [(900, 5), (30, 0), (500, 2), (20, 3)])):
        for i, (isl, osl) in enumerate(turns):
            d = {"timestamp": t0, "session_id": sid, "input_length": isl, "output_length": osl,
                 "hash_ids": [100_000 * (ord(sid) - 96) + j for j in range(-(-isl // 16))]}
            if i:
                d["delay"] = 0 if i % 2 else 5
            rows.append(json.dumps(d))
    for i, (ts, isl, osl) in enumerate([(2, 350, 2), (4, 60, 3), (20, 301, 0), (21, 80, 2)]):
        rows.append(line(ts, isl, osl, [500_000 + 100 * i + j for j in range(-(-isl // 16))]))
    return rows


def sg_pool_trace():
    """Moderate pressure with short/medium prompts and medium decodes (for tiny pages)."""
    rng = random.Random(21)
    out, ts = [], 0
    for i in range(14):
        L = rng.randint(40, 400)
        out.append(line(ts, L, rng.randint(20, 160), [700 + 3 * i + j for j in range(-(-L // 128))]))
        ts += rng.choice([0, 0, 3, 10, 25])
    return out


def sg_split_edge_trace(toucher_osl, probe):
    """A cached 160-token edge (A), then B; at 200 a toucher re-sends A's first 80 tokens, so
    its match (and, with one output token, its insert) stops inside A's edge; a 300-token
    prompt then evicts 126 tokens and the probe re-sends A or B.  The split-off prefix keeps
    A's old stamp (the reference's compressed radix node), so it goes before B."""
    a, b = list(range(1, 11)), list(range(21, 31))
    return [line(0, 160, 2, a), line(100, 160, 2, b), line(200, 80, toucher_osl, a[:5]),
            line(300, 300, 2, range(100, 119)), line(400, 160, 2, a if probe == "A" else b)]


def sglang_scenarios():
    tiny = tiny_trace()
    mix = mixed_trace(11)
    lpm = {"schedule_policy": "lpm"}
    return [
        # ---- docs/core-sim.md §9 R6 rows on our tiny trace
        T("sglang_r6_tiny_bs64", tiny, "R6: SGLang, tiny, bs 64", extra_engine_args=sg(block_size=64)),
        T("sglang_r6b_tiny_bs16_lpm", tiny, "R6b: SGLang, tiny, bs 16, 65536 blocks, lpm",
          extra_engine_args=sg(block_size=16, num_gpu_blocks=65536, sglang=lpm)),
        T("sglang_r6c_tiny_retract", tiny, "R6c: SGLang, tiny, bs 64, small pool (retractions)",
          extra_engine_args=sg(block_size=64, num_gpu_blocks=210)),
        T("sglang_r6c_tiny_retract_clip16", tiny, "tiny, bs 64, 300 pages, clip_max_new_tokens 16 (retractions)",
          extra_engine_args=sg(block_size=64, num_gpu_blocks=300, sglang={"clip_max_new_tokens": 16})),
        # ---- defaults (block_size 1)
        T("sglang_default_r1", r1(), "SGLang defaults, 1 request", extra_engine_args=sg()),
        T("sglang_default_r2", r2(), "SGLang defaults, 20x1000/50 burst (20000 tokens > 16384 pool)",
          extra_engine_args=sg()),
        T("sglang_default_r3", r3(), "SGLang defaults, shared prefix every 200 ms", extra_engine_args=sg()),
        T("sglang_default_mix", mix, "SGLang defaults, mixed trace", extra_engine_args=sg()),
        T("sglang_default_r5", r5(), "SGLang defaults, 20000-token prompt + 3000 (20000 > pool 16384?)",
          extra_engine_args=sg(num_gpu_blocks=32768)),
        # ---- tiny pages under pressure
        T("sglang_bs1_pressure", sg_pool_trace(), "bs 1, 1200-token pool, fixed timing",
          extra_engine_args=sg(block_size=1, num_gpu_blocks=1200, timing_model=FIXED_10_1)),
        T("sglang_bs2_pressure", sg_pool_trace(), "bs 2, 600 pages",
          extra_engine_args=sg(block_size=2, num_gpu_blocks=600)),
        T("sglang_bs4_pressure", sg_pool_trace(), "bs 4, 300 pages, fixed timing",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=300, timing_model=FIXED_10_1)),
        T("sglang_bs4_pressure_poly", sg_pool_trace(), "bs 4, 260 pages, polynomial",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=260)),
        # ---- heavy retraction
        T("sglang_retract_heavy_fixed", sg_retract_trace(), "6 x ~300/~600, 400 pages of 4, clip 8, fixed timing",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=400, timing_model=FIXED_10_1,
                               sglang={"clip_max_new_tokens": 8})),
        T("sglang_retract_clip64_fixed", sg_retract_trace(), "6 x ~300/~600, 500 pages of 4, clip 64, fixed timing",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=500, timing_model=FIXED_10_1,
                               sglang={"clip_max_new_tokens": 64})),
        T("sglang_retract_default_fixed", sg_retract_trace(), "6 x ~300/~600, 500 pages of 4, fixed timing",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=500, timing_model=FIXED_10_1)),
        T("sglang_retract_heavy_poly", sg_retract_trace(8, gap=7), "8 x ~300/~600 staggered, bs 1, 2500 tokens",
          extra_engine_args=sg(block_size=1, num_gpu_blocks=2500)),
        T("sglang_retract_heavy_bs16", sg_retract_trace(7, isl=500, osl=500, seed=4), "7 x ~500/~500, 160 pages of 16",
          extra_engine_args=sg(block_size=16, num_gpu_blocks=160)),
        # ---- schedule policy
        T("sglang_lpm_dups_bs1", sg_lpm_trace(), "lpm, in-batch duplicate rule, bs 1, seqs 3, fixed",
          trace_block_size=16, extra_engine_args=sg(block_size=1, max_num_seqs=3, timing_model=FIXED_10_1,
                                                    sglang=lpm)),
        T("sglang_lpm_dups_bs16", sg_lpm_trace(), "lpm, in-batch duplicate rule, bs 16, prefill 600",
          trace_block_size=16, extra_engine_args=sg(block_size=16, timing_model=FIXED_10_1,
                                                    sglang={"schedule_policy": "lpm", "max_prefill_tokens": 600})),
        T("sglang_lpm_dups_bs64", sg_lpm_trace(), "lpm, duplicate rule with 64-token key, bs 64, seqs 2",
          trace_block_size=16, extra_engine_args=sg(block_size=64, max_num_seqs=2, sglang=lpm)),
        T("sglang_fifo_dups_bs1", sg_lpm_trace(), "same as sglang_lpm_dups_bs1 with fifo",
          trace_block_size=16, extra_engine_args=sg(block_size=1, max_num_seqs=3, timing_model=FIXED_10_1)),
        S("sglang_lpm_over128", (256, 3, 150), "lpm with 150 waiting (falls back to fifo), prefix groups",
          arrival_interval_ms=0.0, shared_prefix_ratio=0.5, num_prefix_groups=5,
          extra_engine_args=sg(block_size=16, timing_model=FIXED_10_1,
                               sglang={"schedule_policy": "lpm", "max_prefill_tokens": 1024})),
        S("sglang_lpm_under128", (256, 3, 100), "lpm with 100 waiting, prefix groups",
          arrival_interval_ms=0.0, shared_prefix_ratio=0.5, num_prefix_groups=5,
          extra_engine_args=sg(block_size=16, timing_model=FIXED_10_1,
                               sglang={"schedule_policy": "lpm", "max_prefill_tokens": 1024})),
        T("sglang_lpm_mix", mix, "lpm on the mixed trace, bs 16", extra_engine_args=sg(block_size=16, sglang=lpm)),
        # the lpm key is the cached prefix over every full page of the sequence (no "seq - 1" cap):
        # Y (8 tokens, both pages cached by A) outranks X (first page cached) that arrived first
        T("sglang_lpm_full_hit_bs4", [line(0, 8, 1, [1, 2]), line(5, 8, 1, [1, 3]), line(5, 8, 2, [1, 2])],
          "lpm, bs 4, chunk 4: a fully cached prompt is sorted by its whole length", trace_block_size=4,
          extra_engine_args=sg(block_size=4, timing_model=FIXED_10_1,
                               sglang={"schedule_policy": "lpm", "chunked_prefill_size": 4})),
        # (schedule_policy "fcfs" / unknown strings are config errors in 1.6.1: errors_sglang.json)
        T("sglang_explicit_fifo", mix, "schedule_policy fifo given explicitly, bs 16",
          extra_engine_args=sg(block_size=16, sglang={"schedule_policy": "fifo"})),
        # ---- knobs
        T("sglang_pdi1", mix, "prefill_decode_interval 1",
          extra_engine_args=sg(block_size=16, prefill_decode_interval=1)),
        T("sglang_pdi3_fixed", mix, "prefill_decode_interval 3, fixed timing",
          extra_engine_args=sg(prefill_decode_interval=3, timing_model=FIXED_10_1)),
        # (a chunk larger than max_prefill_tokens is never admitted -> invariant error; so
        #  chunked_prefill_size <= max_prefill_tokens here)
        T("sglang_max_prefill_512", mix, "max_prefill_tokens 512 + chunked_prefill_size 512, bs 16",
          extra_engine_args=sg(block_size=16, sglang={"max_prefill_tokens": 512, "chunked_prefill_size": 512})),
        T("sglang_max_prefill_2000", tiny, "max_prefill_tokens 2000 + chunked_prefill_size 1024, bs 64",
          extra_engine_args=sg(block_size=64, sglang={"max_prefill_tokens": 2000, "chunked_prefill_size": 1024})),
        T("sglang_max_prefill_300_short", sg_pool_trace(), "max_prefill_tokens 400, chunk 400, bs 4, fixed",
          extra_engine_args=sg(block_size=4, timing_model=FIXED_10_1,
                               sglang={"max_prefill_tokens": 400, "chunked_prefill_size": 400})),
        T("sglang_chunk_256_bs16", mix, "chunked_prefill_size 256, bs 16",
          extra_engine_args=sg(block_size=16, sglang={"chunked_prefill_size": 256})),
        T("sglang_chunk_1000_bs1_r5", r5(), "chunked_prefill_size 1000, bs 1, 20000-token prompt",
          extra_engine_args=sg(num_gpu_blocks=32768, sglang={"chunked_prefill_size": 1000})),
        T("sglang_chunk_512_bs64_tiny", tiny, "chunked_prefill_size 512, bs 64",
          extra_engine_args=sg(block_size=64, sglang={"chunked_prefill_size": 512})),
        T("sglang_clip_32_pressure", sg_pool_trace(), "clip_max_new_tokens 32, bs 4, 300 pages",
          extra_engine_args=sg(block_size=4, num_gpu_blocks=300, sglang={"clip_max_new_tokens": 32})),
        T("sglang_conserv_0_3", sg_retract_trace(8, gap=7), "schedule_conservativeness 0.3 under pressure",
          extra_engine_args=sg(block_size=1, num_gpu_blocks=2500, sglang={"schedule_conservativeness": 0.3})),
        T("sglang_conserv_2_0", sg_retract_trace(8, gap=7), "schedule_conservativeness 2.0 under pressure",
          extra_engine_args=sg(block_size=1, num_gpu_blocks=2500, sglang={"schedule_conservativeness": 2.0})),
        T("sglang_max_num_seqs_3", mix, "max_num_seqs 3, bs 16", extra_engine_args=sg(block_size=16, max_num_seqs=3)),
        T("sglang_prefix_off", r3() + mix[:8], "prefix caching off",
          extra_engine_args=sg(enable_prefix_caching=False)),
        T("sglang_prefix_off_lpm", sg_lpm_trace(), "prefix caching off + lpm (lpm inactive)",
          trace_block_size=16, extra_engine_args=sg(block_size=16, max_num_seqs=3, enable_prefix_caching=False,
                                                    sglang=lpm)),
        T("sglang_max_model_len", r11(), "max_model_len 2048 (rejection, capping, zero output)",
          extra_engine_args=sg(max_model_len=2048)),
        T("sglang_max_model_len_pressure", pressure_trace(10, isl=900, osl=500), "max_model_len 1100 + small pool",
          extra_engine_args=sg(max_model_len=1100, num_gpu_blocks=80, block_size=32)),
        T("sglang_output_0_and_1", [line(0, 100, 0, [1]), line(0, 100, 1, [2]), line(3, 100, 2, [3]),
                                    line(3, 900, 0, [1, 2]), line(50, 2000, 1, [1, 2, 3, 4])],
          "zero and one output tokens", extra_engine_args=sg()),
        # ---- timing
        T("sglang_fixed_timing_mix", mix, "fixed timing 10/1, bs 16",
          extra_engine_args=sg(block_size=16, timing_model=FIXED_10_1)),
        T("sglang_fixed_pressure", pressure_trace(), "fixed timing, 120 pages of 32",
          extra_engine_args=sg(num_gpu_blocks=120, block_size=32,
                               timing_model={"type": "fixed", "prefill_ms": 7.5, "decode_ms": 1.25})),
        T("sglang_speedup_2_5", mix, "speedup_ratio 2.5", extra_engine_args=sg(block_size=16, speedup_ratio=2.5)),
        T("sglang_decode_speedup_1_7", mix, "decode_speedup_ratio 1.7",
          extra_engine_args=sg(decode_speedup_ratio=1.7)),
        T("sglang_arrival_speedup_2", tiny, "arrival_speedup_ratio 2, bs 64", arrival_speedup_ratio=2.0,
          extra_engine_args=sg(block_size=64)),
        # ---- sessions / concurrency / workers / run control
        T("sglang_sessions_mooncake", session_trace("delay"), "sessions, mooncake", extra_engine_args=sg()),
        T("sglang_sessions_delta_bs16", session_trace("delay_ms"), "sessions, mooncake-delta, bs 16",
          trace_format="mooncake-delta", extra_engine_args=sg(block_size=16)),
        T("sglang_concurrency3_mix", mix, "replay_concurrency 3", replay_concurrency=3, extra_engine_args=sg()),
        T("sglang_rr2_tiny", tiny, "2 workers round robin, bs 64", num_workers=2,
          extra_engine_args=sg(block_size=64)),
        T("sglang_rr3_pressure", sg_retract_trace(9, gap=3), "3 workers, small pools",
          num_workers=3, extra_engine_args=sg(block_size=4, num_gpu_blocks=400)),
        T("sglang_max_sim_time", tiny, "max_sim_time_ms 4000, bs 64", max_sim_time_ms=4000.0,
          extra_engine_args=sg(block_size=64)),
        T("sglang_sla_tiny", tiny, "SLA ttft<=1000 itl<=12, bs 64", sla_ttft_ms=1000.0, sla_itl_ms=12.0,
          extra_engine_args=sg(block_size=64)),
        T("sglang_sla_e2e_mix", mix, "SLA e2e<=800", sla_e2e_ms=800.0, extra_engine_args=sg()),
        # ---- synthetic
        S("sglang_synth_rate", (1000, 100, 200), "synthetic rate 20", request_rate=20.0, extra_engine_args=sg()),
        S("sglang_synth_conc", (1000, 100, 200), "synthetic concurrency 16", replay_concurrency=16,
          extra_engine_args=sg()),
        S("sglang_synth_prefix_groups", (2048, 64, 120), "rate 10, prefix 0.75, 4 groups, bs 16",
          request_rate=10.0, shared_prefix_ratio=0.75, num_prefix_groups=4, extra_engine_args=sg(block_size=16)),
        S("sglang_synth_turns3", (800, 30, 12), "3 turns, inter-turn delay 40",
          request_rate=15.0, turns_per_session=3, inter_turn_delay_ms=40.0, extra_engine_args=sg()),
        S("sglang_synth_pressure", (1000, 300, 30), "burst into a small pool",
          arrival_interval_ms=0.0, extra_engine_args=sg(block_size=8, num_gpu_blocks=600)),
        # ---- max_model_len rejection time (idle interval rounds, chunk passes, closed loop)
        T("sglang_mml_interval_idle", sg_mml_idle_trace(), "max_model_len 200, prefill_decode_interval 5: "
          "rejections in idle interval rounds", trace_block_size=16,
          extra_engine_args=sg(block_size=16, num_gpu_blocks=1000, max_model_len=200, prefill_decode_interval=5,
                               timing_model=FIXED_10_1)),
        T("sglang_mml_interval_ratio", sg_mml_ratio_trace(), "idle interval rounds reset the admission ratio; "
          "max_model_len 1500", trace_block_size=16,
          extra_engine_args=sg(block_size=16, num_gpu_blocks=100, max_model_len=1500, prefill_decode_interval=5,
                               timing_model=FIXED_10_1)),
        T("sglang_mml_chunk_interval", sg_mml_chunk_trace(), "chunks of 128, prefill_decode_interval 2, "
          "max_model_len 600", trace_block_size=16,
          extra_engine_args=sg(block_size=16, num_gpu_blocks=400, max_model_len=600, prefill_decode_interval=2,
                               timing_model=FIXED_10_1,
                               sglang={"chunked_prefill_size": 128, "max_prefill_tokens": 128})),
        T("sglang_mml_sessions_closed_loop", sg_mml_session_trace(), "sessions + replay_concurrency 2, "
          "max_model_len 300, prefill_decode_interval 3, polynomial timing", trace_block_size=16,
          replay_concurrency=2,
          extra_engine_args=sg(block_size=16, num_gpu_blocks=300, max_model_len=300, prefill_decode_interval=3)),
        # ---- prefill_decode_interval: a prefill batch that computes prompt tokens but takes no time
        # (fuzz 922049/78): P (30 tokens, chunk 2) fills the cache; at 150 F (P's prompt again, zero
        # output), S (1 token, 3 outputs) and T's first chunk (1 of 2 tokens) form one batch of mean
        # prompt 32 // 3 = 10 and mean prefix 30 // 3 = 10: no time, but S's prompt token was computed,
        # so the next pass (150-151) is S's decode round and T's last chunk waits until 151-161
        T("sglang_zero_time_prefill_pdi1", SG_ZERO_TIME_PREFILL, "interval 1, chunk 2, fixed 10/1: a zero-time "
          "prefill batch that computed tokens is a prefill round", trace_block_size=1,
          extra_engine_args=sg(block_size=1, num_gpu_blocks=10000, prefill_decode_interval=1,
                               timing_model=FIXED_10_1, sglang={"chunked_prefill_size": 2, "max_prefill_tokens": 1024})),
        # ---- stamps of a split radix edge (fuzz case 1301/146)
        T("sglang_split_edge_match_probe_a", sg_split_edge_trace(0, "A"), "zero-output toucher matches "
          "inside an edge: the matched prefix is not refreshed (probe A reuses 36)", trace_block_size=16,
          extra_engine_args=sg(block_size=1, num_gpu_blocks=500, timing_model=FIXED_10_1)),
        T("sglang_split_edge_match_probe_b", sg_split_edge_trace(0, "B"), "as above, probe B reuses 159",
          trace_block_size=16, extra_engine_args=sg(block_size=1, num_gpu_blocks=500, timing_model=FIXED_10_1)),
        T("sglang_split_edge_insert_probe_a", sg_split_edge_trace(1, "A"), "one-output toucher inserts one "
          "page inside an edge: that page keeps the edge's old stamp (probe A reuses 79)", trace_block_size=16,
          extra_engine_args=sg(block_size=1, num_gpu_blocks=500, timing_model=FIXED_10_1)),
        T("sglang_split_edge_insert_probe_b", sg_split_edge_trace(1, "B"), "as above, probe B reuses 119",
          trace_block_size=16, extra_engine_args=sg(block_size=1, num_gpu_blocks=500, timing_model=FIXED_10_1)),
        # ---- prompts larger than the pool
        T("sglang_prompt_over_pool_mml", [line(0, 300, 20, [1]), line(0, 2000, 10, [2, 3, 4, 5]),
                                          line(5, 200, 20, [6])],
          "prompt > pool but max_model_len rejects it first", extra_engine_args=sg(block_size=16, num_gpu_blocks=100,
                                                                                   max_model_len=1500)),
    ]


# --------------------------------------------------------------------------------------------
# running the reference
# --------------------------------------------------------------------------------------------
def _ref():
    from dynamo import _core  # noqa: WPS433
    return _core


def write_trace(lines, directory):
    fd, path = tempfile.mkstemp(suffix=".jsonl", dir=directory)
    with os.fdopen(fd, "w") as fh:
        for ln in lines:
            fh.write(ln + "\n")
    return path


def run_reference(sc, tmpdir):
    core = _ref()
    kwargs = dict(sc["kwargs"])
    if "router_config" in kwargs:
        kwargs["router_config"] = core.KvRouterConfig.from_json(kwargs["router_config"])
    ties = kwargs.get("router_mode") == "kv_router"
    if sc["kind"] == "trace":
        path = write_trace(sc["trace_lines"], tmpdir)
        try:
            res = core.run_mocker_trace_replay([path], capture_per_request=True, **kwargs)
        finally:
            os.unlink(path)
    else:
        res = core.run_mocker_synthetic_trace_replay(*sc["args"], capture_per_request=True, **kwargs)
    summary = dict(res.summary)
    recs = []
    for r in res.per_request:
        r = {k: v for k, v in r.items() if k not in NONDETERMINISTIC_RECORD_KEYS}
        if ties:
            r = {k: v for k, v in r.items() if k not in TIE_LABEL_KEYS}
        recs.append(r)
    recs.sort(key=canonical_key)
    return summary, recs


# Fields compared per request by tests/test_parity.py (kept in compact goldens).
COMPARED_RECORD_FIELDS = (
    "arrival_time_ms", "first_admit_ms", "terminal_time_ms", "first_token_ms", "last_token_ms",
    "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length", "requested_output_length",
    "output_length", "reused_input_tokens", "decode_worker_idx", "prefill_worker_idx",
    "admission_count", "readmission_count", "terminal_status", "session_id", "turn_index",
)
COMPARED_ADMISSION_FIELDS = ("at_ms", "reused_input_tokens", "is_readmission")


def compact_record(r):
    out = {k: r.get(k) for k in COMPARED_RECORD_FIELDS}
    out["admission_history"] = [{k: a.get(k) for k in COMPARED_ADMISSION_FIELDS}
                                for a in r.get("admission_history") or []]
    return out


def _strip_wall(summary):
    return {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}


def _close(a, b, rel=1e-12):
    """Deep comparison; floats may differ by summation order (the reference aggregates
    means over a hash map whose iteration order changes from run to run)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return a == b or abs(a - b) <= rel * max(abs(a), abs(b))
    return a == b


def make_golden(sc, tmpdir):
    s1, p1 = run_reference(sc, tmpdir)
    ties = sc["kwargs"].get("router_mode") == "kv_router"
    runs = [s1]
    deterministic = True
    for _ in range(STAT_RUNS - 1 if ties else 1):
        s2, p2 = run_reference(sc, tmpdir)
        runs.append(s2)
        if not _close(_strip_wall(s1), _strip_wall(s2)) or not _close(p1, p2, 0.0 if not ties else 1e-12):
            deterministic = False
    if not deterministic and not ties:
        raise RuntimeError(f"scenario {sc['name']} is not deterministic in the reference")
    out = {"name": sc["name"], "kind": sc["kind"], "description": sc.get("description", "")}
    if ties:
        out["worker_labels"] = "ties"     # worker indices are not compared
    if not deterministic:
        # tie-breaks change the outcome: keep the distribution of the key metrics over the runs
        out["statistical"] = {k: [r[k] for r in runs] for k in STAT_KEYS}
    if sc["kind"] == "trace":
        out["trace_lines"] = sc["trace_lines"]
    else:
        out["args"] = sc["args"]
        out["input_tokens"], out["output_tokens"], out["request_count"] = sc["args"]
    out["kwargs"] = sc["kwargs"]
    out["summary"] = s1 if deterministic else None
    per_req = p1 if sc.get("_keep_per_request", True) and deterministic else None
    if per_req is not None and len(json.dumps(per_req, separators=(",", ":"))) > MAX_PER_REQUEST_BYTES:
        # shrink: keep only the fields the parity test compares
        per_req = [compact_record(r) for r in per_req]
        out["per_request_compact"] = True
        if len(json.dumps(per_req, separators=(",", ":"))) > MAX_PER_REQUEST_BYTES:
            per_req = None
    out["per_request"] = per_req
    return out


# --------------------------------------------------------------------------------------------
# config normalisation + error strings
# --------------------------------------------------------------------------------------------
NORMALIZE_INPUTS = {
    "empty": {},
    "engine_block_size_64": {"engine": {"block_size": 64}},
    "flat_block_size_64": {"block_size": 64},
    "sglang_defaults": {"engine": {"backend": "sglang"}},
    "trtllm_defaults": {"engine": {"backend": "trtllm"}},
    "trtllm_bs16": {"engine": {"backend": "trtllm", "block_size": 16}},
    "fixed_timing": {"engine": {"timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 1}}},
    "top_level": {"engine": {"num_gpu_blocks": 100, "preemption_mode": "fifo"}, "dp_size": 1,
                  "tensor_parallel_size": 4},
    "sglang_nested": {"engine": {"backend": "sglang", "sglang": {"schedule_policy": "lpm"}}},
    "json_string_input": '{"engine": {"max_model_len": 4096}}',
    "nulls": {"engine": {"max_num_seqs": None, "max_num_batched_tokens": None}},
}


def make_normalize():
    core = _ref()
    out = {}
    for name, inp in NORMALIZE_INPUTS.items():
        try:
            out[name] = {"input": inp, "output": core._normalize_mocker_config(inp)}
        except BaseException as e:  # noqa: BLE001
            out[name] = {"input": inp, "error_type": type(e).__name__, "message": str(e)}
    return out


GOOD = line(0, 100, 5, [1])


def error_cases():
    """(case name, kind, payload). Trace payloads: {"trace_lines", "kwargs"}; engine configs
    are passed as JSON strings in kwargs.extra_engine_args."""
    t = lambda lines, **kw: {"kind": "trace", "trace_lines": lines, "kwargs": kw}  # noqa: E731
    s = lambda args, **kw: {"kind": "synthetic", "args": list(args), "kwargs": kw}  # noqa: E731
    return {
        "unknown_engine_field": t([GOOD], extra_engine_args=eng(foo=1)),
        "unknown_top_level_field": t([GOOD], extra_engine_args=json.dumps({"engine": {}, "bar": 2})),
        "flat_form_rejected": t([GOOD], extra_engine_args=json.dumps({"block_size": 64})),
        "block_size_0": t([GOOD], extra_engine_args=eng(block_size=0)),
        "num_gpu_blocks_0": t([GOOD], extra_engine_args=eng(num_gpu_blocks=0)),
        # vLLM/TRT-LLM blocks of one token are refused when the engine config is read (after the
        # num_gpu_blocks check, before the others), in either disaggregated pool too
        "block_size_1": t([GOOD], extra_engine_args=eng(block_size=1)),
        "block_size_1_trtllm": t([GOOD], extra_engine_args=eng(backend="trtllm", block_size=1)),
        "block_size_1_num_gpu_blocks_0": t([GOOD], extra_engine_args=eng(block_size=1, num_gpu_blocks=0)),
        "block_size_1_max_num_seqs_0": t([GOOD], extra_engine_args=eng(block_size=1, max_num_seqs=0)),
        "block_size_1_prefill_engine": t([GOOD], **pd_args(prefill={"block_size": 1}, decode={"block_size": 64})),
        "block_size_1_decode_engine": t([GOOD], **pd_args(prefill={"block_size": 64}, decode={"block_size": 1})),
        "block_size_1_synthetic_no_arrival": s((100, 5, 3), extra_engine_args=eng(block_size=1)),
        "max_num_seqs_0": t([GOOD], extra_engine_args=eng(max_num_seqs=0)),
        "max_num_batched_tokens_0": t([GOOD], extra_engine_args=eng(max_num_batched_tokens=0)),
        "prefill_schedule_interval_0": t([GOOD], extra_engine_args=eng(prefill_schedule_interval=0)),
        "speedup_ratio_neg": t([GOOD], extra_engine_args=eng(speedup_ratio=-1)),
        "decode_speedup_ratio_neg": t([GOOD], extra_engine_args=eng(decode_speedup_ratio=-1)),
        "bad_preemption_mode": t([GOOD], extra_engine_args=eng(preemption_mode="random")),
        "bad_backend": t([GOOD], extra_engine_args=eng(backend="foo")),
        "bad_kv_transfer_timing_mode": t([GOOD], extra_engine_args=eng(kv_transfer_timing_mode="x")),
        "prefill_decode_interval_vllm": t([GOOD], extra_engine_args=eng(prefill_decode_interval=2)),
        "prefill_decode_interval_trtllm": t([GOOD], extra_engine_args=eng(backend="trtllm",
                                                                            prefill_decode_interval=1)),
        "fixed_timing_missing_prefill_ms": t([GOOD], extra_engine_args=eng(timing_model={"type": "fixed"})),
        # the KV transfer settings (any worker type) and the fixed timing values are range-checked
        # last among the engine fields, in this order, before the top-level fields
        "kv_transfer_bytes_per_token_0": t([GOOD], extra_engine_args=eng(kv_transfer_bytes_per_token=0)),
        "kv_transfer_bandwidth_neg": t([GOOD], extra_engine_args=eng(kv_transfer_bandwidth=-1.0)),
        "kv_transfer_both_bad": t([GOOD], extra_engine_args=eng(kv_transfer_bandwidth=-1.0,
                                                                kv_transfer_bytes_per_token=0)),
        "kv_transfer_bandwidth_neg_max_num_seqs_0": t([GOOD], extra_engine_args=eng(kv_transfer_bandwidth=-1.0,
                                                                                    max_num_seqs=0)),
        "kv_transfer_bandwidth_neg_decode_engine": t([GOOD], **pd_args(decode={"kv_transfer_bandwidth": -1.0})),
        "fixed_timing_prefill_neg": t([GOOD], extra_engine_args=eng(timing_model={"type": "fixed", "prefill_ms": -1.0,
                                                                                  "decode_ms": 1.0})),
        "fixed_timing_decode_neg": t([GOOD], extra_engine_args=eng(timing_model={"type": "fixed", "prefill_ms": 1.0,
                                                                                 "decode_ms": -1.0})),
        "fixed_timing_neg_speedup_neg": t([GOOD], extra_engine_args=eng(
            speedup_ratio=-1.0, timing_model={"type": "fixed", "prefill_ms": -1.0, "decode_ms": 1.0})),
        "fixed_timing_neg_kv_transfer_bandwidth_neg": t([GOOD], extra_engine_args=eng(
            kv_transfer_bandwidth=-1.0, timing_model={"type": "fixed", "prefill_ms": -1.0, "decode_ms": 1.0})),
        "fixed_timing_neg_block_size_1": t([GOOD], extra_engine_args=eng(
            block_size=1, timing_model={"type": "fixed", "prefill_ms": -1.0, "decode_ms": 1.0})),
        "fixed_timing_neg_dp_size_0": t([GOOD], extra_engine_args=eng_top(
            {"timing_model": {"type": "fixed", "prefill_ms": -1.0, "decode_ms": 1.0}}, dp_size=0)),
        "engine_args_bad_json": t([GOOD], extra_engine_args="{bad json"),
        "engine_args_wrong_type": t([GOOD], extra_engine_args=eng(block_size="x")),
        "input_length_over_capacity": t([GOOD, line(1, 1000, 5, [1])]),
        "input_length_over_capacity_tbs": t([GOOD, line(1, 300, 5, [1, 2])], trace_block_size=128),
        "malformed_json_line": t([GOOD, GOOD[:-1]]),
        "missing_output_length": t([GOOD, json.dumps({"timestamp": 1, "input_length": 100, "hash_ids": [1]})]),
        "missing_hash_ids": t([GOOD, json.dumps({"timestamp": 1, "input_length": 100, "output_length": 5})]),
        "missing_timestamp": t([json.dumps({"input_length": 100, "output_length": 5, "hash_ids": [1]})]),
        "zero_input_length": t([line(0, 0, 5, [])]),
        "numeric_session_id": t([json.dumps({"timestamp": 0, "session_id": 5, "input_length": 100,
                                             "output_length": 5, "hash_ids": [1]})]),
        "delay_on_first_turn": t([json.dumps({"timestamp": 0, "session_id": "s", "input_length": 100,
                                              "output_length": 5, "hash_ids": [1], "delay": 5})]),
        "empty_trace": t([""]),
        "bad_trace_format": t([GOOD], trace_format="MooncakeDelta"),
        "trace_block_size_0": t([GOOD], trace_block_size=0),
        "bad_router_mode": t([GOOD], router_mode="foo"),
        "num_workers_0": t([GOOD], num_workers=0),
        "replay_concurrency_0": t([GOOD], replay_concurrency=0),
        "arrival_speedup_ratio_0": t([GOOD], arrival_speedup_ratio=0.0),
        "max_sim_time_neg": t([GOOD], max_sim_time_ms=-5.0),
        "sla_e2e_with_ttft": t([GOOD], sla_e2e_ms=100.0, sla_ttft_ms=10.0),
        "sla_e2e_neg": t([GOOD], sla_e2e_ms=-1.0),
        "sla_e2e_zero": t([GOOD], sla_e2e_ms=0.0),
        "sla_ttft_zero": t([GOOD], sla_ttft_ms=0.0),
        "never_progress": t([line(0, 100, 5000, [1])], extra_engine_args=eng(num_gpu_blocks=10)),
        "synthetic_no_arrival_option": s((100, 5, 3)),
        "synthetic_rate_and_interval": s((100, 5, 3), request_rate=1.0, arrival_interval_ms=1.0),
        "synthetic_rate_and_concurrency": s((100, 5, 3), request_rate=1.0, replay_concurrency=2),
        "synthetic_interval_and_concurrency": s((100, 5, 3), arrival_interval_ms=0.0, replay_concurrency=2),
        "synthetic_rate_0": s((100, 5, 3), request_rate=0.0),
        "synthetic_interval_neg": s((100, 5, 3), arrival_interval_ms=-1.0),
        "synthetic_prefix_ratio_over_1": s((100, 5, 3), arrival_interval_ms=0.0, shared_prefix_ratio=1.5,
                                           num_prefix_groups=2),
        "synthetic_input_0": s((0, 5, 3), arrival_interval_ms=0.0),
        "synthetic_output_0": s((100, 0, 3), arrival_interval_ms=0.0),
        "synthetic_count_0": s((100, 5, 0), arrival_interval_ms=0.0),
    }


def sglang_error_cases():
    """SGLang config errors and runs the reference aborts (same format as error_cases)."""
    t = lambda lines, **kw: {"kind": "trace", "trace_lines": lines, "kwargs": kw}  # noqa: E731
    s = lambda args, **kw: {"kind": "synthetic", "args": list(args), "kwargs": kw}  # noqa: E731
    return {
        "chunk_not_divisible": t([GOOD], extra_engine_args=sg(block_size=64, sglang={"chunked_prefill_size": 100})),
        "default_chunk_bs48": t([GOOD], extra_engine_args=sg(block_size=48)),
        "chunked_prefill_off": t([GOOD], extra_engine_args=sg(enable_chunked_prefill=False)),
        "schedule_policy_fcfs": t([GOOD], extra_engine_args=sg(sglang={"schedule_policy": "fcfs"})),
        "schedule_policy_unknown": t([GOOD], extra_engine_args=sg(sglang={"schedule_policy": "random"})),
        "schedule_policy_upper": t([GOOD], extra_engine_args=sg(sglang={"schedule_policy": "FIFO"})),
        "max_prefill_tokens_0": t([GOOD], extra_engine_args=sg(sglang={"max_prefill_tokens": 0})),
        "chunked_prefill_size_0": t([GOOD], extra_engine_args=sg(sglang={"chunked_prefill_size": 0})),
        "conservativeness_neg": t([GOOD], extra_engine_args=sg(sglang={"schedule_conservativeness": -1.0})),
        "prefill_decode_interval_neg": t([GOOD], extra_engine_args=sg(prefill_decode_interval=-1)),
        "sglang_unknown_field": t([GOOD], extra_engine_args=sg(sglang={"foo": 1})),
        "block_size_1_ok": t([GOOD], extra_engine_args=sg(block_size=1)),    # pages of one token
        # a chunk bigger than max_prefill_tokens can never be scheduled
        "max_prefill_below_prompt": t([line(0, 600, 5, [1, 2])], extra_engine_args=sg(sglang={"max_prefill_tokens": 512})),
        "max_prefill_below_prompt_mix": t(mixed_trace(11), extra_engine_args=sg(block_size=16,
                                                                               sglang={"max_prefill_tokens": 512})),
        # admission needs page_round(prompt) + min(output, clip) < pool tokens (strict)
        "prompt_over_pool": t([line(0, 2000, 10, [2, 3, 4, 5])], extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_over_pool_with_others": t([line(0, 300, 20, [1]), line(0, 2000, 10, [2, 3, 4, 5]),
                                           line(5, 200, 20, [6])],
                                          extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_equals_pool_output_0": t([line(0, 1600, 0, [2, 3, 4, 5])],
                                         extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_1584_output_16": t([line(0, 1584, 16, [2, 3, 4, 5])],
                                   extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_1570_output_29": t([line(0, 1570, 29, [2, 3, 4, 5])],
                                   extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_1584_output_15_ok": t([line(0, 1584, 15, [2, 3, 4, 5])],
                                      extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        "prompt_1584_output_16_clip4_ok": t([line(0, 1584, 16, [2, 3, 4, 5])],
                                            extra_engine_args=sg(block_size=16, num_gpu_blocks=100,
                                                                 sglang={"clip_max_new_tokens": 4})),
        "synthetic_prompt_over_pool": s((2000, 5, 3), arrival_interval_ms=0.0,
                                        extra_engine_args=sg(block_size=16, num_gpu_blocks=100)),
        # disaggregated: a decode worker left with a retracted request it cannot readmit (a
        # destination holds the room) reruns its empty pass while the admission ratio decays; 1024
        # such passes in a row abort (fuzz 2305/121).  Conservativeness 0.518 needs 1024, 0.519 1023
        "disagg_ratio_livelock": t([line(0, 1280, 150, range(100, 120)), line(5, 1088, 200, range(200, 217)),
                                    line(15, 1600, 0, range(300, 325))], **disagg_ratio_args(0.518)),
        "disagg_ratio_settles_ok": t([line(0, 1280, 150, range(100, 120)), line(5, 1088, 200, range(200, 217)),
                                      line(15, 1600, 0, range(300, 325))], **disagg_ratio_args(0.519)),
    }


def disagg_ratio_args(conservativeness):
    """1P1D SGLang, bs 64, fixed 10/1, decode pool of 40 pages (sglang_error_cases)."""
    eng = {"backend": "sglang", "block_size": 64, "timing_model": dict(FIXED_10_1),
           "sglang": {"schedule_conservativeness": conservativeness}}
    return {"router_mode": "round_robin", "trace_block_size": 64,
            "prefill_engine_args": json.dumps({"engine": {**eng, "worker_type": "prefill"}}),
            "decode_engine_args": json.dumps({"engine": {**eng, "worker_type": "decode", "num_gpu_blocks": 40}})}


def make_errors(tmpdir, cases=None):
    core = _ref()
    out = {}
    for name, case in (cases if cases is not None else error_cases()).items():
        path = None
        try:
            if case["kind"] == "trace":
                path = write_trace([ln for ln in case["trace_lines"]], tmpdir)
                core.run_mocker_trace_replay([path], **case["kwargs"])
            else:
                core.run_mocker_synthetic_trace_replay(*case["args"], **case["kwargs"])
            err_type, msg = None, None
        except BaseException as e:  # noqa: BLE001
            err_type, msg = type(e).__name__, str(e)
            if path is not None:
                msg = msg.replace(path, "{path}")
        finally:
            if path is not None:
                os.unlink(path)
        out[name] = {"input": case, "error_type": err_type, "message": msg}
    if cases is not None:
        return out
    # file-level error
    missing = os.path.join(tmpdir, "does_not_exist.jsonl")
    try:
        core.run_mocker_trace_replay([missing])
        out["missing_trace_file"] = {"input": {"kind": "trace", "trace_files": ["{path}"]},
                                     "error_type": None, "message": None}
    except BaseException as e:  # noqa: BLE001
        out["missing_trace_file"] = {"input": {"kind": "trace", "trace_files": ["{path}"]},
                                     "error_type": type(e).__name__, "message": str(e).replace(missing, "{path}")}
    try:
        core._normalize_mocker_config({"block_size": 64})
    except BaseException as e:  # noqa: BLE001
        out["normalize_flat_form"] = {"input": {"kind": "normalize", "config": {"block_size": 64}},
                                      "error_type": type(e).__name__, "message": str(e)}
    return out


def dump(obj, path):
    with open(path, "w") as fh:
        json.dump(obj, fh, separators=(",", ":"))
        fh.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="scenario names to (re)generate")
    ap.add_argument("--list", action="store_true", help="list scenario names and exit")
    ap.add_argument("--no-extras", action="store_true", help="skip config_normalize.json / errors.json")
    ap.add_argument("--out", default=str(GOLDEN_DIR))
    args = ap.parse_args(argv)
    scs = scenarios()
    names = [s["name"] for s in scs]
    assert len(set(names)) == len(names), "duplicate scenario names"
    if args.list:
        for s in scs:
            print(f"{s['name']:36s} {s['kind']:9s} {s.get('description', '')}")
        return 0
    if args.only:
        unknown = set(args.only) - set(names) - {"config_normalize", "errors", "errors_sglang"}
        if unknown:
            ap.error(f"unknown scenarios: {sorted(unknown)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        for sc in scs:
            if args.only and sc["name"] not in args.only:
                continue
            g = make_golden(sc, tmpdir)
            p = out_dir / f"{sc['name']}.json"
            dump(g, p)
            s = g["summary"] or {**{k: v[0] for k, v in g["statistical"].items()}, "num_requests": "?"}
            print(f"{sc['name']:36s} {'STAT ' if g.get('statistical') else ''}completed={s['completed_requests']}/{s['num_requests']} "
                  f"duration_ms={s['duration_ms']:.6f} per_request="
                  f"{'-' if g['per_request'] is None else len(g['per_request'])} size={p.stat().st_size}")
        if not args.no_extras and (not args.only or "config_normalize" in args.only):
            dump(make_normalize(), out_dir / "config_normalize.json")
            print("config_normalize.json written")
        if not args.no_extras and (not args.only or "errors" in args.only):
            dump(make_errors(tmpdir), out_dir / "errors.json")
            print("errors.json written")
        if not args.no_extras and (not args.only or "errors_sglang" in args.only):
            dump(make_errors(tmpdir, sglang_error_cases()), out_dir / "errors_sglang.json")
            print("errors_sglang.json written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
