"""Mooncake / mooncake-delta JSONL traces → workload columns (spec core-sim §7.1, §7.2, §6.2).

Every row becomes one request (``rid`` = row order across the files).  Rows sharing a
``session_id`` are consecutive turns of one session; rows without one are sessions of
their own.  Prompt content is described as runs of interned hash ids, each repeated
``trace_block_size`` times (the last one cut to ``input_length``).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TraceError", "Workload", "load_mooncake", "TRACE_FORMATS"]

TRACE_FORMATS = {"mooncake": "mooncake", "mooncake-delta": "mooncake-delta",
                 "mooncake_delta": "mooncake-delta"}
_UNSUPPORTED_FORMATS = ("agentic_mooncake", "agentic-mooncake", "weka", "applied_compute_agentic", "dynamo")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file and line."""


@dataclass
class Workload:
    """Columns handed to the compiled replay core (one entry per request unless noted)."""
    n: int
    input_length: np.ndarray           # int64; for delta traces: this row's delta length
    output_length: np.ndarray          # int64
    run_off: np.ndarray                # int64[n+1], CSR offsets into the run columns
    run_kind: np.ndarray               # int8 (0 = constant token, 1 = generated range)
    run_v: np.ndarray                  # uint64
    run_start: np.ndarray              # int64
    run_n: np.ndarray                  # int64
    next_turn: np.ndarray              # int32, rid of the session's next turn (-1 = last)
    delay_ms: np.ndarray               # float64, delay before this turn (turns > 0)
    session_heads: np.ndarray          # int32, first turns in file order
    head_arrival_ms: np.ndarray        # float64, arrival of each head (timestamp mode)
    session_id: list = field(default_factory=list)   # per request: str or None
    turn_index: list = field(default_factory=list)   # per request: int or None
    delta: bool = False

    def columns(self) -> dict:
        return {"run_off": self.run_off, "run_kind": self.run_kind, "run_v": self.run_v,
                "run_start": self.run_start, "run_n": self.run_n, "next_turn": self.next_turn,
                "delay_ms": self.delay_ms, "output_length": self.output_length,
                "session_heads": self.session_heads, "head_arrival_ms": self.head_arrival_ms}


def _int_field(row: dict, names: tuple[str, ...], where: str):
    for name in names:
        if name in row and row[name] is not None:
            v = row[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (
                    isinstance(v, float) and not v.is_integer()):
                raise TraceError(f"{where}: {name} must be a non-negative integer, got {v!r}")
            return int(v)
    return None


def _float_field(row: dict, names: tuple[str, ...], where: str):
    for name in names:
        if name in row and row[name] is not None:
            v = row[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise TraceError(f"{where}: {name} must be a finite number, got {v!r}")
            return float(v)
    return None


def load_mooncake(paths, trace_block_size: int = 512, trace_format: str = "mooncake",
                  arrival_speedup_ratio: float = 1.0, timestamps_required: bool = True,
                  name_sessions: bool = False) -> Workload:
    """Parse one or more mooncake JSONL files into a :class:`Workload`.

    Records carry session names when a session has several turns or ``name_sessions`` is set
    (closed-loop mode), as the reference does; rows without a session are ``request_<line>``.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    fmt = TRACE_FORMATS.get(trace_format)
    if fmt is None:
        if trace_format in _UNSUPPORTED_FORMATS:
            raise TraceError(f"trace_format {trace_format!r} is not supported by mocker yet")
        raise TraceError("trace_format must be 'mooncake', 'mooncake-delta', 'agentic_mooncake'/"
                         "'agentic-mooncake', 'weka', 'applied_compute_agentic', or 'dynamo', "
                         f"got {trace_format!r}")
    if isinstance(trace_block_size, bool) or not isinstance(trace_block_size, int) or trace_block_size <= 0:
        raise TraceError("trace_block_size must be greater than 0")
    tbs = trace_block_size
    delta = fmt == "mooncake-delta"

    in_len: list[int] = []
    out_len: list[int] = []
    sess_of: list = []            # session key per row
    ts_of: list = []              # timestamp per row (or None)
    delay_of: list = []           # explicit delay per row (or None)
    line_of: list = []            # (path, line number) per row
    intern: dict[int, int] = {}
    run_off = [0]
    run_v: list[int] = []
    run_n: list[int] = []
    row_no = 0
    for path in paths:
        path = os.fspath(path)
        try:
            fh = open(path, encoding="utf-8")
        except OSError:
            raise TraceError(f"failed to open trace file {path}") from None
        rows_in_file = 0
        with fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}: trace line {lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: {exc.msg}") from None
                if not isinstance(row, dict):
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: not an object")
                row_no += 1
                rows_in_file += 1
                out = _int_field(row, ("output_length", "output_tokens"), where)
                if out is None:
                    raise TraceError(f"{where} is missing output_length")
                hids = row.get("hash_ids")
                if hids is None:
                    raise TraceError(f"{where} is missing hash_ids")
                if not isinstance(hids, list) or any(
                        isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hids):
                    raise TraceError(f"{where}: hash_ids must be a list of non-negative integers")
                isl = _int_field(row, ("input_length", "input_tokens"), where)
                cap = len(hids) * tbs
                if isl is None:
                    isl = cap
                if isl > cap:
                    raise TraceError(f"{where} input_length {isl} exceeds hash_ids capacity {cap}")
                sid = row.get("session_id")
                if sid is not None and not isinstance(sid, str):
                    raise TraceError(f"{where}: session_id must be a string, got {sid!r}")
                ts = _float_field(row, ("timestamp", "created_time"), where)
                dl = _float_field(row, ("delay", "delay_ms"), where)
                otids = row.get("output_token_ids")
                if otids is not None and (not isinstance(otids, list) or len(otids) != out):
                    raise TraceError(f"{where}: output_token_ids must have output_length ({out}) entries")
                nb = -(-isl // tbs)
                left = isl
                for h in hids[:nb]:
                    run_v.append(intern.setdefault(h, len(intern)))
                    run_n.append(min(tbs, left))
                    left -= tbs
                run_off.append(len(run_v))
                in_len.append(isl)
                out_len.append(out)
                sess_of.append(sid if sid is not None else ("\0row", row_no))
                ts_of.append(ts)
                delay_of.append(dl)
                line_of.append((path, lineno))
        if rows_in_file == 0:
            raise TraceError(f"trace file {path} did not contain any requests")

    n = len(in_len)
    sessions: dict = {}
    for rid, key in enumerate(sess_of):
        sessions.setdefault(key, []).append(rid)
    next_turn = np.full(n, -1, dtype=np.int32)
    delay_ms = np.zeros(n, dtype=np.float64)
    session_id: list = [None] * n
    turn_index: list = [None] * n
    heads, head_ts = [], []
    # the reference names sessions in its records only when some session has several turns
    # (or in closed-loop mode); single-turn traces report null session ids
    named = name_sessions or any(len(rids) > 1 for rids in sessions.values())
    for key, rids in sessions.items():
        name = key if isinstance(key, str) else f"request_{key[1]}"
        for k, rid in enumerate(rids):
            if named:
                session_id[rid] = name
                turn_index[rid] = k
            path, lineno = line_of[rid]
            if k == 0:
                if delay_of[rid]:          # an explicit 0 is accepted, as by the reference
                    raise TraceError(f"{path}: trace line {lineno} sets delay on the first turn of session {name}")
                if in_len[rid] <= 0:
                    raise TraceError(f"{path}: session {name} turn 0 must have a positive input_length")
                if ts_of[rid] is None and timestamps_required:
                    raise TraceError(f"{path}: trace mode requires first_arrival_timestamp_ms for session {name}")
                heads.append(rid)
                head_ts.append(ts_of[rid] if ts_of[rid] is not None else 0.0)
            else:
                prev = rids[k - 1]
                next_turn[prev] = rid
                if delay_of[rid] is not None:
                    d = delay_of[rid]
                elif ts_of[rid] is not None and ts_of[prev] is not None:
                    d = ts_of[rid] - ts_of[prev]
                else:
                    d = 0.0
                if d < 0:
                    raise TraceError(f"{path}: trace line {lineno}: turn {k} of session {name} "
                                     f"has a negative delay ({d} ms)")
                delay_ms[rid] = d / arrival_speedup_ratio
                if in_len[rid] <= 0 and not delta:
                    raise TraceError(f"{path}: session {name} turn {k} must have a positive input_length")
    head_arr = np.asarray(head_ts, dtype=np.float64)
    if head_arr.size:
        head_arr = (head_arr - head_arr.min()) / arrival_speedup_ratio
    m = len(run_v)
    return Workload(
        n=n,
        input_length=np.asarray(in_len, dtype=np.int64),
        output_length=np.asarray(out_len, dtype=np.int64),
        run_off=np.asarray(run_off, dtype=np.int64),
        run_kind=np.zeros(m, dtype=np.int8),
        run_v=np.asarray(run_v, dtype=np.uint64),
        run_start=np.zeros(m, dtype=np.int64),
        run_n=np.asarray(run_n, dtype=np.int64),
        next_turn=next_turn,
        delay_ms=delay_ms,
        session_heads=np.asarray(heads, dtype=np.int32),
        head_arrival_ms=head_arr,
        session_id=session_id,
        turn_index=turn_index,
        delta=delta,
    )
