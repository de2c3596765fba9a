"""The per-request records in Python: the oracle the compiled writer (mocker._core.records) is
held to, byte for byte (it was the package's own implementation before the writer)."""
from __future__ import annotations

import math

import numpy as np

from mocker._core.table import STATUS_NAMES

_STATUS = {code: name for code, name in STATUS_NAMES.items() if name in ("completed", "rejected", "failed")}


def admission_index(cols: dict):
    """(admission rows sorted by request, start offset of each request's rows)."""
    adm_rid = cols["adm_rid"]
    adm_order = np.argsort(adm_rid, kind="stable")
    starts = np.searchsorted(adm_rid[adm_order], np.arange(len(cols["arrival_time_ms"]) + 1))
    return adm_order, starts


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
    adm_order, starts = admission_index(cols)
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
