"""Time mocker and the reference side by side on the flagship workloads; print the ratios.

    python benchmarks/compare_reference.py --reference-python /tmp/refvenv/bin/python
    python benchmarks/compare_reference.py --reference-python ... --engine '{"engine": {"backend": "sglang"}}'
    python benchmarks/compare_reference.py --reference-python ... --suite kv_router

Each workload runs in a fresh process per implementation (so peak RSS is per run), alternating
ours / reference for --repeat rounds; the best wall time of each is compared, and the best
process CPU time (all threads: the reference's may use several).  Without
--reference-python only our numbers are printed.

Suites: ``flagship`` (the two synthetic workloads of the foundation issue, one worker) and
``kv_router`` (a generated 50,000-request mooncake trace with shared prefixes over 8 workers
placed by the KV router; its numbers agree only statistically, the reference breaking cost
ties at random, so the relative difference of the mean TTFT is printed instead).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

SUITES = {
    "flagship": {
        "1000/100 x50000 rate 20": {"synthetic": [1000, 100, 50000], "kwargs": {"request_rate": 20}},
        "3000/300 x5000 concurrency 64": {"synthetic": [3000, 300, 5000], "kwargs": {"replay_concurrency": 64}},
    },
    "kv_router": {
        "trace 50000 x8 kv_router": {"trace": "kv50k", "kwargs": {"num_workers": 8, "router_mode": "kv_router"}},
    },
}

CHILD = r"""
import json, resource, sys, time
which, spec, engine = json.loads(sys.argv[1])
kwargs = dict(spec["kwargs"])
if which == "ref":
    from dynamo import _core as core
    if engine is not None:
        engine = json.dumps(engine)
    if kwargs.get("router_mode") == "kv_router":
        kwargs["router_config"] = core.KvRouterConfig.from_json("{}")
    run_syn, run_trace = core.run_mocker_synthetic_trace_replay, core.run_mocker_trace_replay
else:
    from mocker.replay import run_synthetic_trace_replay as run_syn, run_trace_replay as run_trace
t = time.perf_counter()
c = time.process_time()
if "synthetic" in spec:
    res = run_syn(*spec["synthetic"], extra_engine_args=engine, **kwargs)
else:
    res = run_trace([spec["trace_path"]], extra_engine_args=engine, **kwargs)
wall = time.perf_counter() - t
cpu = time.process_time() - c
s = res.summary
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": s["completed_requests"], "duration_ms": s["duration_ms"],
                  "mean_ttft_ms": s["mean_ttft_ms"]}))
"""


def write_kv50k(path: str, n: int = 50000, seed: int = 11) -> None:
    """A mooncake trace: 500-4000-token prompts (512-token blocks), 60% sharing one of 40
    system prompts of 1-6 blocks, 10-400 output tokens, Poisson arrivals at 80 requests/s."""
    rng = random.Random(seed)
    prefixes = [[1_000_000 + 100 * g + j for j in range(rng.randint(1, 6))] for g in range(40)]
    uniq, t = 0, 0.0
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(n):
            isl = rng.randint(500, 4000)
            nb = -(-isl // 512)
            ids = list(prefixes[rng.randrange(40)][:nb]) if rng.random() < 0.6 else []
            while len(ids) < nb:
                ids.append(uniq)
                uniq += 1
            fh.write(json.dumps({"timestamp": int(t), "input_length": isl,
                                 "output_length": rng.randint(10, 400), "hash_ids": ids}) + "\n")
            t += rng.expovariate(80.0) * 1000.0


def run_one(python: str, which: str, spec: dict, engine) -> dict:
    out = subprocess.run([python, "-c", CHILD, json.dumps([which, spec, engine])],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-python", default=None, help="interpreter with ai-dynamo-runtime==1.6.1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--suite", choices=sorted(SUITES), default="flagship")
    ap.add_argument("--engine", default=None, help='engine config JSON, e.g. {"engine": {"backend": "sglang"}}')
    a = ap.parse_args(argv)
    engine = json.loads(a.engine) if a.engine else None
    exact = a.suite == "flagship"
    print(f"{'workload':<32} {'ours s':>8} {'ref s':>8} {'ratio':>7} {'cpu ratio':>9} {'ours MB':>8} {'ref MB':>8} "
          f"{'mem ratio':>9}  "
          + ("same numbers (1e-9)" if exact else "mean TTFT diff"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SUITES[a.suite].items():
            spec = dict(spec)
            if "trace" in spec:
                spec["trace_path"] = os.path.join(tmp, spec["trace"] + ".jsonl")
                write_kv50k(spec["trace_path"])
            ours, ref = [], []
            for _ in range(a.repeat):
                ours.append(run_one(sys.executable, "ours", spec, engine))
                if a.reference_python:
                    ref.append(run_one(a.reference_python, "ref", spec, engine))
            bo = min(ours, key=lambda r: r["wall_s"])
            if ref:
                br = min(ref, key=lambda r: r["wall_s"])
                if exact:
                    agree = str(all(abs(bo[k] - br[k]) <= 1e-9 * max(abs(bo[k]), abs(br[k]), 1.0)
                                    for k in ("completed", "duration_ms", "mean_ttft_ms")))
                else:
                    agree = f"{100.0 * (bo['mean_ttft_ms'] - br['mean_ttft_ms']) / br['mean_ttft_ms']:+.2f}%"
                cpu_ratio = min(r["cpu_s"] for r in ours) / min(r["cpu_s"] for r in ref)
                print(f"{name:<32} {bo['wall_s']:>8.3f} {br['wall_s']:>8.3f} {bo['wall_s'] / br['wall_s']:>7.2f} "
                      f"{cpu_ratio:>9.2f} {bo['rss_mb']:>8.0f} {br['rss_mb']:>8.0f} {bo['rss_mb'] / br['rss_mb']:>9.2f}  {agree}")
            else:
                print(f"{name:<32} {bo['wall_s']:>8.3f} {'-':>8} {'-':>7} {bo['rss_mb']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
