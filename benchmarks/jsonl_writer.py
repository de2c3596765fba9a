"""Per-request JSONL report: build_records + json.dumps vs the compiled write_records.

    python benchmarks/jsonl_writer.py [--requests 1000000] [--out DIR]

Each mode runs in a fresh process on the workload of
``run_synthetic_trace_replay(200, 20, N, request_rate=2000)``; printed per mode: simulation
time, time to write the file, the process's peak RSS (ru_maxrss) and its RSS before writing.
Modes: ``none`` (simulate, copy the columns out), ``old`` (+ build_records, json.dumps a line
each into a text file, as replay/run.py does), ``new`` (+ write_records into a binary file).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _child(mode: str, n: int, path: str) -> dict:
    import numpy as np

    import mocker.replay.run as run_mod
    from mocker._core.records import write_records
    from mocker.replay.report import build_records

    # the workload and config run_synthetic_trace_replay builds, taken where it calls _execute
    got = {}

    def grab(workload, config, **kw):
        got.update(workload=workload, config=config, kw=kw)

    run_mod._execute = grab
    run_mod.run_synthetic_trace_replay(200, 20, n, request_rate=2000)
    workload, config, kw = got["workload"], got["config"], got["kw"]

    t0 = time.perf_counter()
    sim = run_mod.simulate(workload, config, num_workers=kw["num_workers"], concurrency=None,
                           max_sim_time_ms=None)
    cols = sim.table.columns()
    order = np.asarray(sim.core.arrival_order(), dtype=np.int64)
    t_sim = time.perf_counter() - t0
    rss_before = _rss_mb()
    t0 = time.perf_counter()
    count = 0
    if mode == "old":
        records = build_records(cols, order, workload.session_id, workload.turn_index, math.inf,
                                dp_size=config["dp_size"])
        with open(path, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        count = len(records)
    elif mode == "new":
        # synthetic runs without sessions: every session/turn is null
        sess = np.full(workload.n, -1, dtype=np.int32)
        turn = np.full(workload.n, -1, dtype=np.int64)
        with open(path, "wb") as fh:
            count = write_records(fh, cols, order, sess, [], turn, math.inf, config["dp_size"])
    t_write = time.perf_counter() - t0
    return {"mode": mode, "records": count, "sim_s": round(t_sim, 2), "write_s": round(t_write, 2),
            "rss_before_write_mb": round(rss_before),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0),
            "file_bytes": os.path.getsize(path) if mode != "none" else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--modes", default="none,new,old")
    ap.add_argument("--out", default=None, help="directory of the JSONL files (default: a temporary one)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, path = args.child.split(":", 1)
        print(json.dumps(_child(mode, args.requests, path)))
        return
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        files = {}
        for mode in args.modes.split(","):
            path = os.path.join(tmp, f"{mode}.jsonl")
            out = subprocess.run([sys.executable, __file__, "--requests", str(args.requests),
                                  "--child", f"{mode}:{path}"], check=True, capture_output=True, text=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(res), flush=True)
            if mode != "none":
                files[mode] = path
        if "old" in files and "new" in files:
            same = _same_file(files["old"], files["new"])
            print(f"old and new files identical: {same}")


def _same_file(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


if __name__ == "__main__":
    main()
