#!/usr/bin/env python
"""Differential fuzzer: our ``mocker`` vs the reference ``ai-dynamo-runtime==1.6.1``.

Run it with the *reference* venv's python; our package is run in a separate
process by another interpreter (where ``mocker`` is installed)::

    /tmp/refvenv/bin/python tools/diff_fuzz.py --seed 1 --iterations 500 \\
        --ours-python python3 --backend mix --out /tmp/fuzz-repros

Each iteration draws a random workload (trace with shared prefixes, sessions,
bursts, tiny and huge prompts, output 0/1 — or occasionally a synthetic
workload) and a random engine config (small pools forcing preemption, odd block
sizes, small budgets, max_model_len, chunking / prefix caching on/off, fifo/lifo,
speedup ratios, fixed timing, 1-3 round-robin workers, closed-loop concurrency),
runs the reference in-process and ours in the worker subprocess (JSON through
temp files), and compares the summary (minus wall-clock keys) and every
per-request record at relative error <= 1e-9. Errors are compared too: if the
reference raises, ours must raise with the same message.

On the first mismatch it shrinks the scenario (drops trace lines one at a time,
then engine/run options, while *a* mismatch persists), prints the reproducer and
saves it to ``--out`` in golden-file format (it can be copied into tests/golden/
once fixed), plus ``ours``/``mismatch`` keys. ``--keep-going`` continues after
a mismatch.

Exit status: 0 no mismatch, 1 mismatch found, 2 setup error.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_rules import ABS_TOL, REL_TOL, canonical_key, values_equal  # noqa: E402

WALL_CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
RECORD_FIELDS = (
    "arrival_time_ms", "first_admit_ms", "terminal_time_ms", "first_token_ms", "last_token_ms",
    "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length", "requested_output_length",
    "output_length", "reused_input_tokens", "decode_worker_idx", "prefill_worker_idx",
    "admission_count", "readmission_count", "terminal_status", "session_id", "turn_index",
)
ADMISSION_FIELDS = ("at_ms", "reused_input_tokens", "is_readmission")

# ------------------------------------------------------------------------------------------------
# worker run by --ours-python: reads {"in","out"} JSON lines on stdin, answers "done" per request
# ------------------------------------------------------------------------------------------------
WORKER_CODE = r'''
import json, sys, traceback

def plain(x):
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "_asdict"):
        return plain(x._asdict())
    if hasattr(x, "__dict__"):
        return plain(vars(x))
    return str(x)

try:
    from mocker import replay
except BaseException as e:
    sys.stdout.write(json.dumps({"import_error": "%s: %s" % (type(e).__name__, e)}) + "\n")
    sys.stdout.flush()
    sys.exit(3)
sys.stdout.write(json.dumps({"ready": True}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    job = json.loads(line)
    with open(job["in"]) as fh:
        p = json.load(fh)
    try:
        if p["kind"] == "trace":
            r = replay.run_trace_replay(p["trace_files"], **p["kwargs"], capture_per_request=True)
        else:
            r = replay.run_synthetic_trace_replay(*p["args"], **p["kwargs"], capture_per_request=True)
        out = {"ok": True, "summary": plain(dict(r.summary)), "per_request": plain(list(r.per_request or []))}
    except BaseException as e:
        out = {"ok": False, "error_type": type(e).__name__, "message": str(e),
               "traceback": traceback.format_exc()[-4000:]}
    with open(job["out"], "w") as fh:
        json.dump(out, fh)
    sys.stdout.write("done\n")
    sys.stdout.flush()
'''


class OursWorker:
    def __init__(self, python, timeout_s):
        self.python = python
        self.timeout_s = timeout_s
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.python, "-c", WORKER_CODE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     bufsize=1)
        hello = self._readline(60)
        if hello is None:
            raise RuntimeError(f"{self.python}: worker did not start")
        msg = json.loads(hello)
        if "import_error" in msg:
            raise RuntimeError(f"{self.python}: cannot import mocker.replay: {msg['import_error']}")

    def _readline(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return None
        line = self.proc.stdout.readline()
        return line or None

    def stop(self):
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                pass
            self.proc = None

    def run(self, payload, tmpdir):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        pin = os.path.join(tmpdir, "ours_in.json")
        pout = os.path.join(tmpdir, "ours_out.json")
        with open(pin, "w") as fh:
            json.dump(payload, fh)
        if os.path.exists(pout):
            os.unlink(pout)
        try:
            self.proc.stdin.write(json.dumps({"in": pin, "out": pout}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.stop()
            return {"ok": False, "error_type": "WorkerDied", "message": "our worker process died"}
        line = self._readline(self.timeout_s)
        if line is None:
            rc = self.proc.poll()
            self.stop()
            if rc is None:
                return {"ok": False, "error_type": "Timeout", "message": f"ours exceeded {self.timeout_s}s"}
            return {"ok": False, "error_type": "WorkerDied", "message": f"our worker exited with {rc}"}
        with open(pout) as fh:
            return json.load(fh)


# ------------------------------------------------------------------------------------------------
# reference
# ------------------------------------------------------------------------------------------------
@contextmanager
def quiet_stderr(enabled=True):
    """The reference logs WARN lines through Rust tracing to fd 2."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _run_ref_inline(core, payload, quiet):
    try:
        if payload["kwargs"].get("router_config"):
            payload = dict(payload, kwargs=dict(payload["kwargs"]))
            payload["kwargs"]["router_config"] = core.KvRouterConfig.from_json(payload["kwargs"]["router_config"])
        with quiet_stderr(quiet):
            if payload["kind"] == "trace":
                r = core.run_mocker_trace_replay(payload["trace_files"], capture_per_request=True,
                                                 **payload["kwargs"])
            else:
                r = core.run_mocker_synthetic_trace_replay(*payload["args"], capture_per_request=True,
                                                           **payload["kwargs"])
        recs = [{k: v for k, v in rec.items() if k != "uuid"} for rec in r.per_request]
        return {"ok": True, "summary": dict(r.summary), "per_request": recs}
    except BaseException as e:  # noqa: BLE001
        return {"ok": False, "error_type": type(e).__name__, "message": str(e)}


def run_ref(core, payload, quiet, timeout_s=None, tmpdir=None):
    """Run the reference. With a timeout, the (already imported) reference runs in a forked
    child so a reference run that never ends can be abandoned (seen with SGLang configs)."""
    if not timeout_s or not hasattr(os, "fork"):
        return _run_ref_inline(core, payload, quiet)
    fd, out = tempfile.mkstemp(suffix=".json", dir=tmpdir)
    os.close(fd)
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            res = _run_ref_inline(core, payload, quiet)
            with open(out, "w") as fh:
                json.dump(res, fh)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    deadline = time.monotonic() + timeout_s
    delay = 0.0005
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return {"ok": False, "error_type": "RefTimeout",
                        "message": f"reference did not finish within {timeout_s}s"}
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        with open(out) as fh:
            txt = fh.read()
        if not txt:
            return {"ok": False, "error_type": "RefCrashed", "message": f"reference child exited with {status}"}
        return json.loads(txt)
    finally:
        os.unlink(out)


# ------------------------------------------------------------------------------------------------
# comparison (rules in tools/parity_rules.py, shared with the parity tests)
# ------------------------------------------------------------------------------------------------
def first_difference(ours, ref, paths):
    """Return a one-line description of the first mismatch or None."""
    if not ref["ok"] or not ours["ok"]:
        if ref["ok"] != ours["ok"]:
            if ref["ok"]:
                return f"ours raised {ours['error_type']}: {ours['message']} (ref succeeded)"
            return f"ref raised {ref['error_type']}: {ref['message']!r}; ours succeeded"
        rm, om = ref["message"], ours["message"]
        for p in paths:
            rm, om = rm.replace(p, "{path}"), om.replace(p, "{path}")
        # ours may add context (the file name) around the reference's wording
        if rm != om and rm not in om:
            return f"error message differs: ours {om!r} vs ref {rm!r}"
        return None
    rs, os_ = ref["summary"], ours["summary"]
    for k, rv in rs.items():
        if k in WALL_CLOCK_KEYS:
            continue
        if k not in os_:
            return f"summary key {k!r} missing (ref {rv!r})"
        if not values_equal(os_[k], rv):
            return f"summary[{k!r}]: ours {os_[k]!r} vs ref {rv!r}"
    rr = sorted(ref["per_request"], key=canonical_key)
    orr = sorted(ours["per_request"], key=canonical_key)
    if len(rr) != len(orr):
        return f"per_request count: ours {len(orr)} vs ref {len(rr)}"
    for i, (o, r) in enumerate(zip(orr, rr)):
        for f in RECORD_FIELDS:
            if f not in o:
                return f"request {i}: field {f!r} missing"
            if not values_equal(o[f], r.get(f)):
                return (f"request {i} (session={r.get('session_id')!r} turn={r.get('turn_index')!r} "
                        f"arrival={r.get('arrival_time_ms')!r}): {f}: ours {o[f]!r} vs ref {r.get(f)!r}")
        oh, rh = o.get("admission_history") or [], r.get("admission_history") or []
        if len(oh) != len(rh):
            return f"request {i}: admission_history length ours {len(oh)} vs ref {len(rh)}"
        for j, (oa, ra) in enumerate(zip(oh, rh)):
            for f in ADMISSION_FIELDS:
                if not values_equal(oa.get(f), ra.get(f)):
                    return f"request {i}: admission_history[{j}].{f}: ours {oa.get(f)!r} vs ref {ra.get(f)!r}"
    return None


# ------------------------------------------------------------------------------------------------
# random scenario generation
# ------------------------------------------------------------------------------------------------
def gen_trace(rng: random.Random):
    """Return (trace_lines, trace_kwargs)."""
    kwargs = {}
    tbs = rng.choice([None, None, 512, 64, 100, 256, 1024, 37])
    if tbs is not None:
        kwargs["trace_block_size"] = tbs
    tbs_eff = tbs or 512
    fmt = rng.choice(["mooncake", "mooncake", "mooncake-delta"])
    if fmt != "mooncake":
        kwargs["trace_format"] = fmt
    n_groups = rng.randint(1, 4)
    prefixes = [[1_000_000 * (g + 1) + j for j in range(rng.randint(1, 8))] for g in range(n_groups)]
    uniq = [10]

    def ids_for(isl):
        nb = -(-isl // tbs_eff)
        ids = []
        if rng.random() < 0.6:
            ids = list(prefixes[rng.randrange(n_groups)][:nb])
        while len(ids) < nb:
            ids.append(uniq[0])
            uniq[0] += 1
        if rng.random() < 0.1:
            ids.append(uniq[0])  # extra (unused) hash id is allowed
            uniq[0] += 1
        return ids

    def draw_isl():
        u = rng.random()
        if u < 0.1:
            return rng.randint(1, 20)
        if u < 0.2:
            return rng.randint(5000, 20000)
        return rng.randint(20, 3000)

    def draw_osl():
        u = rng.random()
        if u < 0.08:
            return 0
        if u < 0.16:
            return 1
        if u < 0.25:
            return rng.randint(300, 1200)
        return rng.randint(2, 200)

    lines = []
    ts = rng.choice([0, 0, 1000, 5000])
    n_items = rng.randint(1, 25)
    session_no = 0
    for _ in range(n_items):
        if rng.random() < 0.5:
            ts += 0 if rng.random() < 0.4 else rng.choice([1, 3, 10, 50, 200, 1000])
        if rng.random() < 0.25:
            # multi-turn session
            sid = f"s{session_no}"
            session_no += 1
            turns = rng.randint(2, 4)
            tts = ts
            for k in range(turns):
                isl = draw_isl() if k == 0 or fmt == "mooncake" else rng.randint(1, 800)
                row = {"timestamp": tts, "session_id": sid, "input_length": isl,
                       "output_length": draw_osl(), "hash_ids": ids_for(isl)}
                if k > 0:
                    u = rng.random()
                    if u < 0.35:
                        row["delay"] = rng.choice([0, 5, 50, 300])
                    elif u < 0.7:
                        row["delay_ms"] = rng.choice([0, 2.5, 40, 250])
                    # else: implied by timestamps
                tts += rng.choice([0, 10, 100, 700])
                row["timestamp"] = tts if k > 0 else ts
                lines.append(row)
        else:
            isl = draw_isl()
            row = {"timestamp": ts, "input_length": isl, "output_length": draw_osl(), "hash_ids": ids_for(isl)}
            if rng.random() < 0.1:  # field aliases
                row["created_time"] = row.pop("timestamp")
            if rng.random() < 0.1:
                row["input_tokens"] = row.pop("input_length")
            if rng.random() < 0.1:
                row["output_tokens"] = row.pop("output_length")
            if rng.random() < 0.05:  # input_length omitted -> len(hash_ids)*tbs
                row.pop("input_length", None)
                row.pop("input_tokens", None)
            lines.append(row)
    return [json.dumps(r) for r in lines], kwargs


def gen_engine(rng: random.Random, backend: str, max_need_tokens: int):
    e = {}
    if backend != "vllm" or rng.random() < 0.3:
        e["backend"] = backend
    default_bs = {"vllm": 64, "trtllm": 32, "sglang": 1}[backend]
    if rng.random() < 0.6:
        e["block_size"] = rng.choice([1, 8, 16, 32, 48, 64, 80, 100, 128] if backend == "sglang"
                                     else [8, 16, 32, 48, 64, 80, 100, 128])
    bs = e.get("block_size", default_bs)
    u = rng.random()
    if u < 0.4:
        # small pool: still large enough for the biggest single request (mostly)
        need = -(-max_need_tokens // bs) + 1
        e["num_gpu_blocks"] = max(1, int(need * rng.uniform(1.0, 3.0)))
    elif u < 0.45:
        e["num_gpu_blocks"] = rng.randint(4, 400)  # may be too small: error parity
    if rng.random() < 0.25:
        e["max_num_seqs"] = rng.choice([1, 2, 3, 5, 8, None])
    if backend != "sglang" and rng.random() < 0.3:
        e["max_num_batched_tokens"] = rng.choice([16, 64, 100, 300, 512, 2048, None])
    if rng.random() < 0.15:
        e["max_model_len"] = rng.choice([64, 512, 1000, 2048, 4096])
    if rng.random() < 0.2:
        e["enable_prefix_caching"] = False
    if backend != "sglang" and rng.random() < 0.2:
        # (sglang rejects it: "enable_chunked_prefill=false is not supported for backend=sglang")
        e["enable_chunked_prefill"] = False
    if rng.random() < 0.4:
        e["preemption_mode"] = rng.choice(["fifo", "lifo"])
    if rng.random() < 0.2:
        e["speedup_ratio"] = rng.choice([0.0, 0.5, 2.5, 10.0])
    if rng.random() < 0.15:
        e["decode_speedup_ratio"] = rng.choice([0.5, 1.7, 3.0])
    if rng.random() < 0.25:
        e["timing_model"] = {"type": "fixed", "prefill_ms": rng.choice([0.5, 5.0, 10.0, 33.3]),
                             "decode_ms": rng.choice([0.25, 1.0, 2.5])}
    # keep most cases runnable: prompts that can never be scheduled make the reference abort
    # ("replay invariant violated: ...") — still exercised in ~20% of such cases for error parity
    if e.get("enable_chunked_prefill") is False and rng.random() < 0.8:
        e["max_num_batched_tokens"] = rng.choice([None, max_need_tokens + rng.randint(0, 500)])
    if backend == "sglang" and "num_gpu_blocks" not in e and 16384 * bs < 2 * max_need_tokens \
            and rng.random() < 0.8:
        e["num_gpu_blocks"] = 2 * (-(-max_need_tokens // bs))
    if backend == "sglang":
        sg = {}
        if rng.random() < 0.4:
            sg["schedule_policy"] = rng.choice(["fifo", "lpm"])
        if rng.random() < 0.3:
            # must be divisible by block_size ("sglang.chunked_prefill_size must be divisible by block_size")
            sg["chunked_prefill_size"] = bs * rng.choice([1, 2, 4, 16, 64])
        if rng.random() < 0.3:
            sg["max_prefill_tokens"] = rng.choice([128, 1024, 8192])
        if rng.random() < 0.2:
            sg["clip_max_new_tokens"] = rng.choice([16, 256, 4096])
        if rng.random() < 0.2:
            sg["schedule_conservativeness"] = rng.choice([0.3, 1.0, 2.0])
        if rng.random() < 0.2:
            e["prefill_decode_interval"] = rng.choice([1, 2, 5])
        if 8192 % bs and "chunked_prefill_size" not in sg:
            sg["chunked_prefill_size"] = bs * rng.choice([1, 4, 64])
        if sg:
            e["sglang"] = sg
    return e


def gen_run_kwargs(rng: random.Random, trace=True):
    kw = {"router_mode": "round_robin"}
    if rng.random() < 0.4:
        kw["num_workers"] = rng.randint(2, 3)
    if rng.random() < 0.15:
        kw["arrival_speedup_ratio"] = rng.choice([0.5, 2.0, 3.0])
    if trace and rng.random() < 0.1:  # the synthetic entrypoint has no max_sim_time_ms
        kw["max_sim_time_ms"] = rng.choice([50.0, 500.0, 3000.0])
    u = rng.random()
    if u < 0.1:
        kw["sla_e2e_ms"] = rng.choice([100.0, 1000.0, 10000.0])
    elif u < 0.2:
        kw["sla_ttft_ms"] = rng.choice([20.0, 200.0, 2000.0])
        if rng.random() < 0.5:
            kw["sla_itl_ms"] = rng.choice([5.0, 8.0, 20.0])
    return kw


def apply_topology(rng: random.Random, sc: dict, topology: str) -> dict:
    """Turn an aggregated scenario into a data-parallel or disaggregated one (deterministic
    placements only: round robin, or the KV router over one prefill and one decode worker)."""
    kw = sc["kwargs"]
    eng = json.loads(kw.pop("extra_engine_args"))["engine"] if kw.get("extra_engine_args") else {}
    if topology == "dp":
        top = {"engine": eng, "dp_size": rng.randint(2, 4)}
        if sc["backend"] == "vllm" and rng.random() < 0.5:
            eng["prefill_schedule_interval"] = rng.randint(1, 4)
        kw["extra_engine_args"] = json.dumps(top)
        return sc
    # disaggregated (both pools of the drawn backend): prefill and decode engines derived from
    # the drawn one
    kw.pop("num_workers", None)
    pe = dict(eng, worker_type="prefill")
    de = dict(eng, worker_type="decode")
    if rng.random() < 0.5:
        pe["kv_transfer_bytes_per_token"] = rng.choice([1000, 131072, 1000000])
        pe["kv_transfer_bandwidth"] = rng.choice([0.5, 5.0, 50.0])
        if rng.random() < 0.5:
            pe["kv_transfer_timing_mode"] = "destination_missing"
    if rng.random() < 0.3 and "num_gpu_blocks" in de:
        de["num_gpu_blocks"] = max(8, de["num_gpu_blocks"] // 2)
    if rng.random() < 0.5:
        kw["router_mode"] = "kv_router"
    else:
        kw["num_prefill_workers"] = rng.randint(1, 2)
        kw["num_decode_workers"] = rng.randint(1, 2)
    kw["prefill_engine_args"] = json.dumps({"engine": pe})
    kw["decode_engine_args"] = json.dumps({"engine": de})
    return sc


def gen_scenario(rng: random.Random, backend_opt: str, topology: str = "agg"):
    if topology != "agg":
        if topology == "dp":
            backend = backend_opt
        elif backend_opt == "mix":
            backend = rng.choice(["vllm", "vllm", "sglang"])
        else:
            # disaggregated pools: vLLM (source first) or SGLang (destination first); TRT-LLM
            # pools are drawn only when asked for explicitly
            backend = backend_opt
        sc = gen_scenario(rng, backend)
        return apply_topology(rng, sc, topology)
    backend = backend_opt if backend_opt != "mix" else rng.choice(["vllm", "vllm", "trtllm", "sglang"])
    if rng.random() < 0.15:
        # synthetic
        isl = rng.choice([1, 10, 100, 1000, 3000])
        osl = rng.choice([1, 2, 20, 100])
        count = rng.randint(1, 60)
        kw = gen_run_kwargs(rng, trace=False)
        u = rng.random()
        if u < 0.4:
            kw["request_rate"] = rng.choice([1.0, 10.0, 50.0, 200.0])
            if rng.random() < 0.3:
                kw["arrival_seed"] = rng.randint(0, 1000)
        elif u < 0.7:
            kw["arrival_interval_ms"] = rng.choice([0.0, 0.0, 5.0, 50.0])
        else:
            kw["replay_concurrency"] = rng.randint(1, 8)
            kw.pop("arrival_speedup_ratio", None)   # no effect in closed loop: mocker refuses it
        if rng.random() < 0.3:
            kw["turns_per_session"] = rng.randint(2, 3)
            kw["inter_turn_delay_ms"] = rng.choice([0.0, 10.0, 100.0])
        if rng.random() < 0.3:
            kw["shared_prefix_ratio"] = rng.choice([0.25, 0.5, 1.0])
            kw["num_prefix_groups"] = rng.randint(0, 4)
        eng = gen_engine(rng, backend, isl + osl)
        if eng:
            kw["extra_engine_args"] = json.dumps({"engine": eng})
        return {"kind": "synthetic", "args": [isl, osl, count], "kwargs": kw, "backend": backend}
    lines, tkw = gen_trace(rng)
    need = 0
    for ln in lines:
        d = json.loads(ln)
        isl = d.get("input_length", d.get("input_tokens", len(d["hash_ids"]) * tkw.get("trace_block_size", 512)))
        need = max(need, isl + d.get("output_length", d.get("output_tokens", 0)))
    if tkw.get("trace_format") == "mooncake-delta":
        need *= 3  # cumulative prompts grow
    kw = gen_run_kwargs(rng)
    kw.update(tkw)
    if rng.random() < 0.2:
        kw["replay_concurrency"] = rng.randint(1, 6)
        kw.pop("arrival_speedup_ratio", None)       # no effect in closed loop: mocker refuses it
    eng = gen_engine(rng, backend, need)
    if eng:
        kw["extra_engine_args"] = json.dumps({"engine": eng})
    return {"kind": "trace", "trace_lines": lines, "kwargs": kw, "backend": backend}


# ------------------------------------------------------------------------------------------------
# running & shrinking
# ------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, core, worker, tmpdir, quiet, ref_timeout_s=None):
        self.core, self.worker, self.tmpdir, self.quiet = core, worker, tmpdir, quiet
        self.ref_timeout_s = ref_timeout_s
        self.runs = 0
        self.ref_timeouts = []

    def payload(self, sc):
        p = {"kind": sc["kind"], "kwargs": sc["kwargs"]}
        paths = []
        if sc["kind"] == "trace":
            path = os.path.join(self.tmpdir, "trace.jsonl")
            with open(path, "w") as fh:
                fh.writelines(ln + "\n" for ln in sc["trace_lines"])
            p["trace_files"] = [path]
            paths.append(path)
        else:
            p["args"] = sc["args"]
        return p, paths

    def compare(self, sc):
        self.runs += 1
        p, paths = self.payload(sc)
        ref = run_ref(self.core, p, self.quiet, self.ref_timeout_s, self.tmpdir)
        if ref.get("error_type") == "RefTimeout":
            # the reference itself did not finish: nothing to compare against
            self.ref_timeouts.append(copy.deepcopy(sc))
            return None, ref, {"ok": False, "error_type": "Skipped", "message": "reference timed out"}
        ours = self.worker.run(p, self.tmpdir)
        return first_difference(ours, ref, paths), ref, ours


def _engine(sc):
    s = sc["kwargs"].get("extra_engine_args")
    return json.loads(s)["engine"] if s else {}


def _with_engine(sc, eng):
    sc = copy.deepcopy(sc)
    if eng:
        sc["kwargs"]["extra_engine_args"] = json.dumps({"engine": eng})
    else:
        sc["kwargs"].pop("extra_engine_args", None)
    return sc


def shrink(runner, sc, deadline, log):
    """Greedy: drop trace lines, then run kwargs, then engine keys, while some mismatch persists."""
    best = copy.deepcopy(sc)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        if best["kind"] == "trace":
            i = 0
            while i < len(best["trace_lines"]) and len(best["trace_lines"]) > 1:
                if time.monotonic() > deadline:
                    break
                cand = copy.deepcopy(best)
                del cand["trace_lines"][i]
                diff, _, _ = runner.compare(cand)
                if diff is not None and not diff.startswith("error message differs") :
                    best, changed = cand, True
                    log(f"  shrink: dropped line {i} -> {len(best['trace_lines'])} lines")
                else:
                    i += 1
        else:
            while best["args"][2] > 1 and time.monotonic() < deadline:
                cand = copy.deepcopy(best)
                cand["args"][2] = max(1, cand["args"][2] // 2)
                diff, _, _ = runner.compare(cand)
                if diff is None:
                    break
                best, changed = cand, True
                log(f"  shrink: request_count -> {best['args'][2]}")
        for key in [k for k in list(best["kwargs"]) if k not in ("router_mode", "extra_engine_args",
                                                                   "request_rate", "arrival_interval_ms")]:
            if time.monotonic() > deadline:
                break
            cand = copy.deepcopy(best)
            del cand["kwargs"][key]
            if best["kind"] == "synthetic" and key == "replay_concurrency":
                continue
            diff, _, _ = runner.compare(cand)
            if diff is not None:
                best, changed = cand, True
                log(f"  shrink: removed kwarg {key}")
        eng = _engine(best)
        for key in list(eng):
            if time.monotonic() > deadline:
                break
            e2 = dict(eng)
            del e2[key]
            cand = _with_engine(best, e2)
            diff, _, _ = runner.compare(cand)
            if diff is not None:
                best, eng, changed = cand, e2, True
                log(f"  shrink: removed engine.{key}")
    return best


def save_repro(out_dir, name, sc, diff, ref, ours, meta):
    os.makedirs(out_dir, exist_ok=True)
    g = {"name": name, "kind": sc["kind"], "description": f"diff_fuzz reproducer: {diff}"}
    if sc["kind"] == "trace":
        g["trace_lines"] = sc["trace_lines"]
    else:
        g["args"] = sc["args"]
    g["kwargs"] = sc["kwargs"]
    if ref["ok"]:
        g["summary"] = ref["summary"]
        g["per_request"] = sorted(ref["per_request"], key=canonical_key)
    else:
        g["ref_error"] = {"error_type": ref["error_type"], "message": ref["message"]}
    g["mismatch"] = diff
    g["ours"] = ours
    g["fuzz"] = meta
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as fh:
        json.dump(g, fh, indent=1)
    return path


def reproducer_text(sc):
    lines = ["# minimal reproducer", f"kind: {sc['kind']}", "kwargs: " + json.dumps(sc["kwargs"])]
    if sc["kind"] == "trace":
        lines.append("trace_lines:")
        lines.extend("  " + ln for ln in sc["trace_lines"])
    else:
        lines.append(f"args (input_tokens, output_tokens, request_count): {sc['args']}")
    return "\n".join(lines)


def _check_repro(args, core, worker) -> int:
    """Re-run a saved reproducer; shrink it further unless --no-shrink."""
    with open(args.repro) as fh:
        saved = json.load(fh)
    sc = saved.get("fuzz", {}).get("original") or {k: saved[k] for k in ("kind", "trace_lines", "args", "kwargs")
                                                   if k in saved}
    sc.setdefault("backend", saved.get("fuzz", {}).get("backend", args.backend))
    with tempfile.TemporaryDirectory(prefix="diff_fuzz_") as tmpdir:
        runner = Runner(core, worker, tmpdir, quiet=not args.verbose, ref_timeout_s=args.ref_timeout_s)
        try:
            diff, _, _ = runner.compare(sc)
            print(f"reproducer {args.repro}: {'OK (no mismatch)' if diff is None else diff}")
            if diff is None:
                return 0
            if not args.no_shrink:
                sc = shrink(runner, sc, time.monotonic() + args.shrink_time_s, print)
                diff, _, _ = runner.compare(sc)
                print(f"shrunk: {diff}")
            print(reproducer_text(sc))
            return 1
        finally:
            worker.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description="differential fuzzer: mocker vs ai-dynamo-runtime 1.6.1")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default: time-based)")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--time-limit-s", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--backend", choices=["vllm", "trtllm", "sglang", "mix"], default="vllm")
    ap.add_argument("--topology", choices=["agg", "dp", "disagg"], default="agg",
                    help="dp: dp_size 2-4 (and prefill_schedule_interval); disagg: prefill/decode pools "
                         "of --backend (mix: vLLM or SGLang)")
    ap.add_argument("--ours-python", default=shutil.which("python3") or "python3",
                    help="interpreter that can import our `mocker` package (default: python3 on PATH)")
    ap.add_argument("--out", default="fuzz_repros", help="directory for reproducers")
    ap.add_argument("--keep-going", action="store_true", help="continue after a mismatch")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-time-s", type=float, default=120.0)
    ap.add_argument("--case-timeout-s", type=float, default=300.0, help="timeout for one run of ours")
    ap.add_argument("--ref-timeout-s", type=float, default=60.0,
                    help="abandon a case if the reference has not finished (0 = run in-process, no timeout)")
    ap.add_argument("--skip-ref-errors", action="store_true",
                    help="do not compare scenarios where the reference raises")
    ap.add_argument("--verbose", action="store_true", help="show reference log output and every case")
    ap.add_argument("--repro", default=None, metavar="PATH",
                    help="re-check (and shrink) a saved reproducer instead of drawing new cases")
    args = ap.parse_args(argv)

    try:
        from dynamo import _core as core
    except ImportError as e:
        print(f"cannot import the reference (run this with the reference venv python): {e}", file=sys.stderr)
        return 2

    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"diff_fuzz: seed={seed} backend={args.backend} ours={args.ours_python}", flush=True)
    worker = OursWorker(args.ours_python, args.case_timeout_s)
    try:
        worker.start()
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.repro:
        return _check_repro(args, core, worker)
    t0 = time.monotonic()
    found = 0
    ref_errors = 0
    log = print
    with tempfile.TemporaryDirectory(prefix="diff_fuzz_") as tmpdir:
        runner = Runner(core, worker, tmpdir, quiet=not args.verbose, ref_timeout_s=args.ref_timeout_s)
        it = 0
        try:
            for it in range(args.iterations):
                if args.time_limit_s is not None and time.monotonic() - t0 > args.time_limit_s:
                    break
                case_seed = seed * 1_000_003 + it
                rng = random.Random(case_seed)
                sc = gen_scenario(rng, args.backend, args.topology)
                if args.skip_ref_errors:
                    p, _ = runner.payload(sc)
                    if not run_ref(core, p, runner.quiet, args.ref_timeout_s, tmpdir)["ok"]:
                        ref_errors += 1
                        continue
                diff, ref, ours = runner.compare(sc)
                if not ref["ok"]:
                    ref_errors += 1
                if args.verbose:
                    print(f"[{it}] {sc['backend']} {sc['kind']} -> {'OK' if diff is None else diff}", flush=True)
                if diff is None:
                    continue
                found += 1
                print(f"\nMISMATCH at iteration {it} (case seed {case_seed}, backend {sc['backend']}): {diff}",
                      flush=True)
                small = sc
                if not args.no_shrink:
                    small = shrink(runner, sc, time.monotonic() + args.shrink_time_s, log)
                    small["backend"] = sc["backend"]
                diff2, ref2, ours2 = runner.compare(small)
                if diff2 is None:  # should not happen; keep the original
                    small, diff2, ref2, ours2 = sc, diff, ref, ours
                print(f"first mismatch (shrunk): {diff2}")
                print(reproducer_text(small))
                if not ours2.get("ok", True) and ours2.get("traceback"):
                    print("ours traceback (tail):\n" + ours2["traceback"])
                name = f"fuzz_{args.backend}_{seed}_{it}"
                path = save_repro(args.out, name, small, diff2, ref2, ours2,
                                  {"seed": seed, "iteration": it, "case_seed": case_seed,
                                   "backend": sc["backend"], "original": sc})
                print(f"saved reproducer: {path}", flush=True)
                if not args.keep_going:
                    break
        finally:
            worker.stop()
    dt = time.monotonic() - t0
    if runner.ref_timeouts:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"ref_timeouts_{args.backend}_{seed}.json")
        with open(path, "w") as fh:
            json.dump(runner.ref_timeouts, fh, indent=1)
        print(f"{len(runner.ref_timeouts)} case(s) where the reference timed out saved to {path}")
    print(f"\ndiff_fuzz: {it + 1} iterations, {runner.runs} comparisons, {ref_errors} reference errors, "
          f"{found} mismatches, {dt:.1f}s")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
