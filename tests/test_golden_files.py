"""Sanity checks on the golden files themselves, so an empty or broken golden
directory cannot make the parity suite pass vacuously."""
from __future__ import annotations

import json
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
NON_SCENARIO_FILES = {"config_normalize.json", "errors.json", "errors_sglang.json"}
MIN_SCENARIOS = 40


def _scenarios():
    return sorted(p for p in GOLDEN_DIR.glob("*.json") if p.name not in NON_SCENARIO_FILES)


def test_golden_dir_has_enough_scenarios():
    files = _scenarios()
    assert len(files) >= MIN_SCENARIOS, f"only {len(files)} golden scenarios in {GOLDEN_DIR}"


def test_golden_scenarios_are_well_formed():
    names = set()
    with_records = 0
    for path in _scenarios():
        assert path.stat().st_size > 0, f"{path.name} is empty"
        g = json.loads(path.read_text())
        assert g["name"] == path.stem
        assert g["name"] not in names
        names.add(g["name"])
        assert g["kind"] in ("trace", "synthetic"), path.name
        if g["kind"] == "trace":
            assert g["trace_lines"], f"{path.name}: no trace lines"
        else:
            assert len(g["args"]) == 3
        assert isinstance(g["kwargs"], dict)
        if "extra_engine_args" in g["kwargs"]:
            assert isinstance(g["kwargs"]["extra_engine_args"], str)
            json.loads(g["kwargs"]["extra_engine_args"])
        if g.get("statistical"):
            # kv_router run whose outcome depends on the reference's random tie-breaks
            st = g["statistical"]
            assert g["kwargs"].get("router_mode") == "kv_router", path.name
            assert g["summary"] is None and g["per_request"] is None, path.name
            assert {"mean_ttft_ms", "mean_itl_ms", "mean_e2e_latency_ms", "prefix_cache_reused_ratio"} <= set(st)
            assert len({len(v) for v in st.values()}) == 1 and len(st["mean_ttft_ms"]) >= 5, path.name
            continue
        s = g["summary"]
        assert isinstance(s, dict) and s.get("num_requests", 0) >= 1, path.name
        assert "duration_ms" in s and "mean_ttft_ms" in s
        if g["per_request"] is not None:
            with_records += 1
            assert len(g["per_request"]) >= 1, path.name
            assert all("uuid" not in r for r in g["per_request"])
    assert with_records >= MIN_SCENARIOS - 5


def test_error_and_normalize_goldens_present():
    errors = json.loads((GOLDEN_DIR / "errors.json").read_text())
    assert len(errors) >= 10
    for case, entry in errors.items():
        assert entry["message"], f"errors.json: {case} has no message"
    norm = json.loads((GOLDEN_DIR / "config_normalize.json").read_text())
    assert "empty" in norm and "output" in norm["empty"]
    assert norm["empty"]["output"]["engine"]["block_size"] == 64
