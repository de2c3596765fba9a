"""Command line: ``mocker replay`` (trace or synthetic workload on a virtual clock)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

__all__ = ["main"]


def _int_at_least(minimum: int, words: str):
    """argparse type: an integer >= ``minimum`` (``words`` says so in the error)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be {words}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1, "at least 1")
_nonneg_int = _int_at_least(0, "non-negative")


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mocker", description="GPU-free LLM serving simulator.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    r = sub.add_parser("replay", help="replay a trace or a synthetic workload on a virtual clock",
                       description="Replay mooncake JSONL trace(s), or a synthetic workload when no "
                                   "TRACE is given, and print an AIPerf-style report.")
    r.add_argument("traces", nargs="*", metavar="TRACE", help="mooncake JSONL trace file(s)")
    g = r.add_argument_group("trace options")
    g.add_argument("--trace-format", default="mooncake",
                   help="mooncake (default) or mooncake-delta")
    g.add_argument("--trace-block-size", type=_positive_int, default=None,
                   help="tokens per trace hash id (default 512)")
    e = r.add_argument_group("engine and cluster")
    e.add_argument("--extra-engine-args", default=None, metavar="JSON_OR_PATH",
                   help='engine config: inline JSON or a JSON file ({"engine": {...}} or flat)')
    e.add_argument("--num-workers", type=_positive_int, default=1)
    e.add_argument("--router-mode", default="round_robin", choices=["round_robin", "kv_router"])
    e.add_argument("--router-config", default=None, metavar="JSON_OR_PATH",
                   help="KV router settings (overlap_score_credit, prefill_load_scale, "
                        "decode_active_request_weight, router_temperature, router_seed, ...)")
    e.add_argument("--kv-event-lag-ms", type=_float, default=None,
                   help="delay before a worker's KV events reach the router")
    e.add_argument("--prefill-engine-args", default=None, metavar="JSON_OR_PATH",
                   help="disaggregated: prefill pool engine config (worker_type prefill)")
    e.add_argument("--decode-engine-args", default=None, metavar="JSON_OR_PATH",
                   help="disaggregated: decode pool engine config (worker_type decode)")
    e.add_argument("--num-prefill-workers", type=_nonneg_int, default=1)
    e.add_argument("--num-decode-workers", type=_nonneg_int, default=1)
    a = r.add_argument_group("arrivals and limits")
    a.add_argument("--arrival-speedup-ratio", type=_float, default=1.0)
    a.add_argument("--replay-concurrency", type=_positive_int, default=None,
                   help="closed-loop mode: keep N requests (sessions) in flight")
    a.add_argument("--max-sim-time-ms", type=_float, default=None)
    s = r.add_argument_group("SLAs (goodput)")
    s.add_argument("--sla-ttft-ms", type=_float, default=None)
    s.add_argument("--sla-itl-ms", type=_float, default=None)
    s.add_argument("--sla-e2e-ms", type=_float, default=None)
    y = r.add_argument_group("synthetic workload (when no TRACE is given)")
    y.add_argument("--input-tokens", type=_nonneg_int, default=None)
    y.add_argument("--output-tokens", type=_nonneg_int, default=None)
    y.add_argument("--request-count", type=_nonneg_int, default=None)
    y.add_argument("--request-rate", type=_float, default=None, help="Poisson arrivals, requests/s")
    y.add_argument("--arrival-interval-ms", type=_float, default=None, help="constant gap (0 = burst)")
    y.add_argument("--arrival-seed", type=_nonneg_int, default=42)
    y.add_argument("--turns-per-session", type=_nonneg_int, default=1)
    y.add_argument("--shared-prefix-ratio", type=_float, default=0.0)
    y.add_argument("--num-prefix-groups", type=_nonneg_int, default=0)
    y.add_argument("--inter-turn-delay-ms", type=_float, default=0.0)
    o = r.add_argument_group("output")
    o.add_argument("--report-json", default=None, metavar="PATH", help="write the summary dict")
    o.add_argument("--report-jsonl", default=None, metavar="PATH", help="write one record per request")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class _Progress:
    """A one-line progress bar on stderr (only on a terminal, only for runs past a moment)."""

    def __init__(self, enabled: bool, delay_s: float = 0.5):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.delay_s = delay_s
        self.shown = False

    def __call__(self, sim_ms: float, done: int, total: int, finished: bool) -> None:
        if not self.enabled:
            return
        if not self.shown and time.perf_counter() - self.t0 < self.delay_s:
            return
        self.shown = True
        width = 30
        frac = done / total if total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        sys.stderr.write(f"\r[{bar}] {done}/{total} requests  sim {sim_ms / 1000.0:,.1f} s  "
                         f"wall {time.perf_counter() - self.t0:,.1f} s")
        if finished:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _replay(args) -> int:
    from mocker.replay import run_synthetic_trace_replay, run_trace_replay
    from mocker.replay.report import format_table

    progress = _Progress(enabled=not args.quiet and sys.stderr.isatty())
    common = dict(extra_engine_args=args.extra_engine_args, num_workers=args.num_workers,
                  replay_concurrency=args.replay_concurrency, router_mode=args.router_mode,
                  router_config=args.router_config, kv_event_lag_ms=args.kv_event_lag_ms,
                  prefill_engine_args=args.prefill_engine_args, decode_engine_args=args.decode_engine_args,
                  num_prefill_workers=args.num_prefill_workers, num_decode_workers=args.num_decode_workers,
                  arrival_speedup_ratio=args.arrival_speedup_ratio,
                  max_sim_time_ms=args.max_sim_time_ms, sla_ttft_ms=args.sla_ttft_ms,
                  sla_itl_ms=args.sla_itl_ms, sla_e2e_ms=args.sla_e2e_ms,
                  capture_per_request=False, report_jsonl_path=args.report_jsonl,
                  progress=progress)
    synthetic_flags = [f for f in ("input_tokens", "output_tokens", "request_count", "request_rate",
                                   "arrival_interval_ms") if getattr(args, f) is not None]
    if args.traces:
        if synthetic_flags:
            raise _UsageError(f"--{synthetic_flags[0].replace('_', '-')} is for synthetic workloads; "
                              "it cannot be combined with TRACE files")
        result = run_trace_replay(args.traces, trace_block_size=args.trace_block_size,
                                  trace_format=args.trace_format, **common)
    else:
        missing = [f for f in ("input_tokens", "output_tokens", "request_count") if getattr(args, f) is None]
        if missing:
            raise _UsageError("give TRACE file(s), or a synthetic workload with --input-tokens, "
                              "--output-tokens and --request-count (missing: "
                              + ", ".join("--" + m.replace("_", "-") for m in missing) + ")")
        result = run_synthetic_trace_replay(
            args.input_tokens, args.output_tokens, args.request_count,
            request_rate=args.request_rate, arrival_interval_ms=args.arrival_interval_ms,
            arrival_seed=args.arrival_seed, turns_per_session=args.turns_per_session,
            shared_prefix_ratio=args.shared_prefix_ratio, num_prefix_groups=args.num_prefix_groups,
            inter_turn_delay_ms=args.inter_turn_delay_ms, **common)
    if args.report_json:
        with open(args.report_json, "w", encoding="utf-8") as fh:
            json.dump(result.summary, fh, indent=2)
            fh.write("\n")
    print(format_table(result.summary))
    return 0


class _UsageError(Exception):
    pass


def main(argv=None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from mocker.config import ConfigError
    from mocker.replay.run import ReplayError
    from mocker.replay.traces import TraceError
    from mocker._core.replay import ReplayInvariantError
    try:
        return _replay(args)
    except (ConfigError, TraceError, ReplayError, ReplayInvariantError, _UsageError,
            ValueError, OverflowError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        sys.stderr.write(f"mocker replay: error: {msg}\n")
        return 2
    except BrokenPipeError:
        # the reader went away (`mocker replay ... | head`): not an error of the run
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"mocker replay: error: {where}{exc.strerror}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("mocker replay: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
