"""Offline replay on a virtual clock: traces and synthetic workloads → latency report."""
from mocker.replay.report import ReplayResult
from mocker.replay.run import ReplayError, run_synthetic_trace_replay, run_trace_replay

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "ReplayResult", "ReplayError"]
