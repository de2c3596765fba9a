"""Command line: ``mocker replay`` (trace or synthetic workload on a virtual clock).

Every failure the user can cause ends in one line on stderr and exit status 2; Ctrl-C in
``mocker replay: interrupted`` and 130.  The replay flags come from ``mocker.replay.options``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time

__all__ = ["main"]

PROG = "mocker"
_INT64_MAX = 2 ** 63 - 1


def _int_at_least(minimum: int, words: str):
    """argparse type: an integer >= ``minimum`` that fits in 64 bits."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be {words}, got {v}")
        if v > _INT64_MAX:
            raise argparse.ArgumentTypeError(f"{text} is too large (at most {_INT64_MAX})")
        return v
    return parse


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


_TYPES = {"int": _int_at_least(0, "non-negative"), "float": _float}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2, with where to look
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _build_parser() -> argparse.ArgumentParser:
    from mocker import __version__
    from mocker.replay.options import OPTIONS, flag

    p = _Parser(prog=PROG, description="GPU-free LLM serving simulator.")
    p.add_argument("--version", action="version", version=f"mocker {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    r = sub.add_parser("replay", help="replay a trace or a synthetic workload on a virtual clock",
                       description="Replay mooncake JSONL trace(s), or a synthetic workload when no "
                                   "TRACE is given, and print an AIPerf-style report.")
    r.add_argument("traces", nargs="*", metavar="TRACE", help="mooncake JSONL trace file(s)")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for opt in OPTIONS:
        if not opt.cli:
            continue
        g = groups.get(opt.group) or groups.setdefault(opt.group, r.add_argument_group(opt.group))
        if opt.name == "request_rate":      # the synthetic workload's size comes first
            positive = _int_at_least(1, "at least 1")
            g.add_argument("--input-tokens", type=positive, default=None, metavar="N",
                           help="synthetic: prompt tokens per request")
            g.add_argument("--output-tokens", type=positive, default=None, metavar="N",
                           help="synthetic: output tokens per request")
            g.add_argument("--request-count", type=positive, default=None, metavar="N",
                           help="synthetic: sessions (requests when a session has one turn)")
        helptext = opt.help if opt.default is None else f"{opt.help} (default {opt.default})"
        kw: dict = dict(default=None, help=helptext, dest=opt.name)
        if opt.kind == "choice":
            kw["choices"] = opt.choices
        elif opt.kind in _TYPES:
            kw["type"] = _TYPES[opt.kind]
        if opt.metavar:
            kw["metavar"] = opt.metavar
        g.add_argument(flag(opt.name), **kw)
        if opt.name == "report_jsonl_path":
            g.add_argument("--report-json", default=None, metavar="PATH",
                           help="write the summary dict (with mocker_version and what was simulated)")
            g.add_argument("--quiet", action="store_true",
                           help="no progress line (it is shown on a terminal for runs past half a second)")
    return p


class _Progress:
    """One line on stderr, redrawn in place, fitted to the terminal (only on a terminal).

    It appears once a run has lasted ``delay_s`` (``MOCKER_PROGRESS_DELAY`` seconds, default
    0.5) and shows the phase: reading the trace, simulating, writing records.  ``clear`` ends the
    line so that a message printed next starts on a line of its own.
    """

    def __init__(self, enabled: bool, delay_s: float | None = None):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        if delay_s is None:
            try:
                delay_s = float(os.environ.get("MOCKER_PROGRESS_DELAY", "0.5"))
            except ValueError:
                delay_s = 0.5
        self.delay_s = delay_s
        self.shown = False
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int, sim_ms: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.t0 < self.delay_s or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        cols = shutil.get_terminal_size((80, 24)).columns
        frac = min(done / total, 1.0) if total else 1.0
        wall = f"wall {now - self.t0:,.1f} s"
        if phase == "load":
            text = f"reading trace {frac:4.0%}  {wall}"
        elif phase == "write":
            text = f"writing records {done}/{total}  {wall}"
        else:
            text = f"{done}/{total} requests  sim {sim_ms / 1000.0:,.1f} s  {wall}"
        room = cols - 1 - len(text) - 3
        if room >= 10:
            width = min(room, 30)
            bar = "#" * int(frac * width)
            text = f"[{bar:-<{width}}] {text}"
        text = text[:cols - 1]
        self.shown = True          # before writing: Ctrl-C may land in the write
        sys.stderr.write("\r" + text + " " * max(0, cols - 1 - len(text)))
        sys.stderr.flush()

    def clear(self) -> None:
        """End the progress line (before a message, at the end of the run)."""
        if self.shown:
            cols = shutil.get_terminal_size((80, 24)).columns
            sys.stderr.write("\r" + " " * (cols - 1) + "\r")
            sys.stderr.flush()
            self.shown = False


class _UsageError(Exception):
    pass


def _replay(args, progress: _Progress) -> int:
    from mocker import __version__
    from mocker.replay import run_synthetic_trace_replay, run_trace_replay
    from mocker.replay.options import BY_NAME, SYNTHETIC, TRACE, flag
    from mocker.replay.records import OutputFile
    from mocker.replay.report import format_table

    mode = TRACE if args.traces else SYNTHETIC
    given = {name: getattr(args, name) for name in BY_NAME
             if BY_NAME[name].cli and getattr(args, name) is not None}
    for name in given:
        if mode not in BY_NAME[name].modes:
            if mode == TRACE:
                raise _UsageError(f"{flag(name)} is for synthetic workloads; it cannot be combined with TRACE files")
            raise _UsageError(f"{flag(name)} applies only to TRACE files (no TRACE was given: this is a "
                              "synthetic workload)")
    summary_out = OutputFile(args.report_json, "--report-json") if args.report_json else None
    try:
        if mode == TRACE:
            result = run_trace_replay(args.traces, progress=progress, **given)
        else:
            sizes = [f for f in ("input_tokens", "output_tokens", "request_count") if getattr(args, f) is None]
            if sizes:
                raise _UsageError("give TRACE file(s), or a synthetic workload with --input-tokens, "
                                  "--output-tokens and --request-count (missing: "
                                  + ", ".join("--" + m.replace("_", "-") for m in sizes) + ")")
            result = run_synthetic_trace_replay(args.input_tokens, args.output_tokens, args.request_count,
                                                progress=progress, **given)
        progress.clear()
        if summary_out is not None:
            report = {"mocker_version": __version__, "simulated": result.description, **result.summary,
                      "outcome": result.outcome}
            summary_out.write((json.dumps(report, indent=2) + "\n").encode())
            summary_out.commit()
            summary_out = None
    finally:
        if summary_out is not None:
            summary_out.discard()
    print(f"mocker {__version__}: {result.description}")
    print(format_table(result.summary, result.outcome))
    return 0


def _flags_for(message: str) -> str:
    """A replay error's message with option names spelled as the command line's flags."""
    from mocker.replay.options import BY_NAME, flag

    names = "|".join(sorted([*BY_NAME, "input_tokens", "output_tokens", "request_count"], key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])({names})(?![\w])", lambda m: flag(m.group(1)), message)


def main(argv=None) -> int:
    sub = _build_parser()
    if argv is None:
        argv = sys.argv[1:]
    args = sub.parse_args(argv)
    if args.command is None:
        sub.print_help(sys.stderr)
        return 2
    # the replay options and the compiled core load only once the arguments are good
    from mocker._core.replay import ReplayInvariantError
    from mocker.errors import MockerError, ReplayError

    prog = f"{PROG} {args.command}"
    progress = _Progress(enabled=not args.quiet and sys.stderr.isatty())

    def fail(msg: str, status: int = 2) -> int:
        progress.clear()
        sys.stderr.write(f"{prog}: {msg}\n")
        return status
    try:
        return _replay(args, progress)
    except ReplayError as exc:
        return fail("error: " + _flags_for(_one_line(exc)))
    except (MockerError, ReplayInvariantError, _UsageError) as exc:
        return fail("error: " + _one_line(exc))
    except MemoryError as exc:
        detail = f" ({exc})" if str(exc) else ""
        return fail(f"error: out of memory{detail}; try fewer requests, workers or num_gpu_blocks")
    except BrokenPipeError:
        # the reader went away (`mocker replay ... | head`): not an error of the run
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return fail(f"error: {where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return fail("interrupted", 130)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
