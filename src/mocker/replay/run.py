"""Replay entry points mirroring the reference's ``run_mocker_trace_replay`` /
``run_mocker_synthetic_trace_replay`` (same keyword names, same report)."""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable, Iterable

import numpy as np

from mocker._core.replay import ReplayCore, ReplayInvariantError
from mocker._core.router import KvRouter
from mocker._core.table import ReqTable
from mocker._core.sglang import SglangRank
from mocker._core.vllm import VllmRank
from mocker.config import ConfigError, load_config, normalize_router_config
from mocker.replay.report import ReplayResult, build_records, build_summary
from mocker.replay.synthetic import build_synthetic_workload
from mocker.replay.traces import TraceError, Workload, load_mooncake

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "ReplayError", "simulate"]


class ReplayError(ValueError):
    """Invalid replay arguments (the message names the argument)."""


ProgressFn = Callable[[float, int, int, bool], None]   # (sim_time_ms, done, total, finished)


def _num(f: float) -> str:
    """Format a number the way the reference's messages do (``-1``, ``0``, ``2.5``)."""
    return str(int(f)) if math.isfinite(f) and f.is_integer() else repr(f)


def _check_common(num_workers, replay_concurrency, router_mode, arrival_speedup_ratio,
                  max_sim_time_ms, sla_ttft_ms, sla_itl_ms, sla_e2e_ms, prefill_engine_args,
                  decode_engine_args):
    if router_mode not in ("round_robin", "kv_router"):
        raise ReplayError(f"router_mode must be either 'round_robin' or 'kv_router', got {router_mode!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ReplayError("invalid replay spec: aggregated pool must start with at least one worker")
    if replay_concurrency is not None and (isinstance(replay_concurrency, bool)
                                           or not isinstance(replay_concurrency, int)
                                           or replay_concurrency < 1):
        raise ReplayError("replay_concurrency must be at least 1")
    if replay_concurrency is not None:
        r = 1.0        # closed loop: timestamps and delays are not scaled (the reference ignores it)
    else:
        try:
            r = float(arrival_speedup_ratio)
        except (TypeError, ValueError):
            r = float("nan")
        if not math.isfinite(r) or r <= 0:
            raise ReplayError("arrival_speedup_ratio must be a finite positive number, "
                              f"got {_num(r) if math.isfinite(r) else repr(arrival_speedup_ratio)}")
    if max_sim_time_ms is not None:
        m = float(max_sim_time_ms)
        if not math.isfinite(m) or m < 0:
            raise ReplayError("max_sim_time_ms must be a finite, non-negative value")
    sla = {}
    for name, v in (("ttft_ms", sla_ttft_ms), ("itl_ms", sla_itl_ms), ("e2e_ms", sla_e2e_ms)):
        if v is not None:
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ReplayError(f"sla_{name} must be a number, got {v!r}") from None
            if not math.isfinite(f) or f < 0:
                raise ReplayError(f"sla_{name} must be a finite, non-negative value, got {_num(f)}")
            if f == 0:
                raise ReplayError(f"invalid replay spec: sla.{name} must be finite and positive, got {_num(f)}")
            sla[name] = f
    if "e2e_ms" in sla and ("ttft_ms" in sla or "itl_ms" in sla):
        raise ReplayError("invalid replay spec: sla.e2e_ms is mutually exclusive with sla.ttft_ms/itl_ms")
    return r, sla


def _build_ranks(config: dict, table: ReqTable, num_workers: int, kv_events: bool = False,
                 role: str = "aggregated") -> list:
    engine = config["engine"]
    if kv_events and not engine["emit_kv_events"]:
        engine = dict(engine, emit_kv_events=True)     # the router consumes the workers' events
    if engine["prefill_schedule_interval"] != 1 and engine["backend"] != "vllm":
        raise ConfigError("prefill_schedule_interval is supported only for backend=vllm; "
                          "use prefill_decode_interval for backend=sglang")
    if engine["worker_type"] != role:
        got = engine["worker_type"].capitalize()
        if role == "aggregated":
            raise ConfigError(f"offline replay only supports aggregated workers, got {got}")
        raise ConfigError(f"offline disaggregated replay requires {role}_engine_args.worker_type={role}, got {got}")
    if engine["aic_nextn"] is not None:
        raise ConfigError("engine.aic_nextn (speculative decoding) is not supported by mocker yet")
    # a worker is dp_size ranks, each a whole scheduler with its own KV pool
    if engine["backend"] == "sglang":
        dp = config["dp_size"]
        if dp > 1 and engine["sglang"]["chunked_prefill_size"] // dp == 0:
            raise ConfigError(f"engine error: constructing attention-DP rank 0: SGLang attention DP size {dp} "
                              f"reduces chunked_prefill_size={engine['sglang']['chunked_prefill_size']} to zero")
        return [SglangRank(table, engine, dp) for _ in range(num_workers * dp)]
    return [VllmRank(table, engine) for _ in range(num_workers * config["dp_size"])]


def _count(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ReplayError(f"{name} must be a non-negative integer, got {v!r}")
    return v


def _engine_configs(extra_engine_args, prefill_engine_args, decode_engine_args, num_workers,
                    num_prefill_workers, num_decode_workers) -> tuple:
    """(config, decode_config or None, workers of the first pool, decode workers)."""
    if prefill_engine_args is None and decode_engine_args is None:
        return load_config(extra_engine_args), None, num_workers, 0
    if prefill_engine_args is None or decode_engine_args is None:
        raise ReplayError("prefill_engine_args and decode_engine_args must be provided together")
    if extra_engine_args is not None:
        raise ReplayError("extra_engine_args cannot be combined with prefill_engine_args/decode_engine_args")
    if num_workers != 1:
        raise ReplayError("num_workers is only used for aggregated replay; use num_prefill_workers "
                          "and num_decode_workers for disagg replay")
    npw = _count("num_prefill_workers", num_prefill_workers)
    ndw = _count("num_decode_workers", num_decode_workers)
    pcfg = load_config(prefill_engine_args)
    dcfg = load_config(decode_engine_args)
    for role, cfg in (("prefill", pcfg), ("decode", dcfg)):
        if cfg["engine"]["worker_type"] != role:
            raise ReplayError(f"offline disaggregated replay requires {role}_engine_args.worker_type={role}, "
                              f"got {cfg['engine']['worker_type'].capitalize()}")
    if npw == 0:
        raise ReplayError("invalid replay spec: prefill pool must start with at least one worker")
    if ndw == 0:
        raise ReplayError("invalid replay spec: decode pool must start with at least one worker")
    pe, de = pcfg["engine"], dcfg["engine"]
    if pe["block_size"] != de["block_size"]:
        raise ReplayError("offline disaggregated replay requires matching prefill/decode block_size, "
                          f"got {pe['block_size']} and {de['block_size']}")
    if pe["backend"] != de["backend"]:
        raise ReplayError("replay invariant violated: offline disaggregated replay requires matching "
                          "backend engine types")
    return pcfg, dcfg, npw, ndw


def _router_settings(router_mode: str, router_config: Any, kv_event_lag_ms: Any) -> dict | None:
    """The normalized router config for kv_router placement (None for round robin)."""
    if kv_event_lag_ms is not None:
        try:
            lag = float(kv_event_lag_ms)
        except (TypeError, ValueError):
            lag = math.nan
        if not math.isfinite(lag) or lag < 0:
            raise ReplayError(f"kv_event_lag_ms must be a finite, non-negative value, got {kv_event_lag_ms!r}")
    cfg = normalize_router_config(router_config)
    return cfg if router_mode == "kv_router" else None


class _Simulation:
    """A finished simulation: the request table, the ranks and the replay core."""

    def __init__(self, table, ranks, core, workload):
        self.table, self.ranks, self.core, self.workload = table, ranks, core, workload


def simulate(workload: Workload, config: dict, *, num_workers: int = 1, concurrency: int | None = None,
             max_sim_time_ms: float | None = None, progress: ProgressFn | None = None,
             router: dict | None = None, kv_event_lag_ms: float | None = None,
             decode_config: dict | None = None, num_decode_workers: int = 1) -> _Simulation:
    """Run the compiled event loop over ``workload`` (no report); used by the entry points and tests.

    ``router``: a normalized router config (``normalize_router_config``) to place requests with
    the KV-aware router; None places them round robin.  ``decode_config``: disaggregated
    replay, ``config`` then being the prefill pool's (``num_workers`` prefill workers).
    """
    engine = config["engine"]
    table = ReqTable(workload.n, engine["block_size"])
    cap = math.inf if max_sim_time_ms is None else float(max_sim_time_ms)
    lag = float(kv_event_lag_ms or 0.0)
    kv_router = None
    disagg = None
    if decode_config is None:
        ranks = _build_ranks(config, table, num_workers, kv_events=router is not None)
        if router is not None:
            # every (worker, dp rank) is a routing target with its own cache and load
            kv_router = KvRouter(table, len(ranks), engine["block_size"], router, lag)
    else:
        prefill = _build_ranks(config, table, num_workers, kv_events=router is not None, role="prefill")
        decode = _build_ranks(decode_config, table, num_decode_workers, role="decode")
        ranks = prefill + decode
        decode_router = None
        if router is not None:
            # prefill router: load and overlap, no decode term; decode router: active blocks
            # (never shared) and requests, no overlap, no prefill load
            kv_router = KvRouter(table, len(prefill), engine["block_size"],
                                 dict(router, router_track_active_blocks=False), lag)
            decode_router = KvRouter(table, len(decode), engine["block_size"],
                                     dict(router, overlap_score_credit=0.0, router_assume_kv_reuse=False,
                                          router_track_prefill_tokens=False, router_track_active_blocks=True,
                                          router_seed=router["router_seed"] + 1), lag)
        disagg = {"prefill_workers": num_workers, "prefill_dp": config["dp_size"],
                  "decode_workers": num_decode_workers, "decode_dp": decode_config["dp_size"],
                  "decode_interval": decode_config["engine"]["prefill_schedule_interval"],
                  "decode_router": decode_router,
                  "bytes_per_token": float(engine["kv_transfer_bytes_per_token"] or 0),
                  "bandwidth_gbps": float(engine["kv_transfer_bandwidth"] or 0.0),
                  "destination_missing": engine["kv_transfer_timing_mode"] == "destination_missing",
                  # SGLang hands off destination first: the decode rank reserves at arrival
                  "destination_first": engine["backend"] == "sglang"}
    core = ReplayCore(table, ranks, workload.columns(), concurrency or 0, cap, workload.delta, kv_router,
                      config["dp_size"], engine["prefill_schedule_interval"], disagg)
    slice_passes = 20000
    last_report = time.perf_counter()
    while True:
        fin = core.advance(slice_passes)
        if progress is not None:
            now = time.perf_counter()
            if fin or now - last_report > 0.1:
                progress(core.now_ms, core.terminal, workload.n, fin)
                last_report = now
        if fin:
            break
    sim = _Simulation(table, ranks, core, workload)
    sim.router = kv_router
    return sim


def _execute(workload: Workload, config: dict, *, num_workers: int, concurrency: int | None,
             max_sim_time_ms: float | None, sla: dict, capture_per_request: bool,
             report_jsonl_path, progress: ProgressFn | None, t0: float,
             router: dict | None = None, kv_event_lag_ms: float | None = None,
             decode_config: dict | None = None, num_decode_workers: int = 1) -> ReplayResult:
    sim = simulate(workload, config, num_workers=num_workers, concurrency=concurrency,
                   max_sim_time_ms=max_sim_time_ms, progress=progress, router=router,
                   kv_event_lag_ms=kv_event_lag_ms, decode_config=decode_config,
                   num_decode_workers=num_decode_workers)
    core = sim.core
    cap = math.inf if max_sim_time_ms is None else float(max_sim_time_ms)
    cols = sim.table.columns()
    order = np.asarray(core.arrival_order(), dtype=np.int64)
    ordered = {k: (v[order] if k in _PER_REQ and v.shape[0] == workload.n else v) for k, v in cols.items()}
    wall_ms = (time.perf_counter() - t0) * 1000.0
    tp = config["tensor_parallel_size"] * config["dp_size"]
    pools = dict(num_workers=num_workers, gpus_per_worker=tp)
    if decode_config is not None:
        pools = dict(num_workers=num_decode_workers,
                     gpus_per_worker=decode_config["tensor_parallel_size"] * decode_config["dp_size"],
                     prefill_workers=num_workers, prefill_gpus_per_worker=tp)
    summary = build_summary(ordered, num_requests=core.arrived, committed_prefill=core.committed_prefill,
                            sim_end_ms=core.now_ms,
                            wall_time_ms=wall_ms, itl=core.itl_summary(), tput=core.throughput_summary(),
                            max_sim_time_ms=cap, sla=sla, **pools)
    records = None
    if capture_per_request or report_jsonl_path is not None:
        overlap = None if sim.router is None else sim.router.overlap_tokens()
        if decode_config is None:
            records = build_records(cols, order, workload.session_id, workload.turn_index, cap,
                                    dp_size=config["dp_size"], route_overlap_tokens=overlap)
        else:
            records = build_records(cols, order, workload.session_id, workload.turn_index, cap,
                                    dp_size=decode_config["dp_size"], route_overlap_tokens=overlap,
                                    prefill_dp_size=config["dp_size"])
        if report_jsonl_path is not None:
            import json
            with open(report_jsonl_path, "w", encoding="utf-8") as fh:
                for rec in records:
                    fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return ReplayResult(summary, records if capture_per_request else None)


_PER_REQ = {"arrival_time_ms", "input_length", "requested_output_length", "status", "worker",
            "first_admit_ms", "first_token_ms", "second_token_ms", "last_token_ms",
            "terminal_time_ms", "output_length", "reused_first", "reused_max", "reused_dec",
            "admissions"}


def run_trace_replay(trace_files: str | os.PathLike | Iterable, extra_engine_args: Any = None, *,
                     num_workers: int = 1, replay_concurrency: int | None = None,
                     router_mode: str = "round_robin", arrival_speedup_ratio: float = 1.0,
                     trace_block_size: int | None = None, trace_format: str = "mooncake",
                     max_sim_time_ms: float | None = None, sla_ttft_ms: float | None = None,
                     sla_itl_ms: float | None = None, sla_e2e_ms: float | None = None,
                     capture_per_request: bool = False, report_jsonl_path=None,
                     prefill_engine_args: Any = None, decode_engine_args: Any = None,
                     num_prefill_workers: int = 1, num_decode_workers: int = 1,
                     router_config: Any = None, kv_event_lag_ms: float | None = None,
                     progress: ProgressFn | None = None) -> ReplayResult:
    """Replay mooncake JSONL trace(s) on a virtual clock and report like the reference."""
    t0 = time.perf_counter()
    ratio, sla = _check_common(num_workers, replay_concurrency, router_mode, arrival_speedup_ratio,
                               max_sim_time_ms, sla_ttft_ms, sla_itl_ms, sla_e2e_ms,
                               prefill_engine_args, decode_engine_args)
    config, decode_config, num_workers, num_decode_workers = _engine_configs(
        extra_engine_args, prefill_engine_args, decode_engine_args, num_workers,
        num_prefill_workers, num_decode_workers)
    router = _router_settings(router_mode, router_config, kv_event_lag_ms)
    if isinstance(trace_files, (str, os.PathLike)):
        trace_files = [trace_files]
    trace_files = list(trace_files)
    if not trace_files:
        raise ReplayError("at least one trace file is required")
    workload = load_mooncake(trace_files, 512 if trace_block_size is None else trace_block_size,
                             trace_format, ratio, timestamps_required=replay_concurrency is None,
                             name_sessions=replay_concurrency is not None)
    return _execute(workload, config, num_workers=num_workers, concurrency=replay_concurrency,
                    max_sim_time_ms=max_sim_time_ms, sla=sla, capture_per_request=capture_per_request,
                    report_jsonl_path=report_jsonl_path, progress=progress, t0=t0,
                    router=router, kv_event_lag_ms=kv_event_lag_ms, decode_config=decode_config,
                    num_decode_workers=num_decode_workers)


def run_synthetic_trace_replay(input_tokens: int, output_tokens: int, request_count: int,
                               extra_engine_args: Any = None, *, num_workers: int = 1,
                               replay_concurrency: int | None = None, router_mode: str = "round_robin",
                               arrival_speedup_ratio: float = 1.0, request_rate: float | None = None,
                               arrival_interval_ms: float | None = None, arrival_seed: int = 42,
                               turns_per_session: int = 1, shared_prefix_ratio: float = 0.0,
                               num_prefix_groups: int = 0, inter_turn_delay_ms: float = 0.0,
                               max_sim_time_ms: float | None = None, sla_ttft_ms: float | None = None,
                               sla_itl_ms: float | None = None, sla_e2e_ms: float | None = None,
                               capture_per_request: bool = False, report_jsonl_path=None,
                               prefill_engine_args: Any = None, decode_engine_args: Any = None,
                               num_prefill_workers: int = 1, num_decode_workers: int = 1,
                               router_config: Any = None, kv_event_lag_ms: float | None = None,
                               progress: ProgressFn | None = None) -> ReplayResult:
    """Replay a synthetic workload (fixed ISL/OSL, Poisson or constant arrivals, sessions)."""
    t0 = time.perf_counter()
    ratio, sla = _check_common(num_workers, replay_concurrency, router_mode, arrival_speedup_ratio,
                               max_sim_time_ms, sla_ttft_ms, sla_itl_ms, sla_e2e_ms,
                               prefill_engine_args, decode_engine_args)
    config, decode_config, num_workers, num_decode_workers = _engine_configs(
        extra_engine_args, prefill_engine_args, decode_engine_args, num_workers,
        num_prefill_workers, num_decode_workers)
    router = _router_settings(router_mode, router_config, kv_event_lag_ms)
    bs = config["engine"]["block_size"]
    syn = build_synthetic_workload(input_tokens, output_tokens, request_count, bs,
                                   replay_concurrency=replay_concurrency, request_rate=request_rate,
                                   arrival_interval_ms=arrival_interval_ms, arrival_seed=arrival_seed,
                                   turns_per_session=turns_per_session,
                                   shared_prefix_ratio=shared_prefix_ratio,
                                   num_prefix_groups=num_prefix_groups,
                                   inter_turn_delay_ms=inter_turn_delay_ms,
                                   arrival_speedup_ratio=ratio, materialize_ids=False)
    workload = _synthetic_to_workload(syn, bs, ratio)
    return _execute(workload, config, num_workers=num_workers, concurrency=replay_concurrency,
                    max_sim_time_ms=max_sim_time_ms, sla=sla, capture_per_request=capture_per_request,
                    report_jsonl_path=report_jsonl_path, progress=progress, t0=t0,
                    router=router, kv_event_lag_ms=kv_event_lag_ms, decode_config=decode_config,
                    num_decode_workers=num_decode_workers)


def _synthetic_to_workload(syn, bs: int, ratio: float) -> Workload:
    """Synthetic rows → workload columns, prompts as range runs (no per-block id arrays).

    A prompt is the session's shared-prefix blocks (ids ``group, 0..shared``) followed by
    fresh ids counting up from 1 in request order, one id per engine block: at most two
    runs per request whatever the prompt length.
    """
    n = syn.num_requests
    in_len = np.asarray(syn.input_len, dtype=np.int64)
    nb = (in_len + bs - 1) // bs
    shared = int(syn.shared_blocks)
    n_unique = nb - shared
    sess = np.asarray(syn.session_id, dtype=np.int64)
    turn = np.asarray(syn.turn_index, dtype=np.int64)
    groups = np.asarray(syn.prefix_group, dtype=np.int64)
    shared_tok = np.minimum(in_len, shared * bs)
    uniq_tok = in_len - shared_tok
    first_unique = 1 + np.concatenate(([0], np.cumsum(n_unique)[:-1])).astype(np.uint64)
    has_shared = shared_tok > 0
    has_unique = uniq_tok > 0
    counts = has_shared.astype(np.int64) + has_unique.astype(np.int64)
    run_off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    m = int(run_off[-1])
    run_v = np.empty(m, dtype=np.uint64)
    run_n = np.empty(m, dtype=np.int64)
    pos = run_off[:-1]
    if shared:
        g = groups[sess].astype(np.uint64)
        # shared-prefix token values live apart from the fresh ids (below 2**62)
        run_v[pos[has_shared]] = (np.uint64(1) << np.uint64(62)) | (g[has_shared] << np.uint64(32))
        run_n[pos[has_shared]] = shared_tok[has_shared]
    upos = pos + has_shared.astype(np.int64)
    run_v[upos[has_unique]] = first_unique[has_unique]
    run_n[upos[has_unique]] = uniq_tok[has_unique]
    run_kind = np.full(m, 2, dtype=np.int8)                 # RUN_RANGE
    run_start = np.full(m, bs, dtype=np.int64)              # tokens per id
    next_turn = np.full(n, -1, dtype=np.int32)
    same = (sess[1:] == sess[:-1]) & (turn[1:] == turn[:-1] + 1)
    next_turn[:-1][same] = np.arange(1, n, dtype=np.int32)[same]
    delay = np.where(turn > 0, syn.inter_turn_delay_ms / ratio, 0.0).astype(np.float64)
    heads = np.nonzero(turn == 0)[0].astype(np.int32)
    head_arr = np.asarray(syn.arrival_ms, dtype=np.float64)[heads]
    head_arr = np.where(np.isnan(head_arr), 0.0, head_arr) / ratio
    if syn.session_mode:
        session_id = [f"session_{int(s)}" for s in sess]
        turn_index = [int(t) for t in turn]
    else:
        session_id = turn_index = [None] * n
    return Workload(
        n=n, input_length=in_len, output_length=np.asarray(syn.output_len, dtype=np.int64),
        run_off=run_off, run_kind=run_kind, run_v=run_v, run_start=run_start, run_n=run_n,
        next_turn=next_turn, delay_ms=delay, session_heads=heads, head_arrival_ms=head_arr,
        session_id=session_id, turn_index=turn_index, delta=False)
