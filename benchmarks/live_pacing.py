"""Wall-clock pacing of the LiveEngine under load (issue 5, second point).

N closed-loop clients (default 2,000) each submit a request, read every token as it arrives,
and submit the next, for ``--seconds`` (default 60) at ``speedup_ratio`` 1.  For every token
the consumer notes when it got it (``time.monotonic()``); its *lateness* is that wall time minus
the token's modeled time (``engine.origin + modeled_ms``), negative when it came early.  The
script prints the lateness distribution of the steady state (from 2 s, after the ramp-up, to
``--seconds``, while all N clients have a request open; signed, and of its absolute value) and
per time window (drift would show as windows getting later), the engine's own hand-out lateness,
the pass-loop lateness, and what the machine did meanwhile (CPU steal, fan-outs that stalled).

    python benchmarks/live_pacing.py --uvloop --gc-freeze     # 2,000 streams, 60 s
    python benchmarks/live_pacing.py --clients 500 --seconds 10
    python benchmarks/live_pacing.py --handout-lead 0         # never hand out before the modeled end
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import time

import numpy as np

from mocker.live.engine import DirectRequest, FullResponse, LiveEngine


async def run(args) -> dict:
    config = {"engine": {"backend": args.backend, "speedup_ratio": 1.0, "num_gpu_blocks": args.blocks,
                         "block_size": 16, "max_num_seqs": args.clients + 64,
                         "max_num_batched_tokens": 8192}}
    lead = "auto" if args.handout_lead == "auto" else float(args.handout_lead) / 1000.0
    eng = await LiveEngine.start(config, buffering=FullResponse(), handout_lead=lead)
    eng.lateness_ms = []
    origin = eng.origin             # time.monotonic() at modeled time 0
    clock = time.monotonic          # (loop.time() is millisecond-coarse on uvloop)
    stop_at = clock() + args.seconds
    # per token: when the consumer got it, its modeled ms, when the engine handed it out (plain
    # list appends: the bookkeeping runs inside the fan-out it measures, so it is kept minimal)
    got_l, modeled_l, handed_l = [], [], []
    got, modeled_of, handed = got_l.append, modeled_l.append, handed_l.append
    served = 0
    rng = random.Random(args.seed)

    async def client(i: int) -> None:
        nonlocal served
        crng = random.Random(rng.random())
        nrng = np.random.default_rng(crng.randrange(2**32))
        # ramp up over the first second so the first pass is not a 2,000-prompt prefill
        await asyncio.sleep(crng.random())
        while clock() < stop_at:
            prompt = nrng.integers(1, 30000, size=crng.randint(64, 256))    # a fresh random prompt
            s = await eng.submit(DirectRequest(tokens=prompt, max_output_tokens=crng.randint(100, 400)))
            async for sig in s:
                got(clock())
                modeled_of(sig.modeled_ms)
                handed(sig.observed_at)
            served += 1

    fanout = []                     # the engine's fan-out estimate, sampled once a second

    async def sample() -> None:
        while clock() < stop_at:
            await asyncio.sleep(1.0)
            fanout.append(eng.fanout_per_signal_s)

    steal0 = _steal_s()
    t0 = time.perf_counter()
    await asyncio.gather(sample(), *[client(i) for i in range(args.clients)])
    wall = time.perf_counter() - t0
    steal = _steal_s() - steal0 if steal0 is not None else None
    passes = eng.passes
    pass_late = np.array(eng.lateness_ms)
    fanout_us = float(np.median(fanout)) * 1e6 if fanout else 0.0  # the hand-out midpoint per signal
    await eng.shutdown()

    modeled = np.array(modeled_l)
    got_ms = (np.array(got_l) - origin) * 1000.0
    late = got_ms - modeled
    deliv = (np.array(handed_l) - origin) * 1000.0 - modeled
    # the steady state: after the ramp-up, while every client keeps a request open (once they
    # stop submitting, the drain has fewer streams, each reader's last token ends its task)
    end_ms = (stop_at - origin) * 1000.0
    warm = (modeled > 2000.0) & (modeled <= end_ms)
    drain = modeled > end_ms
    # a stall: within one pass's fan-out, two consecutive readers more than 2 ms apart (no
    # reader here works that long; the process was not running, e.g. the VM's CPU was stolen)
    order = np.argsort(modeled, kind="stable")
    m_sorted, got_sorted = modeled[order], got_ms[order]
    stalled_passes = 0
    for seg in np.split(got_sorted, np.flatnonzero(np.diff(m_sorted)) + 1):
        if len(seg) > 1 and np.diff(np.sort(seg)).max() > 2.0:
            stalled_passes += 1
    windows = []
    edges = np.arange(0.0, modeled.max() + args.window * 1000.0, args.window * 1000.0)
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (modeled >= lo) & (modeled < hi)
        if m.sum():
            windows.append({"from_s": lo / 1000.0, "tokens": int(m.sum()),
                            "p50_ms": float(np.percentile(late[m], 50)),
                            "p99_ms": float(np.percentile(late[m], 99)),
                            "max_ms": float(late[m].max())})
    return {
        "clients": args.clients, "backend": args.backend, "seconds": args.seconds,
        "wall_s": wall, "requests_completed": served, "tokens": int(len(late)), "passes": passes,
        "tokens_per_s": len(late) / wall,
        "lateness_ms": {"p1": float(np.percentile(late[warm], 1)),
                        "p50": float(np.percentile(late[warm], 50)), "p90": float(np.percentile(late[warm], 90)),
                        "p99": float(np.percentile(late[warm], 99)), "max": float(late[warm].max()),
                        "mean": float(late[warm].mean()),
                        "abs_p99": float(np.percentile(np.abs(late[warm]), 99))},
        "drain_lateness_ms": {"tokens": int(drain.sum()),
                              "p99": float(np.percentile(late[drain], 99)) if drain.any() else None},
        "handout_lead": args.handout_lead, "fanout_us_per_signal": fanout_us,
        "cpu_steal_s": steal, "passes_with_a_stall": stalled_passes,
        "delivery_lateness_ms": {"p50": float(np.percentile(deliv[warm], 50)),
                                 "p99": float(np.percentile(deliv[warm], 99)), "max": float(deliv[warm].max())},
        "pass_lateness_ms": {"p50": float(np.percentile(pass_late, 50)), "p99": float(np.percentile(pass_late, 99)),
                             "max": float(pass_late.max())},
        "drift_ms_per_min": _median_slope(modeled[warm], late[warm]),
        "drift_all_tokens_ms_per_min": float(np.polyfit(modeled[warm] / 60000.0, late[warm], 1)[0])
                                       if warm.sum() > 2 else None,
        "windows": windows,
    }


def _median_slope(modeled: np.ndarray, late: np.ndarray) -> float | None:
    """Drift: the least-squares slope (ms per minute) of each second's median lateness, so that
    a few slow passes (the tail, reported apart) do not tilt it."""
    secs, which = np.unique(np.floor(modeled / 1000.0), return_inverse=True)
    if len(secs) <= 2:
        return None
    order = np.argsort(which, kind="stable")
    per_sec = np.split(late[order], np.flatnonzero(np.diff(which[order])) + 1)
    return float(np.polyfit(secs / 60.0, [np.median(x) for x in per_sec], 1)[0])


def _fmt_slope(v: float | None) -> str:
    """A drift figure, or "n/a" when the steady state was too short to fit one."""
    return "n/a" if v is None else f"{v:+.3f} ms/min"


def _steal_s() -> float | None:
    """CPU time the hypervisor gave to others (all CPUs, seconds; Linux), or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=10.0, help="seconds per drift window")
    ap.add_argument("--backend", default="vllm", choices=["vllm", "sglang", "trtllm"])
    ap.add_argument("--blocks", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop (the uvloop extra: pip install \".[live,uvloop]\")")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() after start-up and raise the GC thresholds (fewer collection pauses)")
    ap.add_argument("--handout-lead", default="auto",
                    help='"auto" (the engine default) or milliseconds the hand-out may start early (0: never)')
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = ap.parse_args()
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
        gc.set_threshold(100_000, 50, 100)
    if args.uvloop:
        import uvloop
        res = uvloop.run(run(args))
    else:
        res = asyncio.run(run(args))
    res["uvloop"], res["gc_freeze"] = args.uvloop, args.gc_freeze
    if args.json:
        print(json.dumps(res, indent=2))
        return
    lt, pl = res["lateness_ms"], res["pass_lateness_ms"]
    print(f"{res['clients']} streams, {res['backend']}, speedup 1, "
          f"{'uvloop' if res['uvloop'] else 'asyncio'}{', gc frozen' if res['gc_freeze'] else ''}, "
          f"{res['wall_s']:.1f} s wall: "
          f"{res['tokens']} tokens ({res['tokens_per_s']:.0f}/s), {res['requests_completed']} requests, "
          f"{res['passes']} passes; hand-out lead {res['handout_lead']}, "
          f"fan-out midpoint {res['fanout_us_per_signal']:.2f} us/signal")
    print(f"token lateness at the consumer (ms): p1 {lt['p1']:.2f}  p50 {lt['p50']:.2f}  p90 {lt['p90']:.2f}  "
          f"p99 {lt['p99']:.2f}  max {lt['max']:.2f}  mean {lt['mean']:.2f};  |lateness| p99 {lt['abs_p99']:.2f}")
    dr = res["drain_lateness_ms"]
    if dr["tokens"]:
        print(f"  (steady state: 2 s to {res['seconds']:.0f} s; the drain after it, {dr['tokens']} tokens "
              f"while clients stop: p99 {dr['p99']:.2f} ms)")
    dl = res["delivery_lateness_ms"]
    print(f"token lateness at hand-out by the engine (ms): p50 {dl['p50']:.2f}  p99 {dl['p99']:.2f}  "
          f"max {dl['max']:.2f}")
    print(f"pass-end lateness of the loop (ms): p50 {pl['p50']:.2f}  p99 {pl['p99']:.2f}  max {pl['max']:.2f}")
    print(f"drift (slope of each second's median lateness): {_fmt_slope(res['drift_ms_per_min'])} "
          f"(least squares over every token: {_fmt_slope(res['drift_all_tokens_ms_per_min'])})")
    steal = "n/a" if res["cpu_steal_s"] is None else f"{res['cpu_steal_s']:.2f} s"
    print(f"machine: CPU steal during the run {steal}; passes whose fan-out stalled > 2 ms: "
          f"{res['passes_with_a_stall']} of {res['passes']}")
    for w in res["windows"]:
        print(f"  t={w['from_s']:5.0f}s  tokens {w['tokens']:7d}  p50 {w['p50_ms']:6.2f}  "
              f"p99 {w['p99_ms']:6.2f}  max {w['max_ms']:7.2f} ms")


if __name__ == "__main__":
    main()
