"""Bit-parity tests against golden outputs of the reference (ai-dynamo-runtime 1.6.1).

Goldens live in ``tests/golden/<scenario>.json`` and are produced by
``tools/make_goldens.py`` (run with the reference venv). The reference is *not*
needed to run these tests.

Per-request order: the reference breaks ties between requests with the same
arrival time non-deterministically, so goldens are stored in ``canonical_key``
order and our records are sorted with the same key before comparing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
NON_SCENARIO_FILES = {"config_normalize.json", "errors.json", "errors_sglang.json"}

# wall-clock dependent summary keys (not simulated)
SKIP_SUMMARY_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

RECORD_FIELDS = (
    "arrival_time_ms", "first_admit_ms", "terminal_time_ms", "first_token_ms", "last_token_ms",
    "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length", "requested_output_length",
    "output_length", "reused_input_tokens", "decode_worker_idx", "prefill_worker_idx",
    "admission_count", "readmission_count", "terminal_status", "session_id", "turn_index",
)
ADMISSION_FIELDS = ("at_ms", "reused_input_tokens", "is_readmission")


# ---- comparison rules: tools/parity_rules.py (shared with the golden writer and the fuzzer) --
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from parity_rules import ABS_TOL, REL_TOL, canonical_key, values_equal  # noqa: E402,F401


def _to_plain(rec):
    if isinstance(rec, dict):
        return rec
    # tolerate dataclass-like / attribute records
    if hasattr(rec, "_asdict"):
        return rec._asdict()
    if hasattr(rec, "__dict__"):
        return dict(vars(rec))
    return dict(rec)


def first_summary_difference(ours: dict, ref: dict):
    for key, rv in ref.items():
        if key in SKIP_SUMMARY_KEYS:
            continue
        if key not in ours:
            return f"summary key {key!r} missing (ref {rv!r})"
        if not values_equal(ours[key], rv):
            return f"summary[{key!r}]: ours {ours[key]!r} vs ref {rv!r}"
    return None


def first_record_difference(ours: list, ref: list):
    if len(ours) != len(ref):
        return f"per_request count: ours {len(ours)} vs ref {len(ref)}"
    for i, (o, r) in enumerate(zip(ours, ref)):
        for field in RECORD_FIELDS:
            if field not in r:
                continue
            if field not in o:
                return f"request {i}: field {field!r} missing (ref {r[field]!r})"
            if not values_equal(o[field], r[field]):
                return (f"request {i} (session={r.get('session_id')!r}, turn={r.get('turn_index')!r}, "
                        f"arrival={r.get('arrival_time_ms')!r}): {field}: ours {o[field]!r} vs ref {r[field]!r}")
        if "admission_history" in r:
            oh = o.get("admission_history")
            if oh is None:
                return f"request {i}: admission_history missing"
            rh = r["admission_history"]
            if len(oh) != len(rh):
                return f"request {i}: admission_history length: ours {len(oh)} vs ref {len(rh)}"
            for j, (oa, ra) in enumerate(zip(oh, rh)):
                oa = _to_plain(oa)
                for field in ADMISSION_FIELDS:
                    if field not in ra:
                        continue
                    if field not in oa or not values_equal(oa[field], ra[field]):
                        return (f"request {i}: admission_history[{j}].{field}: "
                                f"ours {oa.get(field)!r} vs ref {ra[field]!r}")
    return None


# ---- scenario loading -------------------------------------------------------------------------
def scenario_files():
    return sorted(p for p in GOLDEN_DIR.glob("*.json") if p.name not in NON_SCENARIO_FILES)


def load(path):
    with open(path) as fh:
        return json.load(fh)


def run_ours(golden, tmp_path):
    from mocker import replay

    kwargs = dict(golden["kwargs"])
    if golden["kind"] == "trace":
        trace = tmp_path / f"{golden['name']}.jsonl"
        trace.write_text("".join(line + "\n" for line in golden["trace_lines"]))
        return replay.run_trace_replay([str(trace)], **kwargs, capture_per_request=True)
    if golden["kind"] == "synthetic":
        input_tokens, output_tokens, request_count = golden["args"]
        return replay.run_synthetic_trace_replay(input_tokens, output_tokens, request_count, **kwargs,
                                                 capture_per_request=True)
    raise AssertionError(f"unknown golden kind {golden['kind']!r}")


_FILES = scenario_files()

# Scenarios where mocker is known to differ from the reference (strict, so a fix shows up as
# XPASS).  None at the moment.
KNOWN_DIVERGENT: set[str] = set()


def _param(p):
    marks = [pytest.mark.xfail(strict=True, reason="known divergence from the reference")] \
        if p.stem in KNOWN_DIVERGENT else []
    return pytest.param(p, id=p.stem, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in _FILES])
def test_parity(path, tmp_path):
    golden = load(path)
    result = run_ours(golden, tmp_path)

    summary = dict(result.summary)
    diff = first_summary_difference(summary, golden["summary"])
    assert diff is None, f"[{golden['name']}] {diff}"

    if golden.get("per_request") is not None:
        ours = [_to_plain(r) for r in (result.per_request or [])]
        ours.sort(key=canonical_key)
        diff = first_record_difference(ours, golden["per_request"])
        assert diff is None, f"[{golden['name']}] {diff}"
