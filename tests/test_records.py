"""The compiled JSONL writer (mocker._core.records) against build_records + json.dumps.

``write_records`` must produce exactly the bytes of
``"".join(json.dumps(rec, separators=(",", ":")) + "\\n" for rec in build_records(...))``.
The golden scenarios are run through the public API with ``build_records`` wrapped, so the
writer sees the very columns, order and arguments the replay passes to it.
"""
from __future__ import annotations

import errno
import io
import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mocker.replay.records as records_mod
from mocker._core.records import format_float, write_records
from record_oracle import build_records

from test_parity import _FILES, load, run_ours


def _dumps(records) -> bytes:
    return "".join(json.dumps(rec, separators=(",", ":")) + "\n" for rec in records).encode("utf-8")


def _session_arrays(session_id: list, turn_index: list):
    """build_records' per-request lists → (session_index int32, names, turn_index int64)."""
    names: list = []
    where: dict = {}
    idx = np.full(len(session_id), -1, dtype=np.int32)
    for r, s in enumerate(session_id):
        if s is not None:
            if s not in where:
                where[s] = len(names)
                names.append(s)
            idx[r] = where[s]
    turns = np.array([-1 if t is None else t for t in turn_index], dtype=np.int64)
    return idx, names, turns


def _write(cols, order, session_id, turn_index, cap, **kw) -> tuple[bytes, int]:
    idx, names, turns = _session_arrays(session_id, turn_index)
    buf = io.BytesIO()
    n = write_records(buf, cols, order, idx, names, turns, cap, **kw)
    return buf.getvalue(), n


def _build_kwargs(kw: dict) -> dict:
    """build_records' keyword arguments → write_records' (dp_size is required there)."""
    return {"dp_size": kw.get("dp_size", 1), "route_overlap_tokens": kw.get("route_overlap_tokens"),
            "prefill_dp_size": kw.get("prefill_dp_size")}


def _capture(golden, tmp_path, monkeypatch):
    """Run a golden scenario; return the arguments the replay gave the compiled writer (as
    build_records takes them) and the oracle's records for them."""
    calls = []
    real = records_mod._compiled_write

    def spy(fh, cols, order, session_index, session_names, turn_index, max_sim_time_ms, progress=None, **kw):
        if not calls:
            session_id = [None if i < 0 else session_names[i] for i in session_index]
            turns = [None if t < 0 else int(t) for t in turn_index]
            recs = build_records(cols, order, session_id, turns, max_sim_time_ms, **kw)
            calls.append((cols, order, session_id, turns, max_sim_time_ms, kw, recs))
        return real(fh, cols, order, session_index, session_names, turn_index, max_sim_time_ms,
                    progress=progress, **kw)

    monkeypatch.setattr(records_mod, "_compiled_write", spy)
    run_ours(golden, tmp_path)
    assert calls, "the replay wrote records"
    return calls[0]


_PER_REQUEST = [p for p in _FILES if load(p).get("per_request")]


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in _PER_REQUEST])
def test_golden_scenarios_byte_identical(path, tmp_path, monkeypatch):
    cols, order, session_id, turn_index, cap, kw, recs = _capture(load(path), tmp_path, monkeypatch)
    assert recs, "a golden with per-request records yields records"
    data, n = _write(cols, order, session_id, turn_index, cap, **_build_kwargs(kw))
    assert n == len(recs)
    expected = _dumps(recs)
    if data != expected:
        got, want = data.split(b"\n"), expected.split(b"\n")
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"record {i} differs"
        assert len(got) == len(want)


@pytest.mark.parametrize("name", ["pd_gated_retry_fuzz2123", "kvr_sessions_2", "sglang_sessions_delta_bs16",
                                  "dp_synth_i3_rate", "max_sim_time_cut"])
def test_same_file_as_report_jsonl_path(name, tmp_path, monkeypatch):
    """The file today's report_jsonl_path writes, byte for byte."""
    out = tmp_path / "report.jsonl"
    golden = load(next(p for p in _PER_REQUEST if p.stem == name))
    golden = dict(golden, kwargs=dict(golden["kwargs"], report_jsonl_path=str(out)))
    cols, order, session_id, turn_index, cap, kw, recs = _capture(golden, tmp_path, monkeypatch)
    path = tmp_path / "ours.jsonl"
    idx, names, turns = _session_arrays(session_id, turn_index)
    with open(path, "wb") as fh:
        n = write_records(fh, cols, order, idx, names, turns, cap, **_build_kwargs(kw))
    assert n == len(recs)
    assert path.read_bytes() == out.read_bytes()


# each variant of build_records is among the goldens above; check that it really is exercised
@pytest.mark.parametrize("name, check", [
    ("fixed_timing", lambda c: c["kw"].get("dp_size", 1) == 1 and c["kw"].get("prefill_dp_size") is None
     and c["kw"].get("route_overlap_tokens") is None),
    ("dp_tiny_dp4_tp2", lambda c: c["kw"]["dp_size"] == 4),
    ("kvr_tiny_4", lambda c: c["kw"]["route_overlap_tokens"] is not None
     and c["kw"]["route_overlap_tokens"].any()),
    ("pd_mix_2p2d_rr", lambda c: c["kw"]["prefill_dp_size"] is not None),
    ("pd_gated_retry", lambda c: c["kw"]["prefill_dp_size"] is not None
     and c["kw"]["route_overlap_tokens"] is not None),
    ("pd_failed_handoff_ends_session", lambda c: any(r["terminal_status"] == "failed" for r in c["recs"])),
    ("trtllm_sessions_rr2", lambda c: any(s is not None for s in c["session_id"])),
    ("synth_turns3", lambda c: any(s is not None for s in c["session_id"])),
    ("max_sim_time_cut", lambda c: math.isfinite(c["cap"]) and len(c["recs"]) < len(c["order"])),
    ("fifo_heavy", lambda c: any(r["readmission_count"] > 0 for r in c["recs"])),
])
def test_golden_variants_covered(name, check, tmp_path, monkeypatch):
    path = next(p for p in _PER_REQUEST if p.stem == name)
    cols, order, session_id, _, cap, kw, recs = _capture(load(path), tmp_path, monkeypatch)
    assert check({"kw": kw, "recs": recs, "session_id": session_id, "cap": cap, "order": order})


# ---- float formatting ---------------------------------------------------------------------------
def _from_bits(b: int) -> float:
    return struct.unpack("<d", b.to_bytes(8, "little"))[0]


@settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.integers(0, 2**64 - 1).map(_from_bits),                       # any bit pattern
    st.integers(0, 2**52).map(lambda m: _from_bits(m)),              # subnormals and zero
    st.integers(2**53, 2**1023).map(float),                          # integral, beyond 2**53
    st.integers(-10**17, 10**17).map(float),
    st.integers(-30, 30).map(lambda e: 10.0 ** e),                   # around the layout switches
    st.integers(-30, 30).map(lambda e: math.nextafter(10.0 ** e, 0.0)),
    st.sampled_from([0.0, -0.0, 1e16, 1e-4, 1e-5, 9999999999999998.0, 5e-324, -5e-324,
                     2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53 + 2]),
))
def test_format_float_matches_repr(x):
    assert format_float(x) == json.dumps(x)
    if math.isfinite(x):
        assert format_float(x) == repr(x)


def test_format_float_specials():
    assert format_float(float("nan")) == "NaN"
    assert format_float(float("inf")) == "Infinity"
    assert format_float(float("-inf")) == "-Infinity"
    assert format_float(-0.0) == "-0.0"
    assert format_float(1e16) == "1e+16"
    assert format_float(1e-5) == "1e-05"
    assert format_float(1e-4) == "0.0001"
    assert format_float(2.0**60) == "1.152921504606847e+18"


# ---- synthetic columns: every branch, against build_records ---------------------------------------
def _random_table(rng, n, *, disagg, kv, sessions, tricky):
    """Columns shaped like ReqTable.columns() with values build_records accepts."""
    status = rng.choice(np.array([3, 3, 3, 4, 6, 1, 2], dtype=np.int8), n)
    arrival = np.round(rng.uniform(0, 5000, n), rng.integers(0, 6))
    has1 = rng.random(n) < 0.8
    out = np.where(has1, rng.integers(1, 50, n), 0).astype(np.int64)
    t1 = np.where(has1, arrival + rng.exponential(50, n), np.nan)
    t2 = np.where(out >= 2, t1 + rng.exponential(5, n), np.nan)
    tm = np.where(has1, np.where(out >= 2, t2 + rng.exponential(100, n), t1), np.nan)
    term = np.where(has1, tm, arrival + rng.exponential(10, n))
    term[rng.random(n) < 0.05] = np.nan
    if tricky:
        # equal times (zero latencies), a token before arrival (clamped to 0.0), huge values
        t1[:3] = arrival[:3]
        t1[3:5] = arrival[3:5] - 1.0
        arrival[5:7] = np.array([1e17, 1.5e-7])
    adm_n = rng.integers(0, 4, n)
    adm_rid = np.repeat(np.arange(n, dtype=np.int32), adm_n)
    rng.shuffle(adm_rid)
    m = adm_rid.shape[0]
    cols = {
        "arrival_time_ms": arrival,
        "input_length": rng.integers(0, 10**6, n).astype(np.int64),
        "requested_output_length": rng.integers(0, 100, n).astype(np.int64),
        "status": status,
        "worker": rng.integers(-1, 7, n).astype(np.int32),
        "first_admit_ms": np.where(rng.random(n) < 0.9, arrival + 0.25, np.nan),
        "first_token_ms": t1, "second_token_ms": t2, "last_token_ms": tm,
        "terminal_time_ms": term,
        "output_length": out,
        "reused_first": rng.integers(0, 10**4, n).astype(np.int64),
        "reused_max": rng.integers(0, 10**4, n).astype(np.int64),
        "reused_dec": rng.integers(0, 10**4, n).astype(np.int64),
        "admissions": adm_n.astype(np.int32),
        "adm_rid": adm_rid,
        "adm_at": rng.uniform(0, 1e4, m),
        "adm_reused": rng.integers(0, 2**62, m).astype(np.int64),
        "adm_pool": (rng.integers(1, 3, m) if disagg else np.zeros(m)).astype(np.int8),
        "prefill_worker": rng.integers(-1, 5, n).astype(np.int32),
    }
    for k in ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
              "destination_activated_ms", "decode_admit_ms", "source_released_ms"):
        cols[k] = np.where(rng.random(n) < 0.7, rng.uniform(0, 1e4, n), np.nan)
    order = rng.permutation(n).astype(np.int64)
    if sessions:
        pool = ["s", "", 'quo"te', "back\\slash", "tab\tnl\n", "\x00\x1f\x7f", "é", "中文",
                "\U0001F600", "\ud800lone"]
        session_id = [None if rng.random() < 0.3 else str(pool[rng.integers(len(pool))]) + str(r % 3)
                      for r in range(n)]
        turn_index = [None if s is None else int(rng.integers(0, 2**40)) for s in session_id]
    else:
        session_id = turn_index = [None] * n
    overlap = rng.integers(0, 2 * 10**6, n).astype(np.int64) if kv else None
    return cols, order, session_id, turn_index, overlap


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), disagg=st.booleans(), kv=st.booleans(),
       sessions=st.booleans(), dp=st.integers(1, 4), pdp=st.integers(1, 3),
       cap=st.sampled_from([math.inf, 2500.0, 0.0]))
def test_random_columns_byte_identical(seed, n, disagg, kv, sessions, dp, pdp, cap):
    rng = np.random.default_rng(seed)
    cols, order, session_id, turn_index, overlap = _random_table(rng, n, disagg=disagg, kv=kv,
                                                                 sessions=sessions, tricky=n >= 7)
    kw = dict(dp_size=dp, route_overlap_tokens=overlap, prefill_dp_size=pdp if disagg else None)
    recs = build_records(cols, order, session_id, turn_index, cap, **kw)
    data, count = _write(cols, order, session_id, turn_index, cap, **kw)
    assert count == len(recs)
    assert data == _dumps(recs)


def test_without_adm_pool_column():
    rng = np.random.default_rng(3)
    cols, order, session_id, turn_index, overlap = _random_table(rng, 30, disagg=False, kv=False,
                                                                 sessions=False, tricky=True)
    del cols["adm_pool"]
    recs = build_records(cols, order, session_id, turn_index, math.inf)
    assert _write(cols, order, session_id, turn_index, math.inf, dp_size=1)[0] == _dumps(recs)


# ---- chunking, progress, errors ------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample():
    rng = np.random.default_rng(11)
    cols, order, session_id, turn_index, overlap = _random_table(rng, 200, disagg=True, kv=True,
                                                                 sessions=True, tricky=True)
    idx, names, turns = _session_arrays(session_id, turn_index)
    recs = build_records(cols, order, session_id, turn_index, math.inf, dp_size=2,
                         route_overlap_tokens=overlap, prefill_dp_size=3)
    args = (cols, order, idx, names, turns, math.inf, 2)
    kw = dict(route_overlap_tokens=overlap, prefill_dp_size=3)
    return args, kw, _dumps(recs), len(recs)


class _Chunks:
    def __init__(self):
        self.parts = []

    def write(self, b):
        assert isinstance(b, bytes)
        self.parts.append(b)
        return len(b)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 1000, 5000, 1 << 20])
def test_chunking_gives_same_bytes(sample, chunk_bytes):
    args, kw, expected, count = sample
    out = _Chunks()
    seen = []
    assert write_records(out, *args, **kw, chunk_bytes=chunk_bytes, progress=seen.append) == count
    assert b"".join(out.parts) == expected
    assert len(seen) == len(out.parts)
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and seen[-1] == count
    if chunk_bytes == 1:
        assert seen == list(range(1, count + 1))          # one record per chunk
    else:
        # about chunk_bytes each: only the last chunk is short
        assert all(len(p) >= chunk_bytes for p in out.parts[:-1])
        assert all(len(p) < chunk_bytes + 4096 for p in out.parts[:-1])


def test_writes_a_binary_file(sample, tmp_path):
    args, kw, expected, count = sample
    path = tmp_path / "r.jsonl"
    with open(path, "wb") as fh:
        assert write_records(fh, *args, **kw, chunk_bytes=4096) == count
    assert path.read_bytes() == expected
    with open(path, "wb", buffering=0) as fh:          # a raw file (may write partially)
        assert write_records(fh, *args, **kw) == count
    assert path.read_bytes() == expected


def test_partial_writes_are_completed(sample):
    args, kw, expected, count = sample

    class Trickle:
        def __init__(self):
            self.data = bytearray()

        def write(self, b):
            b = bytes(b)[:333]
            self.data += b
            return len(b)

    out = Trickle()
    assert write_records(out, *args, **kw, chunk_bytes=2000) == count
    assert bytes(out.data) == expected


def test_no_records_no_write(sample):
    args, kw, _, _ = sample
    cols = args[0]
    out = _Chunks()
    assert write_records(out, cols, np.empty(0, dtype=np.int64), *args[2:], **kw) == 0
    assert out.parts == []


class _DiskFull:
    def __init__(self, fail_at):
        self.calls = 0
        self.fail_at = fail_at

    def write(self, b):
        self.calls += 1
        if self.calls >= self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(b)


@pytest.mark.parametrize("fail_at", [1, 3])
def test_write_error_propagates(sample, fail_at):
    args, kw, _, _ = sample
    seen = []
    fh = _DiskFull(fail_at)
    with pytest.raises(OSError) as ei:
        write_records(fh, *args, **kw, chunk_bytes=3000, progress=seen.append)
    assert ei.value.errno == errno.ENOSPC
    assert fh.calls == fail_at                          # nothing written after the error
    assert len(seen) == fail_at - 1


def test_progress_error_propagates(sample):
    args, kw, _, _ = sample

    def boom(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_records(io.BytesIO(), *args, **kw, chunk_bytes=3000, progress=boom)


def test_text_file_is_refused(sample, tmp_path):
    args, kw, _, _ = sample
    with open(tmp_path / "t.jsonl", "w") as fh, pytest.raises(TypeError):
        write_records(fh, *args, **kw)


def test_bad_arguments_are_refused(sample):
    (cols, order, idx, names, turns, cap, dp), kw, _, _ = sample
    fh = io.BytesIO()
    with pytest.raises(ValueError):
        write_records(fh, cols, np.array([len(idx)]), idx, names, turns, cap, dp, **kw)
    with pytest.raises(ValueError):
        write_records(fh, cols, order, idx, names[:1], turns, cap, dp, **kw)
    with pytest.raises(ValueError):
        write_records(fh, cols, order, idx[:-1], names, turns, cap, dp, **kw)
    with pytest.raises(ValueError):
        write_records(fh, cols, order, idx, names, turns, cap, 0, **kw)
    with pytest.raises(ValueError):
        write_records(fh, cols, order, idx, names, turns, cap, dp, **kw, chunk_bytes=0)
    with pytest.raises(ValueError):
        write_records(fh, dict(cols, adm_pool=np.full(len(cols["adm_rid"]), 5, dtype=np.int8)),
                      order, idx, names, turns, cap, dp, **kw)
    assert fh.getvalue() == b""


def test_longest_values_fit_the_record_bound():
    """Widest numbers everywhere (the writer reserves 4,096 bytes a record + 320 an admission)."""
    n, lo, wide = 2, np.iinfo(np.int64).min, -2.2250738585072014e-308
    cols = {k: np.full(n, wide) for k in (
        "arrival_time_ms", "first_admit_ms", "first_token_ms", "second_token_ms", "last_token_ms",
        "prefill_admit_ms", "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
        "decode_admit_ms", "source_released_ms")}
    cols["terminal_time_ms"] = np.full(n, wide)
    for k in ("input_length", "requested_output_length", "output_length", "reused_first", "reused_max",
              "reused_dec"):
        cols[k] = np.full(n, lo, dtype=np.int64)
    cols["output_length"][:] = np.iinfo(np.int64).max
    cols["status"] = np.full(n, 3, dtype=np.int8)
    cols["worker"] = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
    cols["prefill_worker"] = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
    cols["admissions"] = np.array([0, 1], dtype=np.int32)
    cols["adm_rid"] = np.array([1], dtype=np.int32)
    cols["adm_at"] = np.array([wide])
    cols["adm_reused"] = np.array([lo], dtype=np.int64)
    cols["adm_pool"] = np.array([1], dtype=np.int8)
    order = np.arange(n, dtype=np.int64)
    overlap = np.full(n, lo, dtype=np.int64)
    session_id, turn_index = [None] * n, [2**62] * n
    recs = build_records(cols, order, session_id, turn_index, math.inf, dp_size=1,
                         route_overlap_tokens=overlap, prefill_dp_size=1)
    data, count = _write(cols, order, session_id, turn_index, math.inf, dp_size=1,
                         route_overlap_tokens=overlap, prefill_dp_size=1)
    assert count == 2 and data == _dumps(recs)
    lines = data.split(b"\n")
    assert len(lines[0]) < 3000
    assert len(lines[1]) - len(lines[0]) < 320
