"""The benchmark scripts the README documents run to the end (figures are not checked here:
timing targets live in benchmarks/, never in unit tests)."""
import subprocess
import sys

import pytest

from conftest import ROOT


def test_live_pacing_with_a_short_steady_state_prints_na():
    """D18: two seconds or less of steady state cannot give a drift: "n/a", not a crash."""
    pytest.importorskip("zmq")          # the live extra (part of the test extra)
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "live_pacing.py"), "--clients", "20",
                          "--seconds", "2.5", "--blocks", "4096"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "drift (slope of each second's median lateness): n/a" in res.stdout
