"""Every replay option in one table: its default, its help, and which workloads it applies to.

``run_trace_replay``, ``run_synthetic_trace_replay`` and ``mocker replay`` all read this table:
adding an option is one ``Option(...)`` line here plus the code that uses it.  ``check_options``
turns keyword arguments into a validated :class:`Options` (names as the reference's keywords;
the command line shows them as ``--flags``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mocker.errors import ReplayError

__all__ = ["Option", "OPTIONS", "Options", "check_options", "flag", "options_doc"]

TRACE, SYNTHETIC = "trace", "synthetic"
BOTH = frozenset((TRACE, SYNTHETIC))


@dataclass(frozen=True)
class Option:
    name: str                     # keyword of the replay functions
    default: Any
    help: str
    group: str                    # heading in ``mocker replay --help``
    kind: str = "str"             # int | count | float | bool | str | json | path | choice | callable
    modes: frozenset = BOTH       # workloads the option applies to
    choices: tuple = ()
    metavar: str | None = None
    cli: bool = True              # offered as a --flag


_G_TRACE = "trace options"
_G_ENGINE = "engine and cluster"
_G_ARRIVAL = "arrivals and limits"
_G_SLA = "SLAs (goodput)"
_G_SYN = "synthetic workload (when no TRACE is given)"
_G_OUT = "output"

OPTIONS: tuple[Option, ...] = (
    Option("trace_format", "mooncake", "trace row format; mooncake-delta rows hold only the new "
           "input of each turn", _G_TRACE, "choice", frozenset((TRACE,)),
           choices=("mooncake", "mooncake-delta")),
    Option("trace_block_size", None, "tokens per trace hash id (default 512)", _G_TRACE, "int",
           frozenset((TRACE,)), metavar="N"),
    Option("extra_engine_args", None, 'engine config: inline JSON or a JSON file '
           '({"engine": {...}, "dp_size": N} or the flat form)', _G_ENGINE, "json",
           metavar="JSON_OR_PATH"),
    Option("num_workers", 1, "aggregated workers", _G_ENGINE, "int", metavar="N"),
    Option("router_mode", "round_robin", "how requests are placed on workers", _G_ENGINE, "choice",
           choices=("round_robin", "kv_router")),
    Option("router_config", None, "KV router settings, inline JSON or a file (overlap_score_credit, "
           "prefill_load_scale, decode_active_request_weight, router_temperature, router_seed, ...); "
           "kv_router only", _G_ENGINE, "json", metavar="JSON_OR_PATH"),
    Option("kv_event_lag_ms", None, "delay before a worker's KV events reach the router; kv_router "
           "only (default 0)", _G_ENGINE, "float", metavar="MS"),
    Option("prefill_engine_args", None, "disaggregated: prefill pool engine config "
           "(worker_type prefill)", _G_ENGINE, "json", metavar="JSON_OR_PATH"),
    Option("decode_engine_args", None, "disaggregated: decode pool engine config "
           "(worker_type decode)", _G_ENGINE, "json", metavar="JSON_OR_PATH"),
    Option("num_prefill_workers", 1, "disaggregated: prefill workers", _G_ENGINE, "int", metavar="N"),
    Option("num_decode_workers", 1, "disaggregated: decode workers", _G_ENGINE, "int", metavar="N"),
    Option("arrival_speedup_ratio", 1.0, "divides arrival times and inter-turn delays "
           "(open loop only)", _G_ARRIVAL, "float", metavar="X"),
    Option("replay_concurrency", None, "closed loop: keep N requests (sessions) in flight, "
           "timestamps ignored", _G_ARRIVAL, "int", metavar="N"),
    Option("max_sim_time_ms", None, "stop the simulation at this simulated time", _G_ARRIVAL,
           "float", metavar="MS"),
    Option("sla_ttft_ms", None, "goodput: time-to-first-token SLA", _G_SLA, "float", metavar="MS"),
    Option("sla_itl_ms", None, "goodput: inter-token latency SLA", _G_SLA, "float", metavar="MS"),
    Option("sla_e2e_ms", None, "goodput: end-to-end SLA (excludes the other two)", _G_SLA, "float",
           metavar="MS"),
    Option("request_rate", None, "Poisson arrivals, requests per second", _G_SYN, "float",
           frozenset((SYNTHETIC,)), metavar="RPS"),
    Option("arrival_interval_ms", None, "constant gap between arrivals (0 = all at once)", _G_SYN,
           "float", frozenset((SYNTHETIC,)), metavar="MS"),
    Option("arrival_seed", 42, "seed of the Poisson arrivals", _G_SYN, "int", frozenset((SYNTHETIC,)),
           metavar="N"),
    Option("turns_per_session", 1, "turns per session", _G_SYN, "int", frozenset((SYNTHETIC,)),
           metavar="N"),
    Option("inter_turn_delay_ms", 0.0, "delay between a turn's completion and the next turn", _G_SYN,
           "float", frozenset((SYNTHETIC,)), metavar="MS"),
    Option("shared_prefix_ratio", 0.0, "fraction of each prompt shared within its prefix group",
           _G_SYN, "float", frozenset((SYNTHETIC,)), metavar="X"),
    Option("num_prefix_groups", 0, "prefix groups the sessions are drawn into", _G_SYN, "int",
           frozenset((SYNTHETIC,)), metavar="N"),
    Option("report_jsonl_path", None, "write one record per request (JSON lines)", _G_OUT, "path",
           metavar="PATH"),
    Option("capture_per_request", False, "return the per-request records in .per_request", _G_OUT,
           "bool", cli=False),
    Option("progress", None, "progress callback: progress(phase, done, total, sim_ms)", _G_OUT,
           "callable", cli=False),
)
BY_NAME = {o.name: o for o in OPTIONS}
# the command line spells report_jsonl_path as --report-jsonl (the reference's CLI does)
_FLAGS = {"report_jsonl_path": "--report-jsonl"}


def flag(name: str) -> str:
    """The command-line spelling of an option."""
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def options_doc(mode: str) -> str:
    """The keyword list of one replay function, for its docstring."""
    return "\n".join(f"    {o.name} (default {o.default!r}): {o.help}" for o in OPTIONS if mode in o.modes)


@dataclass
class Options:
    """Validated options of one replay; ``given`` holds the names the caller set."""
    values: dict
    given: frozenset

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


def _num(f: float) -> str:
    """A number as the reference's messages print it (``-1``, ``0``, ``2.5``)."""
    return str(int(f)) if math.isfinite(f) and f.is_integer() else repr(f)


def _as_float(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            return float(v)
        except (TypeError, ValueError):
            raise ReplayError(f"{name} must be a number, got {v!r}", name) from None
    try:
        return float(v)
    except OverflowError:
        raise ReplayError(f"{name} must be a finite number, got {v!r}", name) from None


def _finite_nonneg(name: str, value: Any) -> float:
    """``value`` as a float, or the reference's "finite, non-negative value" error."""
    f = _as_float(name, value)
    if not math.isfinite(f) or f < 0:
        raise ReplayError(f"{name} must be a finite, non-negative value, got {_num(f)}", name)
    return f


def _as_int(name: str, v: Any, minimum: int, words: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ReplayError(f"{name} must be an integer, got {v!r}", name)
    if v < minimum:
        raise ReplayError(f"{name} must be {words}, got {v}", name)
    return v


def check_options(mode: str, kwargs: dict, func: str) -> Options:
    """Validate the keyword arguments of a replay function (``mode`` trace or synthetic).

    Unknown keywords raise ``TypeError`` as Python would; options of the other workload kind
    and options without an effect in the chosen placement are refused with ``ReplayError``.
    Messages that the reference has keep its wording.
    """
    for k in kwargs:
        if k not in BY_NAME:
            raise TypeError(f"{func}() got an unexpected keyword argument {k!r}")
        if mode not in BY_NAME[k].modes:
            other = "synthetic workloads" if mode == TRACE else "trace replay"
            raise ReplayError(f"{k} applies only to {other}", k)
    v = {o.name: kwargs.get(o.name, o.default) for o in OPTIONS if mode in o.modes}
    given = frozenset(k for k in kwargs if kwargs[k] is not None)

    if v["router_mode"] not in ("round_robin", "kv_router"):
        raise ReplayError(f"router_mode must be either 'round_robin' or 'kv_router', got {v['router_mode']!r}",
                          "router_mode")
    nw = v["num_workers"]
    if isinstance(nw, bool) or not isinstance(nw, int) or nw < 1:
        raise ReplayError("invalid replay spec: aggregated pool must start with at least one worker",
                          "num_workers")
    for name in ("num_prefill_workers", "num_decode_workers"):
        n = v[name]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ReplayError(f"{name} must be a non-negative integer, got {n!r}", name)
    rc = v["replay_concurrency"]
    if rc is not None and (isinstance(rc, bool) or not isinstance(rc, int) or rc < 1):
        raise ReplayError("replay_concurrency must be at least 1", "replay_concurrency")
    if rc is None:
        r = _as_float("arrival_speedup_ratio", v["arrival_speedup_ratio"])
        if not math.isfinite(r) or r <= 0:
            raise ReplayError(f"arrival_speedup_ratio must be a finite positive number, got {_num(r)}",
                              "arrival_speedup_ratio")
        v["arrival_speedup_ratio"] = r
    elif "arrival_speedup_ratio" in given and v["arrival_speedup_ratio"] != 1.0:
        raise ReplayError("arrival_speedup_ratio has no effect with replay_concurrency (closed loop: "
                          "arrival times are not used)", "arrival_speedup_ratio")
    else:
        v["arrival_speedup_ratio"] = 1.0
    for name in ("max_sim_time_ms", "kv_event_lag_ms"):
        if v[name] is not None:
            v[name] = _finite_nonneg(name, v[name])
    for name in ("sla_ttft_ms", "sla_itl_ms", "sla_e2e_ms"):
        if v[name] is None:
            continue
        f = _finite_nonneg(name, v[name])
        short = name[4:]
        if f == 0:
            raise ReplayError(f"invalid replay spec: sla.{short} must be finite and positive, got {_num(f)}",
                              name)
        v[name] = f
    if v["sla_e2e_ms"] is not None and (v["sla_ttft_ms"] is not None or v["sla_itl_ms"] is not None):
        raise ReplayError("invalid replay spec: sla.e2e_ms is mutually exclusive with sla.ttft_ms/itl_ms",
                          "sla_e2e_ms")
    # options without an effect in the chosen placement are refused, not ignored
    if v["router_mode"] != "kv_router":
        for name in ("router_config", "kv_event_lag_ms"):
            if name in given:
                raise ReplayError(f"{name} has no effect with round-robin placement; it applies to "
                                  "router_mode kv_router", name)
    disagg = v["prefill_engine_args"] is not None or v["decode_engine_args"] is not None
    if not disagg:
        for name in ("num_prefill_workers", "num_decode_workers"):
            if name in given and v[name] != 1:
                raise ReplayError(f"{name} applies only to disaggregated replay (give "
                                  "prefill_engine_args and decode_engine_args)", name)
    if v["progress"] is not None and not callable(v["progress"]):
        raise ReplayError(f"progress must be callable, got {v['progress']!r}", "progress")
    if mode == SYNTHETIC:
        # the reference accepts these out of range when they cannot matter (one turn); mocker
        # refuses them always, so a typo never passes silently
        t = v["turns_per_session"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ReplayError(f"turns_per_session must be at least 1, got {t!r}", "turns_per_session")
        d = _as_float("inter_turn_delay_ms", v["inter_turn_delay_ms"])
        if not math.isfinite(d) or d < 0:
            raise ReplayError(f"inter_turn_delay_ms must be a finite non-negative number, got {_num(d)}",
                              "inter_turn_delay_ms")
        r = _as_float("shared_prefix_ratio", v["shared_prefix_ratio"])
        if not 0.0 <= r <= 1.0:
            raise ReplayError(f"shared_prefix_ratio must be between 0.0 and 1.0, got {_num(r)}",
                              "shared_prefix_ratio")
    if mode == TRACE and v["trace_block_size"] is not None:
        tbs = v["trace_block_size"]
        if isinstance(tbs, bool) or not isinstance(tbs, int) or tbs <= 0:
            raise ReplayError("trace_block_size must be greater than 0", "trace_block_size")
    return Options(v, given)
