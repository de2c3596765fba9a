"""Running a replay: the compiled virtual-clock event loop over a workload and a topology."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from mocker._core.replay import ReplayCore
from mocker._core.router import KvRouter
from mocker._core.table import ReqTable
from mocker.replay.topology import Topology
from mocker.replay.workload import Workload

__all__ = ["Simulation", "run_simulation", "simulate", "ProgressFn"]

# progress(phase, done, total, sim_ms): phase "load" (bytes of the trace read), "simulate"
# (requests terminal) or "write" (records written); sim_ms is the simulated clock
ProgressFn = Callable[[str, int, int, float], None]
_SLICE_PASSES = 20000          # passes between returns to Python (progress, Ctrl-C)


@dataclass
class Simulation:
    """A finished simulation: the request table, the ranks, the replay core and its router."""
    table: ReqTable
    ranks: list
    core: ReplayCore
    router: KvRouter | None
    workload: Workload
    topology: Topology


def run_simulation(workload: Workload, topology: Topology, *, concurrency: int | None = None,
                   max_sim_time_ms: float | None = None, progress: ProgressFn | None = None,
                   release_workload: bool = False) -> Simulation:
    """Run the event loop over ``workload`` until every request is terminal or time is up.

    ``release_workload``: drop the workload's columns once the core has copied them (the
    replay entry points do: they build the workload for this run only).
    """
    table = ReqTable(workload.n, topology.block_size)
    ranks, kv_router, disagg = topology.build(table)
    cap = math.inf if max_sim_time_ms is None else float(max_sim_time_ms)
    cfg = topology.config
    core = ReplayCore(table, ranks, workload.columns(), concurrency or 0, cap, workload.delta, kv_router,
                      cfg["dp_size"], cfg["engine"]["prefill_schedule_interval"], disagg)
    if release_workload:
        workload.release_columns()
    last_report = time.perf_counter()
    while True:
        fin = core.advance(_SLICE_PASSES)
        if progress is not None:
            now = time.perf_counter()
            if fin or now - last_report > 0.1:
                progress("simulate", core.terminal, workload.n, core.now_ms)
                last_report = now
        if fin:
            break
    return Simulation(table, ranks, core, kv_router, workload, topology)


def simulate(workload: Workload, config: dict, *, num_workers: int = 1, concurrency: int | None = None,
             max_sim_time_ms: float | None = None, progress: ProgressFn | None = None,
             router: dict | None = None, kv_event_lag_ms: float | None = None,
             decode_config: dict | None = None, num_decode_workers: int = 1) -> Simulation:
    """``run_simulation`` with the topology given by its parts (normalized configs).

    ``router``: a normalized router config (``normalize_router_config``) to place requests with
    the KV-aware router; None places them round robin.  ``decode_config``: disaggregated replay,
    ``config`` then being the prefill pool's (``num_workers`` prefill workers).
    """
    topo = Topology(config, num_workers, decode_config, num_decode_workers if decode_config else 0,
                    router, float(kv_event_lag_ms or 0.0))
    return run_simulation(workload, topo, concurrency=concurrency, max_sim_time_ms=max_sim_time_ms,
                          progress=progress)


