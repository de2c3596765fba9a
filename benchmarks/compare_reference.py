"""Time mocker and the reference side by side on the flagship workloads; print the ratios.

    python benchmarks/compare_reference.py --reference-python /tmp/refvenv/bin/python

Each workload runs in a fresh process per implementation (so peak RSS is per run), alternating
ours / reference for --repeat rounds; the best wall time of each is compared.  Without
--reference-python only our numbers are printed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKLOADS = {
    "1000/100 x50000 rate 20": ((1000, 100, 50000), {"request_rate": 20}),
    "3000/300 x5000 concurrency 64": ((3000, 300, 5000), {"replay_concurrency": 64}),
}

CHILD = r"""
import json, resource, sys, time
which, args, kwargs, engine = json.loads(sys.argv[1])
if which == "ref":
    from dynamo._core import run_mocker_synthetic_trace_replay as run
    if engine is not None:
        engine = json.dumps(engine)
else:
    from mocker.replay import run_synthetic_trace_replay as run
t = time.perf_counter()
res = run(*args, extra_engine_args=engine, **kwargs)
wall = time.perf_counter() - t
s = res.summary
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": s["completed_requests"], "duration_ms": s["duration_ms"],
                  "mean_ttft_ms": s["mean_ttft_ms"]}))
"""


def run_one(python: str, which: str, args, kwargs, engine) -> dict:
    out = subprocess.run([python, "-c", CHILD, json.dumps([which, args, kwargs, engine])],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-python", default=None, help="interpreter with ai-dynamo-runtime==1.6.1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default=None, help='engine config JSON, e.g. {"engine": {"backend": "sglang"}}')
    a = ap.parse_args(argv)
    engine = json.loads(a.engine) if a.engine else None
    print(f"{'workload':<32} {'ours s':>8} {'ref s':>8} {'ratio':>7} {'ours MB':>8} {'ref MB':>8} {'mem ratio':>9}  same numbers (1e-9)")
    for name, (args, kwargs) in WORKLOADS.items():
        ours, ref = [], []
        for _ in range(a.repeat):
            ours.append(run_one(sys.executable, "ours", args, kwargs, engine))
            if a.reference_python:
                ref.append(run_one(a.reference_python, "ref", args, kwargs, engine))
        bo = min(ours, key=lambda r: r["wall_s"])
        if ref:
            br = min(ref, key=lambda r: r["wall_s"])
            same = all(abs(bo[k] - br[k]) <= 1e-9 * max(abs(bo[k]), abs(br[k]), 1.0)
                       for k in ("completed", "duration_ms", "mean_ttft_ms"))
            print(f"{name:<32} {bo['wall_s']:>8.3f} {br['wall_s']:>8.3f} {bo['wall_s'] / br['wall_s']:>7.2f} "
                  f"{bo['rss_mb']:>8.0f} {br['rss_mb']:>8.0f} {bo['rss_mb'] / br['rss_mb']:>9.2f}  {same}")
        else:
            print(f"{name:<32} {bo['wall_s']:>8.3f} {'-':>8} {'-':>7} {bo['rss_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
