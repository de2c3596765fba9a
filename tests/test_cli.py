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


def _on_a_terminal(args, columns=80, env=None, interrupt_after=None):
    """Run the CLI with stderr on a pty of ``columns`` columns: (exit code, what stderr showed)."""
    import signal
    import time
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout to /dev/null, stderr is the pty
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.environ.update({"COLUMNS": str(columns), "MOCKER_PROGRESS_DELAY": "0", **(env or {})})
        os.execvp(sys.executable, [sys.executable, "-m", "mocker", *args])
    out = b""
    t0 = time.monotonic()
    sent = False
    while True:
        if interrupt_after is not None and not sent and interrupt_after(out):
            os.kill(pid, signal.SIGINT)
            sent = True
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        assert time.monotonic() - t0 < 120
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


SYNTHETIC = ["replay", "--input-tokens", "1000", "--output-tokens", "100", "--request-count", "20000",
             "--request-rate", "20"]


def test_progress_bar_on_a_terminal():
    """On a tty the progress line appears; --quiet removes it."""
    rc, err = _on_a_terminal(SYNTHETIC)
    assert rc == 0
    assert "requests" in err and "20000/20000" in err
    rc, err = _on_a_terminal([*SYNTHETIC, "--quiet"])
    assert rc == 0 and "requests" not in err


def test_progress_covers_writing_records(tmp_path):
    """D9: writing the per-request records shows on the progress line too."""
    rc, err = _on_a_terminal([*SYNTHETIC, "--report-jsonl", str(tmp_path / "r.jsonl")])
    assert rc == 0
    assert "writing records" in err and "20000/20000" in err
    assert len((tmp_path / "r.jsonl").read_bytes().splitlines()) == 20000


def test_progress_line_fits_a_narrow_terminal_and_is_cleared():
    """D16: a 70-column terminal: no redraw is wider than the screen; the line ends cleared."""
    rc, err = _on_a_terminal(SYNTHETIC, columns=70)
    assert rc == 0
    segments = err.replace("\r\n", "\n").split("\r")
    assert len(segments) > 2
    assert all(len(seg) <= 69 for seg in segments), max(segments, key=len)
    assert segments[-1] == ""                      # the last redraw was wiped


def test_interrupt_message_starts_on_its_own_line():
    """D16: Ctrl-C during the progress line: the message is not glued to the bar."""
    rc, err = _on_a_terminal(["replay", "--input-tokens", "1000", "--output-tokens", "100",
                              "--request-count", "2000000", "--request-rate", "20"],
                             interrupt_after=lambda out: b"requests" in out)
    assert rc == 130
    last = err.replace("\r\n", "\n").split("\r")[-1]
    assert last.strip() == "mocker replay: interrupted", repr(err[-300:])


def test_trace_loading_shows_progress(tmp_path):
    """D17: a large trace shows progress while it is read, before simulating."""
    trace = tmp_path / "big.jsonl"
    row = '{{"timestamp": {t}, "input_length": 100, "output_length": 2, "hash_ids": [{t}]}}\n'
    trace.write_text("".join(row.format(t=i) for i in range(40000)))
    rc, err = _on_a_terminal(["replay", str(trace)])
    assert rc == 0
    assert "reading trace" in err
    assert err.index("reading trace") < err.index("requests")
