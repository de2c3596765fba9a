"""Bad input: a clear one-line error naming the field / file / line, through the API and the CLI."""
import json
import subprocess
import sys

import pytest

from conftest import GOLDEN
from mocker.replay import run_synthetic_trace_replay, run_trace_replay

ERRORS = json.loads((GOLDEN / "errors.json").read_text())
ERRORS.update({f"sglang_{k}": v for k, v in json.loads((GOLDEN / "errors_sglang.json").read_text()).items()})

# Where we deliberately differ from the reference (documented in the README).
ACCEPTED = {"flat_form_rejected", "normalize_flat_form"}          # we accept the flat form
OWN_WORDING = {
    "engine_args_bad_json": "not valid JSON",
    "arrival_speedup_ratio_0": "arrival_speedup_ratio must be a finite positive number, got 0",
    "numeric_session_id": "session_id must be a string",
    "malformed_json_line": "failed to parse line 2 from {path} as JSON",
}


def _call(spec, tmp_path):
    inp = spec["input"]
    path = tmp_path / "trace.jsonl"
    if inp["kind"] == "trace" and "trace_lines" in inp:
        path.write_text("\n".join(inp["trace_lines"]) + "\n")
        return run_trace_replay([str(path)], **inp.get("kwargs", {})), path
    if inp["kind"] == "synthetic":
        return run_synthetic_trace_replay(*inp["args"], **inp.get("kwargs", {})), path
    if inp["kind"] == "normalize":
        from mocker.config import normalize_config
        return normalize_config(inp["config"]), path
    missing = tmp_path / "does-not-exist.jsonl"
    return run_trace_replay([str(missing)]), missing


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_error_message(case, tmp_path):
    spec = ERRORS[case]
    if case in ACCEPTED or spec.get("message") is None:
        _call(spec, tmp_path)       # the reference runs these: so must we
        return
    with pytest.raises((ValueError, RuntimeError)) as exc:
        _call(spec, tmp_path)
    path = tmp_path / ("does-not-exist.jsonl" if "trace_files" in spec["input"] else "trace.jsonl")
    expected = OWN_WORDING.get(case, spec["message"]).replace("{path}", str(path))
    msg = str(exc.value)
    assert expected in msg, f"{case}: {msg!r} does not contain {expected!r}"
    assert "\n" not in msg


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "mocker.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


CLI_CASES = {
    "malformed line": (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
                        '{"timestamp": 1, "input_length": '], [], "failed to parse line 2 from"),
    "over capacity": (['{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}'], [],
                      "trace line 1 input_length 600 exceeds hash_ids capacity 512"),
    "unknown engine field": (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'],
                             ["--extra-engine-args", '{"engine": {"nope": 1}}'], "engine.nope: unknown field `nope`"),
    "invalid engine value": (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'],
                             ["--extra-engine-args", '{"engine": {"block_size": 0}}'], "block_size must be positive"),
    "block size 1": (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'],
                     ["--extra-engine-args", '{"engine": {"block_size": 1}}'],
                     "vLLM/TRT-LLM block_size must be at least two"),
    "decode block size 1": (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'],
                            ["--prefill-engine-args", '{"engine": {"worker_type": "prefill", "block_size": 16}}',
                             "--decode-engine-args", '{"engine": {"worker_type": "decode", "block_size": 1}}'],
                            "vLLM/TRT-LLM block_size must be at least two"),
    "never progresses": (['{"timestamp": 0, "input_length": 100, "output_length": 5000, "hash_ids": [1]}'],
                         ["--extra-engine-args", '{"engine": {"num_gpu_blocks": 2}}'], "replay invariant violated"),
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_bad_trace_exit_2_one_line(name, tmp_path):
    lines, extra, expected = CLI_CASES[name]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    res = _cli("replay", str(p), *extra)
    assert res.returncode == 2, res.stderr
    assert expected in res.stderr
    assert (str(p) in res.stderr or "engine" in res.stderr or "positive" in res.stderr
            or "invariant" in res.stderr or "block_size" in res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""


def test_cli_missing_trace_file(tmp_path):
    res = _cli("replay", str(tmp_path / "nope.jsonl"))
    assert res.returncode == 2
    assert "nope.jsonl" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_conflicting_arrival_options():
    res = _cli("replay", "--input-tokens", "10", "--output-tokens", "2", "--request-count", "3",
               "--request-rate", "1", "--arrival-interval-ms", "5")
    assert res.returncode == 2
    assert "exactly one of --replay-concurrency, --request-rate, or --arrival-interval-ms" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_cli_usage_errors_exit_2():
    assert _cli("replay").returncode == 2
    assert _cli("replay", "--num-workers", "0", "x.jsonl").returncode == 2
    assert _cli().returncode == 2
