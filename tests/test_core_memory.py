"""The compiled core under allocation failure and out-of-range sizes / indices.

An allocation failure must surface as a Python MemoryError at the call into the core (never
``std::terminate`` / exit 134, never "Exception ignored" with the run going on); counts that
become 32-bit ids are refused with a ValueError before anything is allocated; Python-callable
accessors raise IndexError on rows and ranks they do not have.  Allocation failures are provoked
in a child process whose address space is capped with ``RLIMIT_AS``.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import ROOT
from mocker.config import normalize_config, normalize_router_config
from mocker._core.blocks import BlockPool
from mocker._core.live import LiveCore
from mocker._core.radix import RadixCache
from mocker._core.router import KvRouter
from mocker._core.sglang import SglangRank
from mocker._core.table import ReqTable
from mocker._core.vllm import VllmRank

INT32_MAX = 2**31 - 1

_PRELUDE = """
import resource
def limit(extra):
    # cap the address space at what the process maps now plus `extra` bytes
    vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, vm + extra))
"""

# one request whose prompt is a single range run of `tokens` tokens (one id per block), 1 output
_WORKLOAD = """
import numpy as np
def workload(tokens, bs):
    return dict(run_off=np.array([0, 1], np.int64), run_kind=np.array([2], np.int8),
                run_v=np.array([1], np.uint64), run_start=np.array([bs], np.int64),
                run_n=np.array([tokens], np.int64), next_turn=np.array([-1], np.int32),
                delay_ms=np.array([0.0]), output_length=np.array([1], np.int64),
                session_heads=np.array([0], np.int32), head_arrival_ms=np.array([0.0]))
"""


def _child(body: str) -> subprocess.CompletedProcess:
    if not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_AS and /proc/self/status as on Linux")
    code = _PRELUDE + _WORKLOAD + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))


def _assert_memory_error(p: subprocess.CompletedProcess, *frames: str) -> None:
    # exit 1 with a Python traceback (not -6 / 134 from std::terminate, not a swallowed error)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "terminate called" not in p.stderr
    assert "Exception ignored" not in p.stderr
    assert p.stderr.rstrip().splitlines()[-1].startswith("MemoryError"), p.stderr[-2000:]
    for f in frames:
        assert f in p.stderr, (f, p.stderr[-2000:])


# -- pools that cannot be allocated ---------------------------------------------------------------

def test_sglang_rank_with_a_billion_pages_raises_memory_error():
    # the D6 configuration at the core: the radix cache's constructor used vector.assign, which
    # libcpp does not declare `except +`, so std::bad_alloc terminated the process (exit 134)
    p = _child("""
        from mocker.config import normalize_config
        from mocker._core.table import ReqTable
        from mocker._core.sglang import SglangRank
        eng = normalize_config({"engine": {"backend": "sglang", "num_gpu_blocks": 1000000000}})["engine"]
        t = ReqTable(16, eng["block_size"])
        limit(1 << 30)
        SglangRank(t, eng)
    """)
    _assert_memory_error(p, "RadixCache.__cinit__")


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_replay_with_the_d6_pool_ends_in_a_python_error(backend):
    # through the public entry point: the Python layer may refuse the pool up front (its memory
    # check) or the core raises MemoryError; either way one Python exception and exit 1
    p = _child(f"""
        from mocker.replay import run_trace_replay
        limit(1 << 30)
        run_trace_replay("examples/mooncake_tiny.jsonl",
                         {{"engine": {{"backend": "{backend}", "num_gpu_blocks": 1000000000}}}})
    """)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "terminate called" not in p.stderr
    last = p.stderr.rstrip().splitlines()[-1]
    assert last.startswith(("MemoryError", "mocker.errors.ConfigError")), p.stderr[-2000:]


# -- allocation failures in the middle of a run (inside the nogil loop) -------------------------

def test_growth_failure_mid_run_propagates_out_of_advance():
    # a 2M-block prompt on a pool that holds it: the first pass hashes it, grows its block table
    # and publishes 2M blocks to the prefix index, far beyond the 32 MB left to the process;
    # the push_back / insert that fails is deep inside ReplayCore.advance (no GIL)
    p = _child("""
        from mocker.config import normalize_config
        from mocker._core.table import ReqTable
        from mocker._core.vllm import VllmRank
        from mocker._core.replay import ReplayCore
        eng = normalize_config({"engine": {"backend": "vllm", "num_gpu_blocks": 2_200_000}})["engine"]
        bs = eng["block_size"]
        t = ReqTable(1, bs)
        core = ReplayCore(t, [VllmRank(t, eng)], workload(2_000_000 * bs, bs))
        limit(32 << 20)
        core.advance()
    """)
    _assert_memory_error(p, "ReplayCore._advance", "VllmRank.step")


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_allocation_failure_in_a_pass_stops_the_replay_for_good(backend):
    # a 2**40-token prompt: hashing it reserves 2**34 hashes (128 GiB) inside the pass (SGLang:
    # admission; vLLM: the KV router at arrival).  The MemoryError reaches the caller, and the
    # half-updated core refuses to go on instead of running on inconsistent state
    p = _child(f"""
        import math
        from mocker.config import normalize_config, normalize_router_config
        from mocker._core.table import ReqTable
        from mocker._core.sglang import SglangRank
        from mocker._core.vllm import VllmRank
        from mocker._core.router import KvRouter
        from mocker._core.replay import ReplayCore
        eng = normalize_config({{"engine": {{"backend": "{backend}", "emit_kv_events": True}}}})["engine"]
        bs = eng["block_size"]
        t = ReqTable(1, bs)
        if "{backend}" == "sglang":
            ranks, router = [SglangRank(t, eng)], None
        else:
            ranks, router = [VllmRank(t, eng)], KvRouter(t, 1, bs, normalize_router_config({{}}))
        core = ReplayCore(t, ranks, workload(2**40, bs), 0, math.inf, False, router)
        limit(1 << 30)
        try:
            core.advance()
        except MemoryError:
            print("MemoryError from advance")
        try:
            core.advance()
        except RuntimeError as e:
            print("then:", e)
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Exception ignored" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "MemoryError from advance"
    assert lines[1].startswith("then: this replay failed earlier (MemoryError)")


def test_sizes_at_the_id_limit_pass_the_check_and_fail_cleanly():
    # the largest counts that fit 32-bit ids are accepted and then fail to allocate: MemoryError
    p = _child("""
        from mocker.config import normalize_router_config
        from mocker._core.blocks import BlockPool
        from mocker._core.radix import RadixCache
        from mocker._core.router import KvRouter
        from mocker._core.table import ReqTable
        t = ReqTable(4)
        cfg = normalize_router_config({})
        limit(1 << 30)
        for make in (lambda: ReqTable(2**31 - 1), lambda: BlockPool(2**31 - 1),
                     lambda: RadixCache(2**31 - 1), lambda: KvRouter(t, 2**31 - 1, 64, cfg)):
            try:
                make()
                print("allocated")
            except MemoryError:
                print("MemoryError")
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["MemoryError"] * 4


# -- counts that do not fit 32-bit ids ------------------------------------------------------------

_WIDTH_CASES = {
    # name: (constructor call, expected ValueError text)
    "table rows 2**31": ("ReqTable(2**31)", f"request table rows must be between 0 and {INT32_MAX}, got {2**31}"),
    "table rows 2**40": ("ReqTable(2**40)", f"request table rows must be between 0 and {INT32_MAX}, got {2**40}"),
    "table rows -1": ("ReqTable(-1)", f"request table rows must be between 0 and {INT32_MAX}, got -1"),
    # range(<slot_t>capacity - 1, ...) used to truncate silently at 2**31
    "block pool 2**31": ("BlockPool(2**31)",
                         f"block pool capacity (num_gpu_blocks) must be between 0 and {INT32_MAX}, got {2**31}"),
    "block pool -5": ("BlockPool(-5)", f"block pool capacity (num_gpu_blocks) must be between 0 and {INT32_MAX}, got -5"),
    "radix 2**33": ("RadixCache(2**33)",
                    f"radix cache capacity (num_gpu_blocks) must be between 0 and {INT32_MAX}, got {2**33}"),
    "vllm rank 2**31": ("VllmRank(ReqTable(4), engine('vllm', 2**31))",
                        f"block pool capacity (num_gpu_blocks) must be between 0 and {INT32_MAX}, got {2**31}"),
    "sglang rank 2**31": ("SglangRank(ReqTable(4), engine('sglang', 2**31))",
                          f"radix cache capacity (num_gpu_blocks) must be between 0 and {INT32_MAX}, got {2**31}"),
    "router workers 2**31": ("KvRouter(ReqTable(4), 2**31, 64, normalize_router_config({}))",
                             f"router workers must be between 0 and {INT32_MAX}, got {2**31}"),
}


def test_counts_beyond_int32_are_refused_before_allocating():
    # in a capped child, so that a core which did allocate fails with MemoryError (rather than
    # filling the machine's memory)
    p = _child(f"""
        from mocker.config import normalize_config, normalize_router_config
        from mocker._core.blocks import BlockPool
        from mocker._core.radix import RadixCache
        from mocker._core.router import KvRouter
        from mocker._core.sglang import SglangRank
        from mocker._core.table import ReqTable
        from mocker._core.vllm import VllmRank
        def engine(backend, blocks):
            # (past the config's own limit: the core checks too)
            return dict(normalize_config({{"engine": {{"backend": backend}}}})["engine"], num_gpu_blocks=blocks)
        limit(1 << 30)
        for call in {[c for c, _ in _WIDTH_CASES.values()]!r}:
            try:
                eval(call)
                print("accepted")
            except Exception as e:
                print(type(e).__name__ + ": " + str(e))
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    got = dict(zip(_WIDTH_CASES, p.stdout.splitlines()))
    assert got == {name: "ValueError: " + msg for name, (_, msg) in _WIDTH_CASES.items()}


def test_zero_block_size_is_refused():
    # (a division by zero in nogil code with cdivision would be SIGFPE)
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        ReqTable(4, 0)
    eng = dict(normalize_config({"engine": {"backend": "vllm"}})["engine"], block_size=0)
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        VllmRank(ReqTable(4), eng)


# -- Python-callable accessors with caller-supplied rows and ranks ---------------------------------

def _live(backend="vllm", dp=1):
    cfg = normalize_config({"engine": {"backend": backend, "num_gpu_blocks": 64}})
    t = ReqTable(0, cfg["engine"]["block_size"])
    ranks = [(VllmRank if backend == "vllm" else SglangRank)(t, cfg["engine"]) for _ in range(dp)]
    return LiveCore(t, ranks)


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
@pytest.mark.parametrize("method", ["status", "rejected", "prompt_len", "generated", "max_output", "reused_first"])
def test_live_row_accessors_raise_index_error(backend, method):
    core = _live(backend)
    r = core.submit(np.arange(10), 4, 0)
    assert getattr(core, method)(r) is not None          # a row it handed out works
    for bad in (10**8, r + 1, -1):
        with pytest.raises(IndexError, match=rf"request row {bad} out of range \[0, 1\)"):
            getattr(core, method)(bad)


@pytest.mark.parametrize("method", ["kv_events", "cached_hashes", "rank_metrics", "pass_fpm", "pass_stats"])
def test_live_rank_accessors_raise_index_error(method):
    core = _live(dp=2)
    getattr(core, method)(1)
    for bad in (2, 10**6, -1):
        with pytest.raises(IndexError, match=rf"rank {bad} out of range \[0, 2\)"):
            getattr(core, method)(bad)


def test_table_rank_and_router_views_raise_index_error():
    eng = normalize_config({"engine": {"backend": "vllm", "num_gpu_blocks": 64}})["engine"]
    t = ReqTable(3, eng["block_size"])
    t.set_prompt(2, range(5), 3)
    assert t.request_state(2)["prompt_len"] == 5
    for call in (lambda: t.request_state(3), lambda: t.request_state(-1),
                 lambda: t.set_prompt(10**8, [1], 1), lambda: VllmRank(t, eng).submit(3)):
        with pytest.raises(IndexError, match="request row .* out of range"):
            call()
    router = KvRouter(t, 2, eng["block_size"], normalize_router_config({}))
    assert router.decisions_of([0])[0][0] == -1
    with pytest.raises(IndexError, match=r"request row 3 out of range \[0, 3\)"):
        router.decisions_of([0, 3])
    assert router.cached_hashes(1) == set()
    with pytest.raises(IndexError, match=r"worker 2 out of range \[0, 2\)"):
        router.cached_hashes(2)
