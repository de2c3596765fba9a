"""The CLI gives the reference's numbers too: `mocker replay` against the goldens."""
import json
import os
import pty
import subprocess
import sys

import pytest

from conftest import EXAMPLES, GOLDEN
from test_parity import canonical_key, first_record_difference, first_summary_difference

FLAG = {
    "num_workers": "--num-workers", "replay_concurrency": "--replay-concurrency",
    "router_mode": "--router-mode", "arrival_speedup_ratio": "--arrival-speedup-ratio",
    "trace_block_size": "--trace-block-size", "trace_format": "--trace-format",
    "max_sim_time_ms": "--max-sim-time-ms", "sla_ttft_ms": "--sla-ttft-ms",
    "sla_itl_ms": "--sla-itl-ms", "sla_e2e_ms": "--sla-e2e-ms",
    "extra_engine_args": "--extra-engine-args", "request_rate": "--request-rate",
    "arrival_interval_ms": "--arrival-interval-ms", "arrival_seed": "--arrival-seed",
    "turns_per_session": "--turns-per-session", "shared_prefix_ratio": "--shared-prefix-ratio",
    "num_prefix_groups": "--num-prefix-groups", "inter_turn_delay_ms": "--inter-turn-delay-ms",
}

CASES = ["r1_single", "r4b_pressure_fifo", "r9d_tiny_concurrency4", "r9f_tiny_sla",
         "sessions_mooncake_delta", "rr3_mix", "max_sim_time_cut", "trtllm_pressure",
         "r11_max_model_len", "synth_turns3", "r10c_synth_prefix_groups"]


def _cli(args, **kw):
    return subprocess.run([sys.executable, "-m", "mocker.cli", *args], capture_output=True,
                          text=True, timeout=300, **kw)


@pytest.mark.parametrize("name", CASES)
def test_cli_matches_reference(name, tmp_path):
    g = json.loads((GOLDEN / f"{name}.json").read_text())
    args = ["replay", "--quiet", "--report-json", str(tmp_path / "s.json"),
            "--report-jsonl", str(tmp_path / "r.jsonl")]
    if g["kind"] == "trace":
        trace = tmp_path / "t.jsonl"
        trace.write_text("\n".join(g["trace_lines"]) + "\n")
        args.append(str(trace))
    else:
        isl, osl, n = g["args"]
        args += ["--input-tokens", str(isl), "--output-tokens", str(osl), "--request-count", str(n)]
    for k, v in g["kwargs"].items():
        args += [FLAG[k], str(v)]
    res = _cli(args)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""                       # no progress bar when stderr is not a terminal
    assert "Time to First Token (ms)" in res.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert first_summary_difference(summary, g["summary"]) is None
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    if g.get("per_request") is not None:
        records.sort(key=canonical_key)
        assert first_record_difference(records, g["per_request"]) is None


def test_cli_example_trace_runs():
    res = _cli(["replay", str(EXAMPLES / "mooncake_tiny.jsonl")])
    assert res.returncode == 0, res.stderr
    assert "Requests (completed / total)" in res.stdout and "16 / 16" in res.stdout


def test_progress_bar_on_a_terminal():
    """On a tty the progress bar appears for runs longer than a moment; --quiet removes it."""
    def run(extra):
        pid, fd = pty.fork()
        if pid == 0:  # child: stdout to /dev/null, stderr is the pty
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execvp(sys.executable, [sys.executable, "-m", "mocker.cli", "replay", "--input-tokens",
                                       "1000", "--output-tokens", "100", "--request-count", "60000",
                                       "--request-rate", "20", *extra])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
    rc, err = run([])
    assert rc == 0
    assert "requests" in err and "60000/60000" in err
    rc, err = run(["--quiet"])
    assert rc == 0 and "requests" not in err
