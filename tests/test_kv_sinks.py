"""In-process KV-event sinks (docs/live.md §4.1, docs/live.md §4.2): ListSink, CallbackSink, FanoutSink."""
import logging

import pytest

from mocker.events.kv import (AllBlocksCleared, BlockRemoved, BlockStored, KvEventBatch,
                              StorageTier, parse_storage_tier)
from mocker.events.sink import CallbackSink, FanoutSink, ListSink, SinkClosedError


def _batch(i: int) -> KvEventBatch:
    return KvEventBatch(ts=100.0 + i, events=(BlockStored((i,), None, (1, 2), 2),
                                              BlockRemoved((i + 1000,))), dp_rank=1)


def test_list_sink_collects_in_order():
    sink = ListSink()
    batches = [_batch(i) for i in range(3)]
    for b in batches:
        sink.publish(b)
    assert sink.batches == batches
    assert [type(e).__name__ for e in sink.events] == ["BlockStored", "BlockRemoved"] * 3
    sink.close()
    sink.close()
    assert sink.closed


def test_callback_sink_calls_and_closes_once():
    seen, closes = [], []
    sink = CallbackSink(seen.append, on_close=lambda: closes.append(1))
    sink.publish(_batch(0))
    assert seen == [_batch(0)]
    sink.close()
    sink.close()
    assert closes == [1]
    with pytest.raises(SinkClosedError):
        sink.publish(_batch(1))


def test_fanout_isolates_a_failing_sink_and_keeps_trying(caplog):
    first, last = ListSink(), ListSink()
    calls = []

    def flaky(batch):
        calls.append(batch)
        if len(calls) <= 2:
            raise RuntimeError("sink down")

    fan = FanoutSink([first, CallbackSink(flaky), last])
    with caplog.at_level(logging.ERROR, logger="mocker.events.sink"):
        for i in range(4):
            fan.publish(_batch(i))          # never raises into the caller
    assert first.batches == last.batches == [_batch(i) for i in range(4)]
    assert calls == [_batch(i) for i in range(4)]       # later batches are still attempted
    assert fan.failures == [0, 2, 0] and fan.failed_batches == 2
    assert len([r for r in caplog.records if "sink 1" in r.getMessage()]) == 1   # logged once


def test_fanout_close_closes_every_sink_even_if_one_fails(caplog):
    def boom():
        raise OSError("close failed")

    a, b = ListSink(), ListSink()
    fan = FanoutSink([a, CallbackSink(lambda _: None, on_close=boom), b])
    with caplog.at_level(logging.ERROR, logger="mocker.events.sink"):
        fan.close()
        fan.close()
    assert a.closed and b.closed
    assert len(caplog.records) == 1
    fan.publish(_batch(0))                  # closed inner CallbackSink raises; swallowed, counted
    assert fan.failures == [0, 1, 0]


def test_fanout_accepts_cleared_and_empty_batches():
    sink = ListSink()
    fan = FanoutSink([sink])
    fan.publish(KvEventBatch(1.0, (AllBlocksCleared(),)))
    fan.publish(KvEventBatch(2.0, ()))
    assert len(sink.batches) == 2


@pytest.mark.parametrize("alias,tier", [
    (None, StorageTier.DEVICE), ("GPU", StorageTier.DEVICE), ("device", StorageTier.DEVICE),
    ("CPU", StorageTier.HOST_PINNED), ("CPU_PINNED", StorageTier.HOST_PINNED),
    ("cpu_tier1", StorageTier.HOST_PINNED), ("CPU_TIER2", StorageTier.DISK),
    ("DISK", StorageTier.DISK), ("nvme", StorageTier.DISK), ("STORAGE", StorageTier.DISK),
    ("EXTERNAL", StorageTier.EXTERNAL), ("network", StorageTier.EXTERNAL),
    ("REMOTE", StorageTier.EXTERNAL), ("Shared", StorageTier.EXTERNAL),
    (StorageTier.DISK, StorageTier.DISK),
])
def test_storage_tier_aliases(alias, tier):
    assert parse_storage_tier(alias) is tier


def test_storage_tier_unknown_is_named():
    with pytest.raises(ValueError, match="'TAPE'"):
        parse_storage_tier("TAPE")
