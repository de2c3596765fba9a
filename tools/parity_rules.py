"""Comparison rules shared by the golden writer, the differential fuzzer and the parity tests.

Kept free of any dependency (stdlib only) so it runs in the reference's virtual environment
as well as in ours.
"""
from __future__ import annotations

import math

REL_TOL = 1e-9
ABS_TOL = 1e-9


def _f(x):
    return math.inf if x is None else float(x)


def _natural(s):
    out, num = [], ""
    for ch in s:
        if ch.isdigit():
            num += ch
        else:
            if num:
                out.append((1, int(num), ""))
                num = ""
            out.append((2, 0, ch))
    if num:
        out.append((1, int(num), ""))
    return tuple(out)


def canonical_key(rec):
    """Sort key for per-request records that does not depend on the order of ties
    (the reference orders records with equal arrival times differently run to run)."""
    sid = rec.get("session_id")
    ti = rec.get("turn_index")
    return (
        _f(rec.get("arrival_time_ms")),
        ("",) if sid is None else _natural(str(sid)),
        -1 if ti is None else ti,
        _f(rec.get("first_admit_ms")),
        _f(rec.get("first_token_ms")),
        _f(rec.get("terminal_time_ms")),
        rec.get("input_length") or 0,
        rec.get("output_length") or 0,
        -1 if rec.get("decode_worker_idx") is None else rec["decode_worker_idx"],
    )


def values_equal(ours, ref):
    """Numbers: relative or absolute error ≤ 1e-9; everything else (None, str, bool): exact."""
    if isinstance(ref, bool) or isinstance(ours, bool):
        return type(ours) is type(ref) and ours == ref
    if isinstance(ref, (int, float)) and isinstance(ours, (int, float)):
        if ref == ours:
            return True
        if math.isnan(ref) or math.isnan(ours):
            return math.isnan(ref) and math.isnan(ours)
        d = abs(ours - ref)
        return d <= ABS_TOL or d <= REL_TOL * max(abs(ours), abs(ref))
    return ours == ref
