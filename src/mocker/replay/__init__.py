"""Offline replay on a virtual clock: traces and synthetic workloads → latency report.

Modules: ``options`` (every keyword, one table), ``workload``/``traces``/``synthetic`` (the
requests as columns), ``topology`` (pools, ranks, routers), ``simulate`` (the compiled event
loop), ``report`` (summary and table), ``records`` (per-request records and output files),
``run`` (the two entry points).
"""
from mocker.errors import ReplayError
from mocker.replay.report import ReplayResult
from mocker.replay.run import run_synthetic_trace_replay, run_trace_replay

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "ReplayResult", "ReplayError"]
