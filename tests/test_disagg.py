"""Disaggregated prefill -> decode replay: the handoff's timestamps, routing, summary, errors.

Whole-run comparisons with the reference are in test_parity.py (pd_* goldens); these tests
pin the single rules on small fixed-timing cases whose numbers come from the reference
(ai-dynamo-runtime 1.6.1; tools/REFERENCE_NOTES.md, "Disaggregated").
"""
import json
import math

import pytest

from mocker.config import ConfigError
from mocker.replay import run_synthetic_trace_replay, run_trace_replay
from mocker.replay.run import ReplayError

FIXED = {"block_size": 64, "timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 1}}
XFER = {"kv_transfer_bytes_per_token": 1_000_000, "kv_transfer_bandwidth": 1.0}     # 1 ms per token
HANDOFF = ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
           "decode_admit_ms", "source_released_ms", "first_token_ms", "last_token_ms", "reused_input_tokens")


def req(t, n, o, base):
    return {"timestamp": t, "input_length": n, "output_length": o,
            "hash_ids": list(range(base, base + math.ceil(n / 64)))}


def run(tmp_path, rows, prefill=None, decode=None, **kw):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kw.setdefault("router_mode", "kv_router")
    return run_trace_replay(str(p), trace_block_size=64, capture_per_request=True,
                            prefill_engine_args={"engine": {**FIXED, "worker_type": "prefill", **(prefill or {})}},
                            decode_engine_args={"engine": {**FIXED, "worker_type": "decode", **(decode or {})}},
                            **kw)


def handoff(res):
    recs = sorted(res.per_request, key=lambda r: (r["arrival_time_ms"], r["input_length"]))
    return [tuple(r[k] for k in HANDOFF) for r in recs]


def test_one_request_with_transfer(tmp_path):
    res = run(tmp_path, [req(0, 1000, 3, 100)], prefill=XFER)
    assert handoff(res) == [(0, 10, 10, 1010, 1010, 1010, 1011, 1013, 0)]
    rec = res.per_request[0]
    assert rec["ttft_ms"] == 1011 and rec["output_length"] == 3          # the prefill token is hidden
    assert [(a["pool"], a["at_ms"], a["is_readmission"]) for a in rec["admission_history"]] == \
        [("prefill", 0.0, False), ("decode", 1010.0, False)]
    assert rec["readmission_count"] == 0 and rec["prefill_worker_idx"] == 0 and rec["decode_worker_idx"] == 0
    assert [h["pool"] for h in rec["routing_history"]] == ["prefill", "decode"]


def test_destination_missing_transfers_only_the_missing_blocks(tmp_path):
    res = run(tmp_path, [req(0, 1000, 3, 100), req(2000, 1000, 3, 100)],
              prefill={**XFER, "kv_transfer_timing_mode": "destination_missing"})
    # 16 blocks missing on an empty decode pool (1024 tokens); the repeat finds 15 resident
    assert handoff(res) == [(0, 10, 10, 1034, 1034, 1034, 1035, 1037, 0),
                            (2000, 2010, 2010, 2074, 2074, 2074, 2075, 2077, 960)]
    s = res.summary
    assert s["committed_prefill_tokens"] == 1040 and s["prefix_cache_reused_ratio"] == 0.48


def test_only_the_prefill_engines_transfer_settings_count(tmp_path):
    res = run(tmp_path, [req(0, 1000, 3, 100)], decode=XFER)
    assert handoff(res)[0][3] == 10


def test_reservations_wait_in_order_for_room(tmp_path):
    rows = [req(0, 1000, 30, 100), req(0, 1001, 10, 200), req(12, 300, 10, 400)]
    res = run(tmp_path, rows, decode={"num_gpu_blocks": 24})
    assert handoff(res) == [(0, 10, 10, 10, 10, 10, 11, 40, 0),
                            (0, 10, 40, 40, 40, 40, 41, 50, 0),
                            (12, 22, 40, 40, 40, 40, 41, 50, 0)]      # the short one does not overtake


def test_busy_decode_worker_acts_at_its_pass_end(tmp_path):
    rows = [req(0, 1000, 10, 100), req(12, 1000, 5, 200)]
    res = run(tmp_path, rows, prefill={"kv_transfer_bytes_per_token": 1_000_000, "kv_transfer_bandwidth": 1000.0},
              decode={"timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 3}})
    # B is held at 22 during the decode pass 20-23 (reserved 23); its 1 ms transfer ends at 24
    # during the pass 23-26 (activated 26)
    assert handoff(res) == [(0, 10, 10, 11, 11, 11, 14, 41, 0), (12, 22, 23, 26, 26, 26, 29, 41, 0)]


def test_held_source_blocks_delay_prefill_admissions(tmp_path):
    res = run(tmp_path, [req(0, 1000, 10, 100), req(0, 1001, 10, 200)], prefill={**XFER, "num_gpu_blocks": 20})
    assert handoff(res)[1] == (1010, 1020, 1020, 2021, 2021, 2021, 2022, 2031, 0)


def test_decode_seat_limit_delays_admission_not_activation(tmp_path):
    res = run(tmp_path, [req(0, 1000, 10, 100), req(0, 1001, 10, 200)], decode={"max_num_seqs": 1})
    assert handoff(res)[1] == (0, 10, 10, 10, 20, 10, 21, 30, 0)


def test_activated_requests_queue_behind_a_preempted_one(tmp_path):
    # decode pool of 40 blocks: the 642-token request is preempted at 202 (LIFO); the 900-token
    # destination is reserved when the first request completes (260) and activated at once, but
    # it waits behind the preempted request at the head of the queue (both enter at 310). The
    # recompute on the decode worker takes no prefill time.
    rows = [req(0, 640, 250, 100), req(0, 641, 300, 200), req(0, 642, 300, 300), req(100, 900, 10, 400)]
    res = run(tmp_path, rows, decode={"num_gpu_blocks": 40})
    assert handoff(res)[3] == (100, 110, 260, 260, 310, 260, 311, 320, 0)
    recs = sorted(res.per_request, key=lambda r: r["arrival_time_ms"] + r["input_length"] / 1e4)
    assert [a["at_ms"] for a in recs[2]["admission_history"]] == [0, 10, 310]
    assert recs[2]["last_token_ms"] == 418
    assert res.summary["committed_prefill_tokens"] == 3657


def test_waiting_destination_lets_only_transferred_requests_in(tmp_path):
    # while the 900-token destination waits for room (held 40, reserved 200), the preempted
    # 842-token request is not readmitted, but the 1600-token one activated at 180 is
    rows = [req(0, 840, 300, 100), req(0, 841, 300, 200), req(0, 842, 300, 300), req(5, 1600, 20, 400),
            req(30, 900, 10, 500)]
    res = run(tmp_path, rows, prefill={"kv_transfer_bytes_per_token": 100_000, "kv_transfer_bandwidth": 1.0},
              decode={"num_gpu_blocks": 68})
    h = handoff(res)
    assert h[3] == (10, 20, 20, 180, 180, 180, 181, 200, 0)
    assert h[4] == (30, 40, 200, 290, 290, 290, 291, 300, 0)
    recs = sorted(res.per_request, key=lambda r: r["arrival_time_ms"] + r["input_length"] / 1e4)
    assert [a["at_ms"] for a in recs[2]["admission_history"]] == [0, 95, 200]


def test_destination_waits_for_a_sequence_slot(tmp_path):
    rows = [req(0, 1000, 30, 100), req(15, 1001, 10, 200), req(16, 500, 10, 300)]
    res = run(tmp_path, rows, decode={"max_num_seqs": 1})
    assert handoff(res)[1:] == [(15, 25, 40, 40, 40, 40, 41, 50, 0), (25, 35, 40, 40, 50, 40, 51, 60, 0)]


def test_decode_worker_deadlock_aborts_like_the_reference(tmp_path):
    # the preempted head needs 14 blocks; the transferred 1700-token prompt behind it holds 27 of 40
    rows = [req(0, 640, 300, 100), req(0, 641, 300, 200), req(0, 642, 300, 300), req(100, 1700, 10, 400)]
    with pytest.raises(Exception, match="replay invariant violated: offline disagg replay encountered an "
                                        "effect-free zero-duration pass with 2 in-flight requests remaining"):
        run(tmp_path, rows, decode={"num_gpu_blocks": 40})


def test_trtllm_destination_gets_no_prefix_credit(tmp_path):
    # the repeat finds 15 resident blocks on the decode worker; TRT-LLM reserves all 16 afresh,
    # so destination_missing still moves 1024 tokens (vLLM: 64)
    res = run(tmp_path, [req(0, 1000, 3, 100), req(2000, 1000, 3, 100)],
              prefill={**XFER, "kv_transfer_timing_mode": "destination_missing", "backend": "trtllm"},
              decode={"backend": "trtllm"})
    assert handoff(res)[1] == (2000, 2010, 2010, 3034, 3034, 3034, 3035, 3037, 960)


def test_trtllm_destination_waits_for_its_to_completion_room(tmp_path):
    # 1300/100 needs 22 blocks to completion: 60 - 37 held prompt blocks leaves 23, but the tails
    # promised to the reserved destinations (4 + 2 + 2) leave 15, so it waits until 220
    rows = [req(0, 640, 200, 100), req(0, 641, 150, 200), req(5, 1000, 100, 300), req(6, 1300, 100, 400),
            req(7, 200, 20, 500)]
    res = run(tmp_path, rows, prefill={"kv_transfer_bytes_per_token": 100_000, "kv_transfer_bandwidth": 1.0,
                                       "backend": "trtllm"},
              decode={"num_gpu_blocks": 60, "max_num_seqs": 3, "backend": "trtllm"})
    assert [h[2] for h in handoff(res)] == [10, 10, 20, 220, 221]


def test_pools_in_the_summary(tmp_path):
    rows = [req(0, 1000, 5, 100), req(0, 1001, 5, 200), req(0, 1002, 5, 300), req(3, 1003, 5, 100),
            req(30, 1004, 5, 500)]
    res = run(tmp_path, rows, num_prefill_workers=2, num_decode_workers=2)
    s = res.summary
    assert s["duration_ms"] == 45.0 and s["committed_prefill_tokens"] == 5010
    assert s["prefill_worker_seconds"] == pytest.approx(0.09) and s["decode_worker_seconds"] == pytest.approx(0.09)
    assert s["prefill_gpus_per_worker"] == 1 and s["decode_gpus_per_worker"] == 1
    assert s["gpu_hours"] == pytest.approx(0.18 / 3600)


def test_aggregated_records_have_no_handoff(tmp_path):
    rec = run_synthetic_trace_replay(100, 2, 1, arrival_interval_ms=1.0, capture_per_request=True).per_request[0]
    assert all(rec[k] is None for k in HANDOFF[:6]) and rec["prefill_worker_idx"] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}}},
     "prefill_engine_args and decode_engine_args must be provided together"),
    ({"extra_engine_args": {}, "prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}},
     "extra_engine_args cannot be combined with prefill_engine_args/decode_engine_args"),
    ({"prefill_engine_args": {"engine": {}}, "decode_engine_args": {"engine": {"worker_type": "decode"}}},
     "offline disaggregated replay requires prefill_engine_args.worker_type=prefill, got Aggregated"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}}, "decode_engine_args": {"engine": {}}},
     "offline disaggregated replay requires decode_engine_args.worker_type=decode, got Aggregated"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}, "num_workers": 2},
     "num_workers is only used for aggregated replay; use num_prefill_workers and num_decode_workers"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}, "num_prefill_workers": 0},
     "invalid replay spec: prefill pool must start with at least one worker"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}, "num_decode_workers": 0},
     "invalid replay spec: decode pool must start with at least one worker"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode", "block_size": 32}}},
     "offline disaggregated replay requires matching prefill/decode block_size, got 64 and 32"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill"}},
      "decode_engine_args": {"engine": {"worker_type": "decode", "backend": "trtllm", "block_size": 64}}},
     "replay invariant violated: offline disaggregated replay requires matching backend engine types"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill", "kv_transfer_bandwidth": -1}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}},
     "kv_transfer_bandwidth must be finite and non-negative"),
    ({"prefill_engine_args": {"engine": {"worker_type": "prefill", "kv_transfer_bytes_per_token": 0}},
      "decode_engine_args": {"engine": {"worker_type": "decode"}}},
     "kv_transfer_bytes_per_token must be positive"),
])
def test_disagg_errors(kwargs, message):
    with pytest.raises((ReplayError, ConfigError)) as ei:
        run_synthetic_trace_replay(100, 2, 2, arrival_interval_ms=1.0, **kwargs)
    assert message in str(ei.value)


def test_aggregated_run_refuses_role_workers():
    with pytest.raises(ConfigError, match="offline replay only supports aggregated workers, got Prefill"):
        run_synthetic_trace_replay(100, 2, 2, arrival_interval_ms=1.0,
                                   extra_engine_args={"engine": {"worker_type": "prefill"}})


def test_cli_disaggregated_matches_the_golden(tmp_path):
    from pathlib import Path

    from mocker.cli import main
    golden = json.loads((Path(__file__).parent / "golden" / "pd_r8_tiny.json").read_text())
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("".join(line + "\n" for line in golden["trace_lines"]))
    out = tmp_path / "summary.json"
    rc = main(["replay", str(trace), "--quiet", "--router-mode", "kv_router",
               "--prefill-engine-args", golden["kwargs"]["prefill_engine_args"],
               "--decode-engine-args", golden["kwargs"]["decode_engine_args"], "--report-json", str(out)])
    assert rc == 0
    s = json.loads(out.read_text())
    for k in ("duration_ms", "mean_ttft_ms", "mean_itl_ms", "committed_prefill_tokens", "prefill_worker_seconds"):
        assert s[k] == pytest.approx(golden["summary"][k], rel=1e-9), k


def test_pools_stay_consistent_with_resident_prefixes(tmp_path):
    # repeats land on a decode worker that holds their prefix: hits must not be cached twice
    from mocker.config import normalize_config
    from mocker.replay.run import simulate
    from mocker.replay.traces import load_mooncake
    rows = [req(t, 1000 + (t % 3) * 64, 4, 100 + (t % 2) * 50) for t in range(0, 400, 20)]
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pcfg = normalize_config({"engine": {**FIXED, "worker_type": "prefill"}})
    dcfg = normalize_config({"engine": {**FIXED, "worker_type": "decode", "num_gpu_blocks": 120}})
    wl = load_mooncake([str(p)], 64, "mooncake", 1.0, timestamps_required=True)
    sim = simulate(wl, pcfg, num_workers=1, decode_config=dcfg, num_decode_workers=1)
    assert sim.core.terminal == len(rows)
    for rank in sim.ranks:
        rank.pool_view.check_invariants()
        assert rank.pool_view.num_active_blocks == 0


def test_prompt_larger_than_every_decode_pool_fails_at_the_handoff(tmp_path):
    # decode pool: 10 blocks of 64 tokens; a 1000-token prompt (16 blocks) can never move there
    res = run(tmp_path, [req(0, 1000, 5, 100), req(1, 300, 3, 300)], decode={"num_gpu_blocks": 10})
    recs = sorted(res.per_request, key=lambda r: r["arrival_time_ms"])
    big, small = recs
    assert big["terminal_status"] == "failed" and big["terminal_time_ms"] == big["source_held_ms"] == 10
    assert big["decode_worker_idx"] is None and big["destination_reserved_ms"] is None
    assert small["terminal_status"] == "completed"
    assert res.summary["completed_requests"] == 1 and res.summary["num_requests"] == 2


# -- SGLang: destination first (the decode rank reserves at arrival, then the prefill runs) --------
SG = {"backend": "sglang"}


def sg_pools(prefill=None, decode=None):
    return {"prefill": {**SG, **(prefill or {})}, "decode": {**SG, **(decode or {})}}


def test_sglang_reserves_the_destination_at_arrival(tmp_path):
    res = run(tmp_path, [req(0, 1000, 5, 100)], **sg_pools(prefill=XFER))
    assert handoff(res) == [(0, 10, 0, 1010, 1010, 1010, 1011, 1015, 0)]
    rec = res.per_request[0]
    assert [(a["pool"], a["at_ms"]) for a in rec["admission_history"]] == [("prefill", 0.0), ("decode", 1010.0)]
    assert res.summary["committed_prefill_tokens"] == 1000


def test_sglang_resident_prefix_counts_whole_prompt_pages(tmp_path):
    # destination_missing: an empty decode pool misses 16 pages; a 1024-token repeat finds all 16
    # resident (nothing to move), a 1100-token extension of a 1000-token prompt misses 3
    xm = {**XFER, "kv_transfer_timing_mode": "destination_missing"}
    res = run(tmp_path, [req(0, 1024, 3, 100), req(2000, 1024, 3, 100)], **sg_pools(prefill=xm))
    assert [h[3] for h in handoff(res)] == [1034, 2010]
    res = run(tmp_path, [req(0, 1000, 3, 100), req(2000, 1100, 3, 100)], **sg_pools(prefill=xm))
    assert [h[3] for h in handoff(res)] == [1034, 2202]
    assert res.summary["committed_prefill_tokens"] == 1140


def test_sglang_prefill_waits_for_the_destination(tmp_path):
    # decode pool of 24 pages: B (16 pages) is reserved only when A completes (40); then its
    # prefill runs. C, behind B, is tried at the next event on that rank (B's activation, 50)
    rows = [req(0, 1000, 30, 100), req(0, 1001, 10, 200), req(12, 300, 10, 400)]
    res = run(tmp_path, rows, **sg_pools(decode={"num_gpu_blocks": 24}))
    assert handoff(res) == [(0, 10, 0, 10, 10, 10, 11, 40, 0),
                            (40, 50, 40, 50, 50, 50, 51, 60, 0),
                            (50, 60, 50, 60, 60, 60, 61, 70, 0)]
    assert res.summary["committed_prefill_tokens"] == 2301


def test_sglang_busy_decode_rank_reserves_at_its_pass_end(tmp_path):
    rows = [req(0, 1000, 10, 100), req(12, 1000, 5, 200)]
    res = run(tmp_path, rows, **sg_pools(prefill={"kv_transfer_bytes_per_token": 1_000_000, "kv_transfer_bandwidth": 1000.0},
                                         decode={"timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 3}}))
    assert handoff(res)[1] == (14, 24, 14, 26, 26, 26, 29, 41, 0)


def test_sglang_seat_limit_does_not_block_the_reservation(tmp_path):
    res = run(tmp_path, [req(0, 1000, 10, 100), req(15, 1001, 10, 200)], **sg_pools(decode={"max_num_seqs": 1}))
    assert handoff(res)[1] == (16, 26, 16, 26, 26, 26, 27, 36, 0)


def test_sglang_decode_retraction_recomputes_without_prefill_time(tmp_path):
    # two 1024-token prompts fill a 33-page decode pool: one is retracted at every pass until the
    # other completes; each readmission reuses 15 pages and recomputes 64 tokens in no time
    res = run(tmp_path, [req(0, 1024, 3, 100), req(0, 1024, 3, 200)], **sg_pools(decode={"num_gpu_blocks": 33}))
    recs = sorted(res.per_request, key=lambda r: r["admission_count"])
    assert [a["at_ms"] for a in recs[1]["admission_history"]] == [0, 10, 11, 12, 13]
    assert recs[1]["decode_reused_input_tokens"] == 960
    assert (recs[1]["first_token_ms"], recs[1]["last_token_ms"]) == (13, 15)
    assert res.summary["committed_prefill_tokens"] == 2240


def test_sglang_prompt_larger_than_the_decode_pool_fails_at_arrival(tmp_path):
    res = run(tmp_path, [req(0, 1000, 3, 100), req(5, 300, 3, 200)], **sg_pools(decode={"num_gpu_blocks": 10}))
    big, small = sorted(res.per_request, key=lambda r: r["arrival_time_ms"])
    assert big["terminal_status"] == "failed" and big["terminal_time_ms"] == 0
    assert big["prefill_worker_idx"] is None and big["decode_worker_idx"] is None
    assert big["admission_history"] == [] and big["first_admit_ms"] is None
    assert handoff(res)[1] == (5, 15, 5, 15, 15, 15, 16, 18, 0)
    assert res.summary["committed_prefill_tokens"] == 300


def test_sglang_held_source_pages_delay_prefill_admissions(tmp_path):
    res = run(tmp_path, [req(0, 1000, 10, 100), req(0, 1001, 10, 200)],
              **sg_pools(prefill={**XFER, "num_gpu_blocks": 20}))
    assert handoff(res)[1] == (1010, 1020, 0, 2021, 2021, 2021, 2022, 2031, 0)


def test_sglang_zero_output_completes_with_the_decode_pass(tmp_path):
    # a transferred request that samples nothing joins the decode batch untimed: alone it
    # completes at its activation, beside a decoding request at that pass's end (fuzz seed 7)
    res = run(tmp_path, [req(0, 1000, 0, 100)], **sg_pools())
    assert res.per_request[0]["terminal_time_ms"] == 10 and res.per_request[0]["first_token_ms"] is None
    res = run(tmp_path, [req(0, 1000, 0, 100), req(0, 500, 3, 200)], **sg_pools())
    zero = next(r for r in res.per_request if r["requested_output_length"] == 0)
    assert zero["terminal_time_ms"] == 11 and zero["decode_admit_ms"] == 10


def test_sglang_prompt_at_max_model_len_fails_at_arrival_and_ends_its_session(tmp_path):
    # (fuzz seed 7): the reference fails the handoff at arrival and drops the session's later turns
    rows = [{**req(0, 100, 3, 100), "session_id": "s"}, {**req(1, 1000, 3, 200), "session_id": "s", "delay": 5},
            {**req(2, 100, 3, 300), "session_id": "s", "delay": 5}]
    for r in rows[1:]:
        del r["timestamp"]
    res = run(tmp_path, rows, **sg_pools(prefill={"max_model_len": 512}, decode={"max_model_len": 512}))
    recs = sorted(res.per_request, key=lambda r: r["arrival_time_ms"])
    assert [r["terminal_status"] for r in recs] == ["completed", "failed"]
    assert recs[1]["arrival_time_ms"] == recs[1]["terminal_time_ms"] == 18      # 13 + delay 5
    assert res.summary["num_requests"] == 2


def test_sglang_zero_output_prefill_may_take_the_whole_prompt_from_cache(tmp_path):
    # (fuzz seed 11): the prefill pool matches a no-output request's whole prompt although it
    # samples the hidden token; fully cached, it is held at once
    res = run(tmp_path, [req(0, 1024, 3, 100), req(100, 1024, 0, 100)], **sg_pools())
    zero = next(r for r in res.per_request if r["requested_output_length"] == 0)
    assert zero["reused_input_tokens"] == 1024
