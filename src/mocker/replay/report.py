"""Replay report: the reference's summary dict, the outcome counts and the text table."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from mocker._core.stats import summarize_exact
from mocker._core.table import STATUS_CODES

__all__ = ["build_summary", "build_outcome", "format_table", "ReplayResult"]

ST_COMPLETED = STATUS_CODES["completed"]
_PCTS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")


class ReplayResult:
    """What a replay returns.

    ``.summary``: the reference's summary dict; ``.per_request``: the per-request records
    (with ``capture_per_request=True``, else empty); ``.outcome``: how many requests ended how
    (``arrived``, ``completed``, ``rejected``, ``failed``, ``unfinished``, and why requests were
    rejected); ``.description``: one line naming what was simulated.
    """

    def __init__(self, summary: dict, per_request: list | None, outcome: dict | None = None,
                 description: str = ""):
        self.summary = summary
        self.per_request = per_request if per_request is not None else []
        self.outcome = outcome or {}
        self.description = description

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
    """Completed requests within every given SLA (zero-output ones only under an e2e-only SLA)."""
    arr = cols["arrival_time_ms"]
    n_out = cols["output_length"]
    e2e_sla, ttft_sla, itl_sla = sla.get("e2e_ms"), sla.get("ttft_ms"), sla.get("itl_ms")
    with np.errstate(invalid="ignore"):
        ttft = np.maximum(cols["first_token_ms"] - arr, 0.0)
        e2e = np.maximum(cols["last_token_ms"] - arr, 0.0)
        ok = np.ones(arr.shape[0], dtype=bool)
        if e2e_sla is not None:
            ok &= e2e <= e2e_sla
        if ttft_sla is not None:
            ok &= ttft <= ttft_sla
        if itl_sla is not None:
            many = n_out > 1
            itl = np.where(many, (e2e - ttft) / np.maximum(n_out - 1, 1), 0.0)
            ok &= ~many | (itl <= itl_sla)
        if e2e_sla is not None and ttft_sla is None and itl_sla is None:
            empty_ok = (cols["terminal_time_ms"] - arr) <= e2e_sla
        else:
            empty_ok = np.zeros(arr.shape[0], dtype=bool)
    return mask & np.where(n_out == 0, empty_ok, ok)


def build_outcome(cols: dict, max_sim_time_ms: float, arrived: int, completed: int,
                  max_model_len: int | None) -> dict:
    """How the requests that arrived ended (``completed``: the summary's count), and why the
    rejected ones were rejected."""
    status = cols["status"]
    term = cols["terminal_time_ms"]
    with np.errstate(invalid="ignore"):
        in_time = term <= max_sim_time_ms
    rejected = (status == STATUS_CODES["rejected"]) & in_time
    out: dict[str, Any] = {"arrived": int(arrived), "completed": completed, "rejected": int(rejected.sum()),
           "failed": int(((status == STATUS_CODES["failed"]) & in_time).sum())}
    out["unfinished"] = max(out["arrived"] - out["completed"] - out["rejected"] - out["failed"], 0)
    reasons: dict[str, int] = {}
    if out["rejected"]:
        too_long = np.zeros_like(rejected)
        if max_model_len:
            too_long = rejected & (cols["input_length"] >= max_model_len)
        if too_long.any():
            reasons["prompt at least max_model_len"] = int(too_long.sum())
        rest = int((rejected & ~too_long).sum())
        if rest:
            reasons["prompt larger than the KV pool"] = rest
    out["rejected_reasons"] = reasons
    return out


_TABLE_ROWS = (  # label, summary key suffix, sample-count key
    ("Time to First Token (ms)", "ttft_ms", "num_ttft_samples"),
    ("Time to Second Token (ms)", "ttst_ms", "num_tpot_samples"),
    ("Inter Token Latency (ms)", "itl_ms", "num_tpot_samples"),
    ("Time per Output Token (ms)", "tpot_ms", "num_tpot_samples"),
    ("Request Latency (ms)", "e2e_latency_ms", "num_e2e_latency_samples"),
    ("Output Token Throughput Per User (tokens/sec/user)", "output_token_throughput_per_user",
     "num_tpot_samples"),
)
_COLUMNS = ("mean", "min", "max", "p99", "p90", "median", "std")


def format_table(summary: dict, outcome: dict | None = None) -> str:
    """An AIPerf-style table of the headline metrics.

    Metrics without samples show ``n/a``.  ITL and per-user throughput percentiles come from a
    sketch (relative error below 1%, as the reference's): the table clamps them to the exact
    min and max; the summary dict keeps the sketch's values.
    """
    head = ("Metric", "avg", "min", "max", "p99", "p90", "p50", "std")
    w0 = max(len(r[0]) for r in _TABLE_ROWS)
    lines = [f"{head[0]:<{w0}} " + " ".join(f"{h:>12}" for h in head[1:])]
    lines.append("-" * len(lines[0]))
    for label, key, count in _TABLE_ROWS:
        if not summary.get(count):
            lines.append(f"{label:<{w0}} " + " ".join(f"{'n/a':>12}" for _ in _COLUMNS))
            continue
        vals = {p: float(summary.get(f"{p}_{key}", 0.0)) for p in _COLUMNS}
        lo, hi = vals["min"], vals["max"]
        for p in ("p99", "p90", "median"):
            vals[p] = min(max(vals[p], lo), hi)
        lines.append(f"{label:<{w0}} " + " ".join(f"{vals[p]:>12.2f}" for p in _COLUMNS))
    lines.append("-" * len(lines[0]))
    completed = summary["completed_requests"]

    def row(label: str, val: str) -> None:
        lines.append(f"{label:<{w0}} {val:>12}")

    row("Requests (completed / total)", f"{completed} / {summary['num_requests']}")
    for label, key, fmt in (("Request Throughput (requests/sec)", "request_throughput_rps", ".2f"),
                            ("Output Token Throughput (tokens/sec)", "output_throughput_tok_s", ".2f"),
                            ("Total Token Throughput (tokens/sec)", "total_throughput_tok_s", ".2f"),
                            ("Prefix Cache Reuse Ratio", "prefix_cache_reused_ratio", ".4f")):
        row(label, format(summary[key], fmt) if completed else "n/a")
    if "goodput_completed_requests" in summary:
        row("Goodput (requests within the SLAs)", str(summary["goodput_completed_requests"]))
        row("Goodput Throughput (requests/sec)",
            format(summary["goodput_request_throughput_rps"], ".3f") if completed else "n/a")
    row("Simulated Duration (ms)", format(summary["duration_ms"], ".3f") if completed else "n/a")
    row("Wall Time (ms)", format(summary["wall_time_ms"], ".1f"))
    if outcome:
        lines.extend(outcome_lines(outcome))
    return "\n".join(lines)


def outcome_lines(outcome: dict) -> list[str]:
    """Lines saying how requests that did not complete ended (none when all completed)."""
    out = []
    reasons = outcome.get("rejected_reasons") or {}
    if outcome.get("rejected"):
        if len(reasons) == 1:
            why = next(iter(reasons))
        else:
            why = ", ".join(f"{reason}: {n}" for reason, n in reasons.items())
        out.append(f"{outcome['rejected']} rejected" + (f" ({why})" if why else ""))
    if outcome.get("failed"):
        out.append(f"{outcome['failed']} failed (disaggregated handoff impossible: prompt larger than "
                   "a decode worker's KV pool)")
    if outcome.get("unfinished"):
        out.append(f"{outcome['unfinished']} unfinished when the simulation stopped (max_sim_time_ms)")
    return out
