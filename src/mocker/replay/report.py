"""Replay report: the reference's summary dict and per-request records (spec core-sim §8)."""
from __future__ import annotations

import math

import numpy as np

from mocker._core.stats import summarize_exact

__all__ = ["build_summary", "build_records", "format_table", "ReplayResult"]

ST_COMPLETED = 3
ST_REJECTED = 4
_STATUS = {3: "completed", 4: "rejected", 6: "failed"}
_PCTS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")


class ReplayResult:
    """What a replay returns: ``.summary`` (dict) and ``.per_request`` (list of dicts)."""

    def __init__(self, summary: dict, per_request: list | None):
        self.summary = summary
        self.per_request = per_request if per_request is not None else []

    def __repr__(self) -> str:
        s = self.summary
        return (f"ReplayResult(completed={s.get('completed_requests')}, "
                f"duration_ms={s.get('duration_ms')}, mean_ttft_ms={s.get('mean_ttft_ms')})")


def _completed_mask(cols: dict, max_sim_time_ms: float) -> np.ndarray:
    term = cols["terminal_time_ms"]
    with np.errstate(invalid="ignore"):
        return (cols["status"] == ST_COMPLETED) & (cols["admissions"] > 0) & (term <= max_sim_time_ms)


def _latency_samples(cols: dict, mask: np.ndarray) -> dict:
    arr = cols["arrival_time_ms"][mask]
    n_out = cols["output_length"][mask]
    t1 = cols["first_token_ms"][mask]
    t2 = cols["second_token_ms"][mask]
    tm = cols["last_token_ms"][mask]
    has1 = n_out >= 1
    has2 = n_out >= 2
    ttft = np.maximum(t1[has1] - arr[has1], 0.0)
    e2e = np.maximum(tm[has1] - arr[has1], 0.0)
    ttst = np.maximum(t2[has2] - t1[has2], 0.0)
    tpot = np.maximum((tm[has2] - t1[has2]) / (n_out[has2] - 1), 0.0)
    return {"ttft": ttft, "ttst": ttst, "tpot": tpot, "e2e_latency": e2e}


def build_summary(cols: dict, *, num_requests: int, committed_prefill: int, sim_end_ms: float,
                  wall_time_ms: float,
                  itl: dict, tput: dict, num_workers: int, gpus_per_worker: int,
                  max_sim_time_ms: float = math.inf, sla: dict | None = None,
                  prefill_workers: int = 0, prefill_gpus_per_worker: int = 0) -> dict:
    mask = _completed_mask(cols, max_sim_time_ms)
    completed = int(mask.sum())
    in_tok = int(cols["input_length"][mask].sum())
    out_tok = int(cols["output_length"][mask].sum())
    duration_ms = float(cols["terminal_time_ms"][mask].max()) if completed else 0.0
    duration_s = max(duration_ms / 1000.0, 1e-9)
    wall_s = max(wall_time_ms / 1000.0, 1e-9)
    # workers are provisioned from t=0 until the simulation stops (its last event)
    decode_ws = num_workers * (sim_end_ms / 1000.0)
    prefill_ws = prefill_workers * (sim_end_ms / 1000.0)
    s: dict = {
        "kv_eviction_policy": "lru",
        "committed_prefill_tokens": int(committed_prefill),
        "num_requests": int(num_requests),
        "completed_requests": completed,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "duration_ms": duration_ms,
        "wall_time_ms": wall_time_ms,
        "request_throughput_rps": completed / duration_s,
        "input_throughput_tok_s": in_tok / duration_s,
        "output_throughput_tok_s": out_tok / duration_s,
        "total_throughput_tok_s": (in_tok + out_tok) / duration_s,
        "prefill_worker_seconds": prefill_ws,
        "decode_worker_seconds": decode_ws,
        "prefill_gpus_per_worker": prefill_gpus_per_worker,
        "decode_gpus_per_worker": gpus_per_worker,
        "gpu_hours": (prefill_ws * prefill_gpus_per_worker + decode_ws * gpus_per_worker) / 3600.0,
    }
    samples = _latency_samples(cols, mask)
    if sla:
        good = _goodput_mask(cols, mask, sla)
        n_good = int(good.sum())
        s["goodput_completed_requests"] = n_good
        s["goodput_request_throughput_rps"] = n_good / duration_s
        s["goodput_output_throughput_tok_s"] = int(cols["output_length"][good].sum()) / duration_s
    # (disaggregated: a request's largest reuse over both pools' admissions)
    reused = int(np.maximum(cols["reused_max"][mask], cols["reused_dec"][mask]).sum())
    reused_first = int(cols["reused_first"][mask].sum())
    s.update({
        "power_w": None,
        "power_coverage": None,
        "processed_tokens": in_tok + out_tok,
        "processed_tokens_per_s": (in_tok + out_tok) / wall_s,
        "processed_output_tokens_per_s": out_tok / wall_s,
        "prefix_cache_reused_ratio": reused / in_tok if in_tok else 0.0,
        "first_admission_prefix_cache_reused_ratio": reused_first / in_tok if in_tok else 0.0,
        "num_ttft_samples": int(samples["ttft"].size),
        "num_tpot_samples": int(samples["tpot"].size),
        "num_e2e_latency_samples": int(samples["e2e_latency"].size),
    })
    for name in ("ttft", "ttst", "tpot"):
        st = summarize_exact(samples[name])
        for p in _PCTS:
            s[f"{p}_{name}_ms"] = float(st[p])
    for p in _PCTS:
        s[f"{p}_itl_ms"] = float(itl[p])
    st = summarize_exact(samples["e2e_latency"])
    for p in _PCTS:
        s[f"{p}_e2e_latency_ms"] = float(st[p])
    for p in _PCTS:
        s[f"{p}_output_token_throughput_per_user"] = float(tput[p])
    return s


def _goodput_mask(cols: dict, mask: np.ndarray, sla: dict) -> np.ndarray:
    arr = cols["arrival_time_ms"]
    n_out = cols["output_length"]
    good = mask.copy()
    idx = np.nonzero(mask)[0]
    for i in idx:
        n = int(n_out[i])
        if n == 0:
            ok = sla.get("e2e_ms") is not None and sla.get("ttft_ms") is None and sla.get("itl_ms") is None
            if ok:
                e2e = cols["terminal_time_ms"][i] - arr[i]
                ok = e2e <= sla["e2e_ms"]
            good[i] = ok
            continue
        ttft = max(cols["first_token_ms"][i] - arr[i], 0.0)
        e2e = max(cols["last_token_ms"][i] - arr[i], 0.0)
        ok = True
        if sla.get("e2e_ms") is not None and not e2e <= sla["e2e_ms"]:
            ok = False
        if sla.get("ttft_ms") is not None and not ttft <= sla["ttft_ms"]:
            ok = False
        if sla.get("itl_ms") is not None and n > 1 and not (e2e - ttft) / (n - 1) <= sla["itl_ms"]:
            ok = False
        good[i] = ok
    return good


def _opt(x: float):
    return None if (x is None or (isinstance(x, float) and math.isnan(x))) else float(x)


def build_records(cols: dict, order: np.ndarray, session_id: list, turn_index: list,
                  max_sim_time_ms: float = math.inf, dp_size: int = 1,
                  route_overlap_tokens: np.ndarray | None = None,
                  prefill_dp_size: int | None = None) -> list[dict]:
    """Per-request records in arrival order (the reference's field names).

    Worker indices are scheduler ids (``worker * dp_size + dp_rank``), as in the reference.
    ``prefill_dp_size`` (disaggregated runs): the prefill pool's dp size; ``dp_size`` is then
    the decode pool's, and the route overlap is the prefill router's.
    """
    disagg = prefill_dp_size is not None
    pools = cols.get("adm_pool")
    adm_rid = cols["adm_rid"]
    adm_order = np.argsort(adm_rid, kind="stable")
    starts = np.searchsorted(adm_rid[adm_order], np.arange(len(cols["arrival_time_ms"]) + 1))
    mask = _completed_mask(cols, max_sim_time_ms)
    recs = []
    for r in order:
        r = int(r)
        status = int(cols["status"][r])
        term = cols["terminal_time_ms"][r]
        if status not in _STATUS or not term <= max_sim_time_ms:
            continue
        arr = float(cols["arrival_time_ms"][r])
        n_out = int(cols["output_length"][r])
        t1 = _opt(cols["first_token_ms"][r])
        t2 = _opt(cols["second_token_ms"][r])
        tm = _opt(cols["last_token_ms"][r])
        ttft = max(t1 - arr, 0.0) if t1 is not None else None
        e2e = max(tm - arr, 0.0) if tm is not None else None
        ttst = max(t2 - t1, 0.0) if t2 is not None else None
        tpot = max((tm - t1) / (n_out - 1), 0.0) if n_out >= 2 else None
        hist = []
        per_pool: dict = {}
        for j, a in enumerate(adm_order[starts[r]:starts[r + 1]]):
            pool = _POOLS[int(pools[a])] if pools is not None else "agg"
            k = per_pool.get(pool, 0)
            per_pool[pool] = k + 1
            hist.append({"admission_ordinal": j, "pool_admission_ordinal": k, "pool": pool,
                         "at_ms": float(cols["adm_at"][a]),
                         "reused_input_tokens": int(cols["adm_reused"][a]),
                         "is_readmission": k > 0})
        w = int(cols["worker"][r])
        overlap = 0 if route_overlap_tokens is None else int(route_overlap_tokens[r])
        pw = int(cols["prefill_worker"][r]) if disagg else -1
        if disagg:
            routes = []
            if pw >= 0:
                routes.append(_route("prefill", pw, prefill_dp_size, min(overlap, int(cols["input_length"][r]))))
            if w >= 0:
                routes.append(_route("decode", w, dp_size, 0))
            handoff = {k: _opt(cols[k][r]) for k in _HANDOFF_KEYS}
        else:
            routes = [_route("agg", w, dp_size, overlap)]
            handoff = dict.fromkeys(_HANDOFF_KEYS)
        recs.append({
            "session_id": session_id[r],
            "turn_index": turn_index[r],
            "arrival_time_ms": arr,
            "dispatched_at_ms": None,
            "first_admit_ms": _opt(cols["first_admit_ms"][r]),
            "terminal_time_ms": float(term),
            "first_token_ms": t1,
            "last_token_ms": tm,
            "ttft_ms": ttft,
            "ttst_ms": ttst,
            "e2e_latency_ms": e2e,
            "itl_ms": tpot,
            "input_length": int(cols["input_length"][r]),
            "requested_output_length": int(cols["requested_output_length"][r]),
            "output_length": n_out,
            "reused_input_tokens": int(cols["reused_max"][r]),
            "prefill_worker_idx": int(cols["prefill_worker"][r]) if disagg and cols["prefill_worker"][r] >= 0 else None,
            # (a vLLM/TRT-LLM handoff that fails was routed to a decode worker but never placed)
            "decode_worker_idx": w if w >= 0 and not (disagg and _STATUS[status] == "failed") else None,
            **handoff,
            "decode_reused_input_tokens": (int(cols["reused_dec"][r])
                                           if disagg and w >= 0 and _STATUS[status] != "failed" else None),
            "prefill_route_overlap_tokens": (routes[0]["reported_overlap_tokens"]
                                             if disagg and routes and routes[0]["pool"] == "prefill" else None),
            # (an SGLang request failing at arrival was routed to a decode worker only)
            "decode_route_overlap_tokens": 0 if disagg and (w >= 0 or pw < 0) else None,
            "routing_history": routes,
            "admission_history": hist,
            "admission_count": len(hist),
            "readmission_count": sum(max(k - 1, 0) for k in per_pool.values()),
            "pressure_record_ordinals": [],
            "terminal_status": _STATUS[status],
        })
    return recs


_POOLS = {0: "agg", 1: "prefill", 2: "decode"}
_HANDOFF_KEYS = ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
                 "decode_admit_ms", "source_released_ms")


def _route(pool: str, sid: int, dp: int, overlap_tokens: int) -> dict:
    return {"pool": pool, "outcome": "immediate", "queue_entered_at_ms": None, "released_at_ms": None,
            "queue_wait_ms": 0.0, "logical_worker_id": sid // dp, "scheduler_id": sid, "dp_rank": sid % dp,
            "reported_overlap_tokens": overlap_tokens, "selected_overlap_blocks": None,
            "best_available_overlap_blocks": None, "overlap_regret_blocks": None,
            "placement_replica_id": None}


def format_table(summary: dict) -> str:
    """An AIPerf-style table of the headline metrics."""
    rows = []
    for label, key in (("Time to First Token (ms)", "ttft_ms"),
                       ("Time to Second Token (ms)", "ttst_ms"),
                       ("Inter Token Latency (ms)", "itl_ms"),
                       ("Time per Output Token (ms)", "tpot_ms"),
                       ("Request Latency (ms)", "e2e_latency_ms")):
        rows.append((label,) + tuple(summary.get(f"{p}_{key}", 0.0)
                                     for p in ("mean", "min", "max", "p99", "p90", "median", "std")))
    rows.append(("Output Token Throughput Per User (tokens/sec/user)",) + tuple(
        summary.get(f"{p}_output_token_throughput_per_user", 0.0)
        for p in ("mean", "min", "max", "p99", "p90", "median", "std")))
    head = ("Metric", "avg", "min", "max", "p99", "p90", "p50", "std")
    w0 = max(len(r[0]) for r in rows + [head])
    lines = [f"{head[0]:<{w0}} " + " ".join(f"{h:>12}" for h in head[1:])]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r[0]:<{w0}} " + " ".join(f"{v:>12.2f}" for v in r[1:]))
    lines.append("-" * len(lines[0]))
    for label, key, fmt in (("Requests (completed / total)", None, None),
                            ("Request Throughput (requests/sec)", "request_throughput_rps", ".2f"),
                            ("Output Token Throughput (tokens/sec)", "output_throughput_tok_s", ".2f"),
                            ("Total Token Throughput (tokens/sec)", "total_throughput_tok_s", ".2f"),
                            ("Prefix Cache Reuse Ratio", "prefix_cache_reused_ratio", ".4f"),
                            ("Simulated Duration (ms)", "duration_ms", ".3f"),
                            ("Wall Time (ms)", "wall_time_ms", ".1f")):
        if key is None:
            val = f"{summary['completed_requests']} / {summary['num_requests']}"
        else:
            val = format(summary[key], fmt)
        lines.append(f"{label:<{w0}} {val:>12}")
    if "goodput_completed_requests" in summary:
        lines.append(f"{'Goodput (requests / req/s)':<{w0}} "
                     f"{summary['goodput_completed_requests']:>12} "
                     f"{summary['goodput_request_throughput_rps']:>12.3f}")
    return "\n".join(lines)
