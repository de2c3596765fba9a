"""The replay entry points: check the options, build the workload and the topology, run, report.

``run_trace_replay`` and ``run_synthetic_trace_replay`` mirror the reference's
``run_mocker_trace_replay`` / ``run_mocker_synthetic_trace_replay`` (same keyword names, same
report); their keywords are the table in ``mocker.replay.options``.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Iterable

import numpy as np

from mocker.errors import ReplayError
from mocker.replay.options import SYNTHETIC, TRACE, Options, check_options, options_doc
from mocker.replay.records import OutputFile, capture_records, write_records
from mocker.replay.report import ReplayResult, build_outcome, build_summary
from mocker.replay.simulate import Simulation, run_simulation, simulate
from mocker.replay.synthetic import synthetic_workload
from mocker.replay.topology import Topology
from mocker.replay.traces import load_mooncake
from mocker.replay.workload import Workload

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "ReplayError", "simulate"]

# columns of the request table that hold one value per request
_PER_REQ = {"arrival_time_ms", "input_length", "requested_output_length", "status", "worker",
            "first_admit_ms", "first_token_ms", "second_token_ms", "last_token_ms",
            "terminal_time_ms", "output_length", "reused_first", "reused_max", "reused_dec",
            "admissions"}


def _topology(opts: Options) -> Topology:
    return Topology.from_options(opts.extra_engine_args, opts.prefill_engine_args, opts.decode_engine_args,
                                 opts.num_workers, opts.num_prefill_workers, opts.num_decode_workers,
                                 opts.router_mode, opts.router_config, opts.kv_event_lag_ms)


def _phase(progress, phase: str):
    """``progress`` narrowed to one phase's (done, total) calls, or None."""
    if progress is None:
        return None
    return lambda done, total=0: progress(phase, done, total, 0.0)


def _replay(opts: Options, topology: Topology, make_workload, t0: float, what: str) -> ReplayResult:
    """Run ``make_workload()``'s requests over ``topology``; the per-request file is checked first."""
    jsonl = None if opts.report_jsonl_path is None else OutputFile(opts.report_jsonl_path, "report_jsonl_path")
    try:
        workload: Workload = make_workload()
        sim = run_simulation(workload, topology, concurrency=opts.replay_concurrency,
                             max_sim_time_ms=opts.max_sim_time_ms, progress=opts.progress,
                             release_workload=True)
        wall_ms = (time.perf_counter() - t0) * 1000.0
        cap = math.inf if opts.max_sim_time_ms is None else float(opts.max_sim_time_ms)
        summary, outcome = _summarize(sim, opts, cap, wall_ms)
        if jsonl is not None:
            n = summary["num_requests"]
            p = opts.progress
            write_records(sim, jsonl, cap,
                          None if p is None else (lambda done: p("write", done, n, sim.core.now_ms)))
            jsonl.commit()
            jsonl = None
        records = capture_records(sim, cap) if opts.capture_per_request else None
    except BaseException:
        if jsonl is not None:
            jsonl.discard()
        raise
    return ReplayResult(summary, records, outcome, f"{what} ({_sizes(workload)}) on {topology.describe()}")


def _sizes(w: Workload) -> str:
    """The workload's size in a few words: requests and prompt lengths."""
    if w.n == 0:
        return "no requests"
    lo, hi = int(w.input_length.min()), int(w.input_length.max())
    prompts = f"{lo}" if lo == hi else f"{lo}-{hi}"
    kind = "new input" if w.delta else "prompt"
    return f"{w.n} requests, {kind} {prompts} tokens"


def _summarize(sim: Simulation, opts: Options, cap: float, wall_ms: float) -> tuple[dict, dict]:
    core, topo, n = sim.core, sim.topology, sim.workload.n
    order = np.asarray(core.arrival_order(), dtype=np.int64)
    ordered = {}
    for k in _PER_REQ:                     # one column at a time: the unordered copy is dropped
        v = sim.table.columns((k,))[k]
        ordered[k] = v[order] if v.shape[0] == n else v
    tp = topo.config["tensor_parallel_size"] * topo.config["dp_size"]
    pools: dict[str, Any] = dict(num_workers=topo.num_workers, gpus_per_worker=tp)
    if topo.decode_config is not None:
        d = topo.decode_config
        pools = dict(num_workers=topo.num_decode_workers,
                     gpus_per_worker=d["tensor_parallel_size"] * d["dp_size"],
                     prefill_workers=topo.num_workers, prefill_gpus_per_worker=tp)
    sla = {k[4:]: opts.values[k] for k in ("sla_ttft_ms", "sla_itl_ms", "sla_e2e_ms")
           if opts.values[k] is not None}
    summary = build_summary(ordered, num_requests=core.arrived, committed_prefill=core.committed_prefill,
                            sim_end_ms=core.now_ms, wall_time_ms=wall_ms, itl=core.itl_summary(),
                            tput=core.throughput_summary(), max_sim_time_ms=cap, sla=sla, **pools)
    max_len = (topo.decode_config or topo.config)["engine"]["max_model_len"]
    outcome = build_outcome(ordered, cap, core.arrived, summary["completed_requests"], max_len)
    return summary, outcome


def run_trace_replay(trace_files: str | os.PathLike | Iterable, extra_engine_args: Any = None,
                     **options: Any) -> ReplayResult:
    t0 = time.perf_counter()
    opts = check_options(TRACE, dict(options, extra_engine_args=extra_engine_args), "run_trace_replay")
    topology = _topology(opts)
    if isinstance(trace_files, (str, os.PathLike)):
        trace_files = [trace_files]
    files = list(trace_files)
    if not files:
        raise ReplayError("at least one trace file is required", "trace_files")

    def load() -> Workload:
        return load_mooncake(files, 512 if opts.trace_block_size is None else opts.trace_block_size,
                             opts.trace_format, opts.arrival_speedup_ratio,
                             timestamps_required=opts.replay_concurrency is None,
                             name_sessions=opts.replay_concurrency is not None,
                             progress=_phase(opts.progress, "load"))
    names = ", ".join(os.fspath(f) for f in files[:3]) + (", ..." if len(files) > 3 else "")
    return _replay(opts, topology, load, t0, f"trace {names}")


def run_synthetic_trace_replay(input_tokens: int, output_tokens: int, request_count: int,
                               extra_engine_args: Any = None, **options: Any) -> ReplayResult:
    t0 = time.perf_counter()
    opts = check_options(SYNTHETIC, dict(options, extra_engine_args=extra_engine_args),
                         "run_synthetic_trace_replay")
    topology = _topology(opts)
    v = opts.values

    def build() -> Workload:
        return synthetic_workload(input_tokens, output_tokens, request_count, topology.block_size,
                                  replay_concurrency=v["replay_concurrency"], request_rate=v["request_rate"],
                                  arrival_interval_ms=v["arrival_interval_ms"], arrival_seed=v["arrival_seed"],
                                  turns_per_session=v["turns_per_session"],
                                  shared_prefix_ratio=v["shared_prefix_ratio"],
                                  num_prefix_groups=v["num_prefix_groups"],
                                  inter_turn_delay_ms=v["inter_turn_delay_ms"],
                                  arrival_speedup_ratio=v["arrival_speedup_ratio"])
    if v["replay_concurrency"] is not None:
        arrivals = f"concurrency {v['replay_concurrency']}"
    elif v["request_rate"] is not None:
        arrivals = f"{v['request_rate']:g} req/s (seed {v['arrival_seed']})"
    else:
        arrivals = f"every {v['arrival_interval_ms']} ms"
    what = f"synthetic {input_tokens}/{output_tokens} tokens, {arrivals}"
    return _replay(opts, topology, build, t0, what)


_COMMON = """
Returns a :class:`ReplayResult`: ``.summary`` (the reference's keys; ``wall_time_ms`` is the real
time from the call to the end of the simulation: loading the workload and simulating, not writing
per-request records), ``.per_request`` (with ``capture_per_request=True``), ``.outcome`` and
``.description``.  Invalid input raises a ``mocker.errors.MockerError`` (a ``ValueError``) naming
the argument, field, file or line, before the simulation starts.

Keywords:
"""
run_trace_replay.__doc__ = ("Replay mooncake JSONL trace file(s) on a virtual clock and report like the "
                            "reference.\n" + _COMMON + options_doc(TRACE))
run_synthetic_trace_replay.__doc__ = ("Replay a synthetic workload (fixed input/output lengths; Poisson, "
                                      "constant or closed-loop arrivals; sessions; shared prefixes).\n"
                                      + _COMMON + options_doc(SYNTHETIC))
