"""Live metrics (docs/live.md §5, checklist 54-56): native Prometheus families and forward-pass metrics."""
from __future__ import annotations

import asyncio
import logging

import msgpack
import pytest

from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from mocker.events.metrics import (  # noqa: E402
    FPM_TOPIC,
    ForwardPassSnapshot,
    FpmPublisher,
    MockerMetrics,
    PrometheusMetrics,
    encode_fpm,
    heartbeat_interval_from_env,
)


# ---------------------------------------------------------------------------------------------- helpers

def scrape(pm: PrometheusMetrics) -> dict[str, list]:
    """Sample name -> list of (labels, value), parsed back from the served text."""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(pm.exposition().decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def families(pm: PrometheusMetrics) -> dict[str, str]:
    """Family name as written on the ``# TYPE`` line -> type."""
    types = {}
    for line in pm.exposition().decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
    return types


def value(pm: PrometheusMetrics, sample: str, **labels: str) -> float:
    matches = [v for lab, v in scrape(pm).get(sample, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(matches) == 1, (sample, labels, matches)
    return matches[0]


def hist_count(pm: PrometheusMetrics, name: str) -> float:
    return sum(v for _, v in scrape(pm).get(f"{name}_count", []))


def buckets_of(pm: PrometheusMetrics, name: str) -> list[float]:
    les = {lab["le"] for lab, _ in scrape(pm)[f"{name}_bucket"]}
    return sorted(float(le) for le in les if le != "+Inf")


# ---------------------------------------------------------------------------------------------- docs/live.md §5.1

def test_mocker_metrics_snapshot():
    m = MockerMetrics(0, 3, 12, 2, 4, 5, 0, 0)
    assert m.gpu_cache_usage_perc == 0.25
    assert MockerMetrics.initial(3, 0).gpu_cache_usage_perc == 0.0
    init = MockerMetrics.initial(2, 16384)
    assert (init.dp_rank, init.active_decode_blocks, init.total_blocks, init.running_requests,
            init.waiting_requests, init.vllm_preemptions_total) == (2, 0, 16384, 0, 0, 0)
    with pytest.raises(AttributeError):
        m.running_requests = 1  # frozen


# ---------------------------------------------------------------------------------------------- docs/live.md §5.3 vLLM (54)

def test_vllm_gauges_per_engine_label_and_exact_names():
    pm = PrometheusMetrics("vllm", dp_size=2)
    pm.update([MockerMetrics(0, 3, 10, 2, 4, 5), MockerMetrics(1, 4, 10, 7, 8, 1)])
    assert scrape(pm) == {}            # no model name yet: no series, nothing to scrape
    pm.set_model_name("llama")

    assert value(pm, "vllm:num_requests_running", engine="0") == 2
    assert value(pm, "vllm:num_requests_running", engine="1") == 7
    assert value(pm, "vllm:num_requests_waiting", engine="1") == 8
    assert value(pm, "vllm:kv_cache_usage_perc", engine="0") == pytest.approx(0.3)
    assert value(pm, "vllm:gpu_cache_usage_perc", engine="1") == pytest.approx(0.4)
    # Counters caught up with the snapshots held before the model name was known.
    assert value(pm, "vllm:num_preemptions_total", engine="0") == 5
    for labels, _ in scrape(pm)["vllm:num_requests_running"]:
        assert set(labels) == {"model_name", "engine"} and labels["model_name"] == "llama"

    types = families(pm)
    assert types == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:gpu_cache_usage_perc": "gauge",
        "vllm:num_preemptions_total": "counter",
        "vllm:prefix_cache_queries_total": "counter",
        "vllm:prefix_cache_hits_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
    }
    text = pm.exposition().decode()
    assert "dynamo_component_" not in text and "vllm_" not in text and "_created" not in text
    assert pm.content_type.startswith("text/plain")


def test_vllm_preemptions_monotonic():
    pm = PrometheusMetrics("vllm")
    pm.set_model_name("m")
    seen = []
    for cumulative in (3, 3, 2, 5):
        pm.update([MockerMetrics(0, 0, 10, vllm_preemptions_total=cumulative)])
        seen.append(value(pm, "vllm:num_preemptions_total", engine="0"))
    assert seen == [3, 3, 3, 5]


def test_vllm_prefix_cache_counters_once_per_request():
    pm = PrometheusMetrics("vllm", dp_size=2)
    t = pm.request_timer(False, dp_rank=0, model_name="llama")
    t.record_prefix_cache(256, 128)
    t.record_prefix_cache(256, 128)    # same request: counted once
    t.on_tokens(1)
    t.on_complete()
    pm.request_timer(False, dp_rank=0).record_prefix_cache(64, 0)
    prefill = pm.request_timer(True, dp_rank=1)      # prefill workers count the lookup too
    prefill.record_prefix_cache(512, 384)
    prefill.on_tokens(1)
    prefill.on_complete()

    assert sum(v for _, v in scrape(pm)["vllm:prefix_cache_queries_total"]) == 832
    assert sum(v for _, v in scrape(pm)["vllm:prefix_cache_hits_total"]) == 512
    assert value(pm, "vllm:prefix_cache_queries_total", engine="1") == 512
    # Only the decode-side request recorded latency.
    assert hist_count(pm, "vllm:time_to_first_token_seconds") == 1
    assert hist_count(pm, "vllm:e2e_request_latency_seconds") == 1

    # The direct form counts every call, clamps hits to the prompt.
    pm.record_prefix_cache(10, 50)
    assert value(pm, "vllm:prefix_cache_hits_total", engine="0") == 128 + 10


def test_vllm_request_timing_rules():
    pm = PrometheusMetrics("vllm")
    pm.set_model_name("m")
    t = pm.request_timer(False, start_s=100.0)
    t.on_tokens(0, 100.25)             # empty emission: not the first token
    t.on_tokens(1, 100.5)              # TTFT 0.5
    t.on_tokens(4, 101.0)              # ITL 0.5 / 4 = 0.125, observed 4 times
    t.on_complete(102.0)               # E2E 2.0
    t.on_complete(103.0)               # once only
    s = scrape(pm)
    assert s["vllm:time_to_first_token_seconds_count"][0][1] == 1
    assert s["vllm:time_to_first_token_seconds_sum"][0][1] == 0.5
    assert s["vllm:inter_token_latency_seconds_count"][0][1] == 4
    assert s["vllm:inter_token_latency_seconds_sum"][0][1] == 0.5
    itl_buckets = {lab["le"]: v for lab, v in s["vllm:inter_token_latency_seconds_bucket"]}
    assert (itl_buckets["0.1"], itl_buckets["0.15"], itl_buckets["+Inf"]) == (0, 4, 4)
    ttft_buckets = {lab["le"]: v for lab, v in s["vllm:time_to_first_token_seconds_bucket"]}
    assert (ttft_buckets["0.25"], ttft_buckets["0.5"]) == (0, 1)      # le is inclusive
    assert s["vllm:e2e_request_latency_seconds_count"][0][1] == 1
    assert s["vllm:e2e_request_latency_seconds_sum"][0][1] == 2.0


def test_vllm_and_trtllm_bucket_lists():
    for engine in ("vllm", "trtllm"):
        pm = PrometheusMetrics(engine)
        pm.set_model_name("m")
        assert buckets_of(pm, f"{engine}:time_to_first_token_seconds") == [
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40,
            80, 160, 640, 2560]
        assert buckets_of(pm, f"{engine}:inter_token_latency_seconds") == [
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80]
        assert buckets_of(pm, f"{engine}:e2e_request_latency_seconds") == [
            0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680]


def test_trtllm_prefix_and_no_prefix_counters():
    pm = PrometheusMetrics("trtllm")
    pm.set_model_name("m")
    pm.update([MockerMetrics(0, 1, 4, 2, 3, 0)])
    pm.record_prefix_cache(100, 50)    # vLLM-only family: ignored
    types = families(pm)
    assert "trtllm:num_requests_running" in types and "trtllm:num_preemptions_total" in types
    assert not any(name.startswith("vllm:") for name in types)
    assert value(pm, "trtllm:kv_cache_usage_perc", engine="0") == 0.25


def test_model_name_first_wins_with_one_warning(caplog):
    pm = PrometheusMetrics("vllm")
    with caplog.at_level(logging.WARNING, logger="mocker.events.metrics"):
        assert pm.set_model_name(" first ") == "first"
        assert pm.set_model_name("second") == "first"
        pm.request_timer(False, model_name="third")
    assert len([r for r in caplog.records if "model_name" in r.getMessage()]) == 1
    assert {lab["model_name"] for lab, _ in scrape(pm)["vllm:num_requests_running"]} == {"first"}
    with pytest.raises(ValueError):
        pm.set_model_name("  ")


def test_no_model_name_records_nothing_and_engines_do_not_collide():
    a, b = PrometheusMetrics("vllm"), PrometheusMetrics("vllm")     # separate registries
    t = a.request_timer(False)
    t.record_prefix_cache(10, 5)
    t.on_tokens(1)
    t.on_complete()
    assert not t.enabled and scrape(a) == {}
    shared = CollectorRegistry()
    PrometheusMetrics("vllm", shared)
    PrometheusMetrics("sglang", shared)                              # different names: fine
    with pytest.raises(ValueError):
        PrometheusMetrics("vllm", shared)                            # same names: refused
    with pytest.raises(ValueError, match="engine_type"):
        PrometheusMetrics("tgi")


# ---------------------------------------------------------------------------------------------- docs/live.md §5.3 SGLang (55)

def test_sglang_scheduler_sums_and_hit_rate():
    pm = PrometheusMetrics("sglang", dp_size=2)
    pm.set_model_name("qwen")
    pm.update([MockerMetrics(0, 0, 10, 1, 3, 0, 30, 40), MockerMetrics(1, 0, 10, 4, 5, 0, 10, 40)])
    labels = dict(model_name="qwen", engine_type="sglang", tp_rank="0", pp_rank="0", moe_ep_rank="0")
    assert value(pm, "sglang:num_running_reqs", **labels) == 5
    assert value(pm, "sglang:num_queue_reqs", **labels) == 8
    assert value(pm, "sglang:cache_hit_rate", **labels) == 0.5
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:cache_hit_rate"):
        (lab, _), = scrape(pm)[name]
        assert lab == labels

    # A pass without prefill tokens on every rank is no observation: the hit rate stays.
    pm.update([MockerMetrics(0, 0, 10, 2, 0, 0, 0, 0), MockerMetrics(1, 0, 10, 0, 0, 0, 0, 0)])
    assert value(pm, "sglang:cache_hit_rate", **labels) == 0.5
    assert value(pm, "sglang:num_running_reqs", **labels) == 2
    # Ranks reporting one at a time: the sum covers every rank's latest snapshot.
    pm.update([MockerMetrics(1, 0, 10, 3, 1, 0, 9, 10)])
    assert value(pm, "sglang:num_running_reqs", **labels) == 5
    assert value(pm, "sglang:cache_hit_rate", **labels) == 0.9

    types = families(pm)
    assert types == {
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:cache_hit_rate": "gauge",
        "sglang:num_requests_total": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:e2e_request_latency_seconds": "histogram",
    }
    assert "dynamo_component_" not in pm.exposition().decode()


def test_sglang_request_counter_and_prefill_timing():
    pm = PrometheusMetrics("sglang")
    pm.set_model_name("qwen")
    req = dict(model_name="qwen", engine_type="sglang")

    cancelled = pm.request_timer(False, start_s=0.0)
    cancelled.on_tokens(1, 0.3)        # first token, then the stream is cancelled: no on_complete
    assert value(pm, "sglang:num_requests_total", **req) == 0
    assert hist_count(pm, "sglang:time_to_first_token_seconds") == 1

    done = pm.request_timer(False, start_s=0.0)
    done.on_tokens(2, 0.5)
    done.on_tokens(1, 0.51)
    done.on_complete(0.6)
    assert value(pm, "sglang:num_requests_total", **req) == 1
    assert hist_count(pm, "sglang:e2e_request_latency_seconds") == 1
    assert hist_count(pm, "sglang:inter_token_latency_seconds") == 1
    for lab, _ in scrape(pm)["sglang:e2e_request_latency_seconds_count"]:
        assert lab == req

    before = scrape(pm)
    prefill = pm.request_timer(True, start_s=0.0)
    prefill.record_prefix_cache(100, 50)
    prefill.on_tokens(1, 0.1)
    prefill.on_complete(0.2)
    assert scrape(pm) == before        # a prefill worker records nothing at all


def test_sglang_bucket_lists():
    pm = PrometheusMetrics("sglang")
    pm.set_model_name("m")
    assert buckets_of(pm, "sglang:time_to_first_token_seconds") == [
        0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
    assert buckets_of(pm, "sglang:inter_token_latency_seconds") == [
        0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
        0.4, 0.6, 0.8, 1, 2, 4, 6, 8]
    assert buckets_of(pm, "sglang:e2e_request_latency_seconds") == [
        0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]


# ---------------------------------------------------------------------------------------------- docs/live.md §5.2 FPM (56)

SCHEDULED_KEYS = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length", "sum_prefill_kv_tokens",
                  "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens"]
QUEUED_KEYS = ["num_prefill_requests", "sum_prefill_tokens", "var_prefill_length", "num_decode_requests",
               "sum_decode_kv_tokens", "var_decode_kv_tokens"]


def test_encode_fpm_exact_map():
    snap = ForwardPassSnapshot(2, 256, 100.0, 64, 3, 1024, 50.0, 1, 128, 0.0, 4, 77, 2.5, 0.025)
    raw = encode_fpm("worker-abc", 2, 42, snap)
    assert raw[0] & 0xF0 == 0x80       # fixmap: a map, not an array
    d = msgpack.unpackb(raw, raw=False)
    assert list(d) == ["version", "worker_id", "dp_rank", "counter_id", "wall_time",
                       "scheduled_requests", "queued_requests"]
    assert (d["version"], d["worker_id"], d["dp_rank"], d["counter_id"], d["wall_time"]) == (
        1, "worker-abc", 2, 42, 0.025)
    assert list(d["scheduled_requests"]) == SCHEDULED_KEYS
    assert list(d["queued_requests"]) == QUEUED_KEYS
    assert d["scheduled_requests"] == dict(zip(SCHEDULED_KEYS, [2, 256, 100.0, 64, 3, 1024, 50.0]))
    assert d["queued_requests"] == dict(zip(QUEUED_KEYS, [1, 128, 0.0, 4, 77, 2.5]))
    assert isinstance(d["scheduled_requests"]["num_prefill_requests"], int)
    assert isinstance(d["queued_requests"]["var_prefill_length"], float)
    assert b"\xcb" in raw and b"\xca" not in raw   # float64, never float32

    zero = msgpack.unpackb(encode_fpm("w", 0, 1, ForwardPassSnapshot.zero()))
    assert zero["wall_time"] == 0.0
    assert all(v == 0 for v in zero["scheduled_requests"].values())
    assert all(v == 0 for v in zero["queued_requests"].values())


@pytest.mark.parametrize("raw, expected", [
    (None, 1.0), ("250", 0.25), (" 5000 ", 5.0), ("1", 0.001), ("300000", 300.0),
    ("0", 1.0), ("300001", 1.0), ("-1", 1.0), ("soon", 1.0), ("1.5", 1.0), ("", 1.0),
    (str(2**64 - 1), 1.0),
])
def test_heartbeat_interval_parsing(raw, expected, monkeypatch):
    monkeypatch.delenv("DYN_FPM_HEARTBEAT_INTERVAL_MS", raising=False)
    if raw is None:
        assert heartbeat_interval_from_env() == expected       # default 1 s
    else:
        assert heartbeat_interval_from_env(raw) == expected
        monkeypatch.setenv("DYN_FPM_HEARTBEAT_INTERVAL_MS", raw)
        assert heartbeat_interval_from_env() == expected


def test_fpm_heartbeat_and_counters(monkeypatch):
    monkeypatch.setenv("DYN_FPM_HEARTBEAT_INTERVAL_MS", "100")
    sent: list[tuple[str, dict, float]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pub = FpmPublisher("worker-1", lambda topic, payload: sent.append(
            (topic, msgpack.unpackb(payload), loop.time())), dp_size=2)
        assert pub.heartbeat_interval_s == 0.1
        t0 = loop.time()
        pub.start()
        active = ForwardPassSnapshot(num_prefill_requests=2, sum_prefill_tokens=100, wall_time_secs=0.05)
        pub.publish(active, dp_rank=0)
        await asyncio.sleep(0.03)
        # The active pass goes out at once as rank 0's counter 1 ...
        first = sent[0][1]
        assert (first["dp_rank"], first["counter_id"], first["wall_time"]) == (0, 1, 0.05)
        assert first["scheduled_requests"]["sum_prefill_tokens"] == 100
        if loop.time() - t0 < 0.08:      # ... and nothing else before an interval (unless overloaded)
            assert len(sent) == 1
        await asyncio.sleep(0.25)        # ~2 idle intervals on both ranks
        await asyncio.wait_for(pub.aclose(), 2)
        # Rank 1 never published: its first heartbeat comes one interval after start, not earlier.
        assert min(t for _, d, t in sent if d["dp_rank"] == 1) - t0 >= 0.09

    asyncio.run(scenario())
    assert all(topic == FPM_TOPIC for topic, _, _ in sent)
    for rank in (0, 1):
        rows = [(d, t) for _, d, t in sent if d["dp_rank"] == rank]
        assert [d["counter_id"] for d, _ in rows] == list(range(1, len(rows) + 1))   # 1, 2, 3 ... per rank
        beats = rows[1:] if rank == 0 else rows
        assert beats, f"rank {rank} emitted no heartbeat"
        for d, _ in beats:
            assert d["wall_time"] == 0.0 and d["worker_id"] == "worker-1"
            assert not any(d["scheduled_requests"].values()) and not any(d["queued_requests"].values())
        # The timer restarts after every emission: heartbeats are an interval apart, never closer.
        times = [t for _, t in rows]
        assert all(b - a >= 0.09 for a, b in zip(times, times[1:]))


def test_fpm_publish_lifecycle():
    sent: list[dict] = []

    async def scenario() -> None:
        pub = FpmPublisher("w", lambda _t, p: sent.append(msgpack.unpackb(p)), heartbeat_interval_s=60.0)
        for i in range(3):
            pub.publish(ForwardPassSnapshot(num_decode_requests=i + 1, wall_time_secs=0.01))
        with pytest.raises(ValueError, match="out of bounds"):
            pub.publish(ForwardPassSnapshot(), dp_rank=1)
        pub.start()
        await asyncio.sleep(0)
        pub.publish(ForwardPassSnapshot(num_decode_requests=4, wall_time_secs=0.01))
        # publish-then-close without yielding: the rank task must still stop (and promptly, even
        # with a 60 s heartbeat), and the queued snapshot is flushed, not dropped.
        await asyncio.wait_for(pub.aclose(), 2)
        assert pub.counters == (4,)
        with pytest.raises(RuntimeError, match="closed"):
            pub.publish(ForwardPassSnapshot())

    asyncio.run(scenario())
    assert [(d["counter_id"], d["scheduled_requests"]["num_decode_requests"]) for d in sent] == [
        (1, 1), (2, 2), (3, 3), (4, 4)]


def test_fpm_sink_failure_does_not_stop_rank():
    calls = []

    def flaky(topic: str, payload: bytes) -> None:
        calls.append(msgpack.unpackb(payload)["counter_id"])
        if len(calls) == 1:
            raise OSError("event plane down")

    async def scenario() -> None:
        async with FpmPublisher("w", flaky, heartbeat_interval_s=0.02):
            await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert len(calls) >= 2 and calls[:2] == [1, 2]
