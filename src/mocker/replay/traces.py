"""Mooncake / mooncake-delta JSONL traces → workload columns (docs/core-sim.md §7.1, docs/core-sim.md §7.2, docs/core-sim.md §6.2).

Every row becomes one request (``rid`` = row order across the files).  Rows sharing a
``session_id`` are consecutive turns of one session; rows without one are sessions of
their own.  Prompt content is described as runs of interned hash ids, each repeated
``trace_block_size`` times (the last one cut to ``input_length``).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from mocker.errors import TraceError
from mocker.limits import HORIZON_MS, MAX_REQUEST_TOKENS, RID_LIMIT
from mocker.replay.workload import RUN_CONST, Workload

__all__ = ["TraceError", "Workload", "load_mooncake", "TRACE_FORMATS"]

TRACE_FORMATS = {"mooncake": "mooncake", "mooncake-delta": "mooncake-delta",
                 "mooncake_delta": "mooncake-delta"}
_UNSUPPORTED_FORMATS = ("agentic_mooncake", "agentic-mooncake", "weka", "applied_compute_agentic", "dynamo")
_PROGRESS_ROWS = 8192          # rows between progress calls while loading


def _int_field(row: dict, names: tuple[str, ...], where: str):
    for name in names:
        if name in row and row[name] is not None:
            v = row[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (
                    isinstance(v, float) and not v.is_integer()):
                raise TraceError(f"{where}: {name} must be a non-negative integer, got {v!r}")
            if v > MAX_REQUEST_TOKENS:
                raise TraceError(f"{where}: {name} {v!r} is more than a request can hold "
                                 f"({MAX_REQUEST_TOKENS} tokens)")
            return int(v)
    return None


def _float_field(row: dict, names: tuple[str, ...], where: str):
    for name in names:
        if name in row and row[name] is not None:
            v = row[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TraceError(f"{where}: {name} must be a finite number, got {v!r}")
            try:
                f = float(v)
            except OverflowError:
                f = math.inf
            if not math.isfinite(f):
                raise TraceError(f"{where}: {name} must be a finite number, got {v!r}")
            return f
    return None


def load_mooncake(paths, trace_block_size: int = 512, trace_format: str = "mooncake",
                  arrival_speedup_ratio: float = 1.0, timestamps_required: bool = True,
                  name_sessions: bool = False, progress=None) -> Workload:
    """Parse one or more mooncake JSONL files into a :class:`Workload`.

    Records carry session names when a session has several turns or ``name_sessions`` is set
    (closed-loop mode), as the reference does; rows without a session are ``request_<line>``.
    ``progress(done_bytes, total_bytes)`` is called every few thousand rows.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
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
    handles = [_open_trace(p) for p in paths]         # every file opens before any is read
    total_bytes = sum(size for _, size in handles)
    done_bytes = 0

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
    for path, (fh, _size) in zip(paths, handles):
        rows_in_file = 0
        with fh:
            for lineno, raw in enumerate(_lines(fh, path), 1):
                done_bytes += len(raw)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TraceError(f"{path}: trace line {lineno}: not valid UTF-8 "
                                     f"({exc.reason} at byte {exc.start + 1} of the line)") from None
                if not line.strip():
                    continue
                where = f"{path}: trace line {lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: {exc.msg}") from None
                except ValueError as exc:        # e.g. an integer of more than 4300 digits
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: {exc}") from None
                except RecursionError:
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: nested too deeply") from None
                if not isinstance(row, dict):
                    raise TraceError(f"failed to parse line {lineno} from {path} as JSON: not an object")
                row_no += 1
                rows_in_file += 1
                if row_no >= RID_LIMIT:
                    raise TraceError(f"{where}: more than {RID_LIMIT - 1} requests in one replay")
                if progress is not None and row_no % _PROGRESS_ROWS == 0:
                    progress(done_bytes, total_bytes)
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
                    if isl > MAX_REQUEST_TOKENS:
                        raise TraceError(f"{where}: {len(hids)} hash_ids of {tbs} tokens are more than a "
                                         f"request can hold ({MAX_REQUEST_TOKENS} tokens)")
                if isl > cap:
                    raise TraceError(f"{where} input_length {isl} exceeds hash_ids capacity {cap}")
                sid = row.get("session_id")
                if sid is not None and not isinstance(sid, str):
                    raise TraceError(f"{where}: session_id must be a string, got {sid!r}")
                ts = _float_field(row, ("timestamp", "created_time"), where)
                dl = _float_field(row, ("delay", "delay_ms"), where)
                if dl is not None and not -HORIZON_MS <= dl <= HORIZON_MS:
                    raise TraceError(f"{where}: delay {dl!r} ms is beyond the simulation horizon "
                                     f"({HORIZON_MS:.6g} ms)")
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
    if progress is not None:
        progress(total_bytes, total_bytes)

    n = len(in_len)
    sessions: dict = {}
    for rid, key in enumerate(sess_of):
        sessions.setdefault(key, []).append(rid)
    next_turn = np.full(n, -1, dtype=np.int32)
    delay_ms = np.zeros(n, dtype=np.float64)
    session_index = np.full(n, -1, dtype=np.int32)
    turn_index = np.full(n, -1, dtype=np.int64)
    session_names: list[str] = []
    heads, head_ts = [], []
    # the reference names sessions in its records only when some session has several turns
    # (or in closed-loop mode); single-turn traces report null session ids
    named = name_sessions or any(len(rids) > 1 for rids in sessions.values())
    for key, rids in sessions.items():
        name = key if isinstance(key, str) else f"request_{key[1]}"
        if named:
            session_index[rids] = len(session_names)
            turn_index[rids] = np.arange(len(rids))
            session_names.append(name)
        for k, rid in enumerate(rids):
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
                if d / arrival_speedup_ratio > HORIZON_MS:
                    raise TraceError(f"{path}: trace line {lineno}: turn {k} of session {name} comes "
                                     f"{d:.6g} ms after the previous one, beyond the simulation "
                                     f"horizon ({HORIZON_MS:.6g} ms)")
                delay_ms[rid] = d / arrival_speedup_ratio
                if in_len[rid] <= 0 and not delta:
                    raise TraceError(f"{path}: session {name} turn {k} must have a positive input_length")
    head_arr = np.asarray(head_ts, dtype=np.float64)
    if head_arr.size and timestamps_required:
        head_arr = (head_arr - head_arr.min()) / arrival_speedup_ratio
        late = int(np.argmax(head_arr))
        if not head_arr[late] <= HORIZON_MS:
            path, lineno = line_of[heads[late]]
            raise TraceError(f"{path}: trace line {lineno}: timestamp {head_ts[late]!r} is "
                             f"{head_arr[late]:.6g} ms after the trace's first arrival, beyond the "
                             f"simulation horizon ({HORIZON_MS:.6g} ms, about 104 days)")
    elif head_arr.size:
        head_arr = (head_arr - head_arr.min()) / arrival_speedup_ratio
    m = len(run_v)
    return Workload(
        n=n,
        input_length=np.asarray(in_len, dtype=np.int64),
        output_length=np.asarray(out_len, dtype=np.int64),
        run_off=np.asarray(run_off, dtype=np.int64),
        run_kind=np.full(m, RUN_CONST, dtype=np.int8),
        run_v=np.asarray(run_v, dtype=np.uint64),
        run_start=np.zeros(m, dtype=np.int64),
        run_n=np.asarray(run_n, dtype=np.int64),
        next_turn=next_turn,
        delay_ms=delay_ms,
        session_heads=np.asarray(heads, dtype=np.int32),
        head_arrival_ms=head_arr,
        session_index=session_index,
        turn_index=turn_index,
        session_names=session_names,
        delta=delta,
    )


def _lines(fh, path: str):
    """The file's lines; a read error names the file and the line it stopped at."""
    lineno = 0
    while True:
        try:
            raw = fh.readline()
        except OSError as exc:
            raise TraceError(f"{path}: trace line {lineno + 1}: cannot read: {exc.strerror or exc}") from None
        if not raw:
            return
        lineno += 1
        yield raw


def _open_trace(path: str):
    """(binary file, size in bytes); the OS's reason when it cannot be read."""
    if os.path.isdir(path):
        raise TraceError(f"failed to open trace file {path}: Is a directory")
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"failed to open trace file {path}: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fh.fileno()).st_size
    except OSError:
        size = 0
    return fh, size
