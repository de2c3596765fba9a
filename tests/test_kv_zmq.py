"""vLLM-style KV events over ZMQ (docs/live.md §4.3, docs/live.md §4.4; checklist 51-53).

Real sockets on 127.0.0.1 with OS-assigned ports.  Every receive goes through ``_recv`` (poll with
a timeout), so a broken publisher fails a test instead of hanging it.

The subscriber side decodes with msgspec structs written here from vLLM's documented schema
(``vllm/distributed/kv_events.py``: ``KVEventBatch`` and the ``type``-tagged ``BlockStored`` /
``BlockRemoved`` / ``AllBlocksCleared``) — deliberately not with our encoder's helpers.
"""
from __future__ import annotations

import asyncio
import errno
import random
import re
import socket
import threading
import time
from typing import Any, Union

import pytest

import msgpack  # noqa: E402
import msgspec  # noqa: E402
import zmq  # noqa: E402

from mocker.events.kv import (AllBlocksCleared, BlockRemoved, BlockStored,  # noqa: E402
                              KvEventBatch)
from mocker.events.sink import FanoutSink, ListSink, SinkClosedError  # noqa: E402
from mocker.events.zmq import (END_SEQ, KvEventBindError, ZmqKvEventPublisher,  # noqa: E402
                               encode_batch, medium_wire_name)

TIMEOUT_MS = 3000
U64 = 1 << 64


# --------------------------------------------------------------------------- vLLM's schema
# The batch is positional ([ts, events, data_parallel_rank]); events are maps tagged by "type".
# vLLM declares lora_id / medium / lora_name on BlockStored (medium on BlockRemoved) without
# defaults; the "tolerant" structs give them None defaults (what a consumer must do to accept the
# Dynamo mocker's shape, which omits them), the "strict" ones keep vLLM's required fields.

class VEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Union[int, None] = None


class VEvent(msgspec.Struct, omit_defaults=True, gc=False, tag_field="type", tag=True):
    pass


class VBlockStored(VEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Union[int, None]
    token_ids: list[int]
    block_size: int
    lora_id: Union[int, None] = None
    medium: Union[str, None] = None
    lora_name: Union[str, None] = None
    extra_keys: Union[list[Any], None] = None
    group_idx: Union[int, None] = None
    kv_cache_spec_kind: Union[str, None] = None
    kv_cache_spec_sliding_window: Union[int, None] = None


class VBlockRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Union[str, None] = None
    group_idx: Union[int, None] = None


class VAllBlocksCleared(VEvent, tag="AllBlocksCleared"):
    pass


class VKVEventBatch(VEventBatch):
    events: list[Union[VBlockStored, VBlockRemoved, VAllBlocksCleared]]


class SBlockStored(VEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Union[int, None]
    token_ids: list[int]
    block_size: int
    lora_id: Union[int, None]
    medium: Union[str, None]
    lora_name: Union[str, None]
    group_idx: Union[int, None] = None


class SBlockRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Union[str, None]
    group_idx: Union[int, None] = None


class SKVEventBatch(VEventBatch):
    events: list[Union[SBlockStored, SBlockRemoved]]


VLLM_DECODER = msgspec.msgpack.Decoder(VKVEventBatch)
STRICT_DECODER = msgspec.msgpack.Decoder(SKVEventBatch)


# --------------------------------------------------------------------------- helpers

@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.fixture
def make_pub():
    pubs = []

    def make(**kw):
        pub = ZmqKvEventPublisher(**kw)
        pubs.append(pub)
        return pub

    yield make
    for pub in pubs:
        pub.close()


def _recv(sock, timeout_ms: int = TIMEOUT_MS) -> list[bytes]:
    if not sock.poll(timeout_ms):
        pytest.fail(f"nothing received within {timeout_ms} ms")
    return sock.recv_multipart()


def _replay(ctx, endpoint: str, start_seq: int, topic_frame: bool = True) -> list[tuple[int, bytes]]:
    """Ask the replay ROUTER from ``start_seq`` with a DEALER; return the entries before the sentinel."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
        out = []
        while True:
            frames = _recv(dealer)
            if topic_frame:
                assert len(frames) == 4 and frames[:2] == [b"", b""], frames
            else:
                assert len(frames) == 3 and frames[0] == b"", frames
            seq_bytes, payload = frames[-2:]
            if seq_bytes == END_SEQ:
                assert payload == b""
                return out
            out.append((int.from_bytes(seq_bytes, "big"), payload))
    finally:
        dealer.close()


def _eventually(cond, timeout_s: float = 5.0) -> None:
    """The publisher thread updates its counters after sending: poll for them."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stored(hashes, parent=None, medium=None, block_size=2) -> BlockStored:
    tokens = tuple(range(len(hashes) * block_size))
    return BlockStored(tuple(hashes), parent, tokens, block_size, medium)


def _events(payload: bytes) -> list[dict]:
    ts, events, _rank = msgpack.unpackb(payload, raw=False)
    return events


# --------------------------------------------------------------------------- encoder (checklist 53)

def test_payload_is_a_3_array_with_float64_ts_and_dp_rank():
    payload = encode_batch(KvEventBatch(1.25, (_stored([7]),), dp_rank=3))
    assert payload[0] == 0x93 and payload[1] == 0xCB          # fixarray(3), float64
    ts, events, rank = msgpack.unpackb(payload)
    assert (ts, rank) == (1.25, 3) and len(events) == 1


def test_device_tier_omits_medium_and_group_idx_is_zero():
    """The Dynamo mocker's compact shape (``explicit_nulls=False``)."""
    batch = KvEventBatch(1.0, (_stored([1, 2], parent=9), BlockRemoved((1,)),
                               _stored([3], medium="GPU"), BlockRemoved((3,), "device")))
    stored, removed, stored_gpu, removed_gpu = _events(encode_batch(batch, explicit_nulls=False))
    assert stored == {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": 9,
                      "token_ids": [0, 1, 2, 3], "block_size": 2, "group_idx": 0}
    assert removed == {"type": "BlockRemoved", "block_hashes": [1], "group_idx": 0}
    assert "medium" not in stored_gpu and "medium" not in removed_gpu
    assert list(stored) == ["type", "block_hashes", "parent_block_hash", "token_ids",
                            "block_size", "group_idx"]


@pytest.mark.parametrize("medium,wire", [("CPU_PINNED", "CPU_PINNED"), ("CPU", "CPU_PINNED"),
                                         ("cpu_tier1", "CPU_PINNED"), ("NVME", "DISK"),
                                         ("DISK", "DISK"), ("remote", "EXTERNAL")])
def test_non_device_tiers_carry_medium(medium, wire):
    assert medium_wire_name(medium) == wire
    stored, removed = _events(encode_batch(KvEventBatch(
        1.0, (_stored([1], medium=medium), BlockRemoved((1,), medium)))))
    assert stored["medium"] == removed["medium"] == wire
    assert stored["group_idx"] == removed["group_idx"] == 0


def test_mixed_batch_decodes_in_order_with_vllm_structs():
    batch = KvEventBatch(2.5, (_stored([10, 11]), BlockRemoved((5,)),
                               _stored([12], parent=11, medium="CPU_PINNED")), dp_rank=1)
    decoded = VLLM_DECODER.decode(encode_batch(batch))
    assert decoded.ts == 2.5 and decoded.data_parallel_rank == 1
    a, b, c = decoded.events
    assert isinstance(a, VBlockStored) and a.block_hashes == [10, 11] and a.medium is None
    assert isinstance(b, VBlockRemoved) and b.block_hashes == [5]
    assert isinstance(c, VBlockStored) and c.parent_block_hash == 11 and c.medium == "CPU_PINNED"
    assert a.group_idx == b.group_idx == c.group_idx == 0 and a.lora_id is None


def test_cleared_is_dropped_and_cleared_only_batch_is_none():
    assert encode_batch(KvEventBatch(1.0, (AllBlocksCleared(),))) is None
    assert encode_batch(KvEventBatch(1.0, ())) is None
    events = _events(encode_batch(KvEventBatch(1.0, (AllBlocksCleared(), BlockRemoved((4,))))))
    assert [e["type"] for e in events] == ["BlockRemoved"]


def test_hashes_are_unsigned_64_bit():
    big = (1 << 64) - 1
    payload = encode_batch(KvEventBatch(1.0, (_stored([big, -1], parent=-2),)))
    assert b"\xcf" + big.to_bytes(8, "big") in payload              # msgpack uint64
    (stored,) = _events(payload)
    assert stored["block_hashes"] == [big, big] and stored["parent_block_hash"] == U64 - 2
    with pytest.raises(ValueError, match="64 bits"):
        encode_batch(KvEventBatch(1.0, (BlockRemoved((U64,)),)))


def test_encoder_rejects_bad_events():
    with pytest.raises(ValueError, match="token ids"):
        encode_batch(KvEventBatch(1.0, (BlockStored((1, 2), None, (1, 2, 3), 2),)))
    with pytest.raises(ValueError, match="TAPE"):
        encode_batch(KvEventBatch(1.0, (BlockRemoved((1,), "TAPE"),)))


def test_vllm_strict_structs_need_explicit_nulls():
    """vLLM's own structs require lora_id/medium/lora_name: the compact (Dynamo) shape fails them,
    so explicit nulls are the default."""
    batch = KvEventBatch(1.0, (_stored([1]), BlockRemoved((1,), "CPU")), dp_rank=0)
    with pytest.raises(msgspec.ValidationError, match="missing required field"):
        STRICT_DECODER.decode(encode_batch(batch, explicit_nulls=False))
    stored, removed = STRICT_DECODER.decode(encode_batch(batch)).events
    assert (stored.lora_id, stored.lora_name, stored.medium) == (None, None, None)
    assert removed.medium == "CPU_PINNED" and stored.group_idx == 0


# --------------------------------------------------------------------------- sockets (checklist 51, 52)

def test_automatic_ports_are_distinct_nonzero_and_released_on_close(make_pub):
    pub = make_pub(replay_port=0)
    assert pub.port > 0 and pub.replay_port > 0 and pub.port != pub.replay_port
    assert pub.endpoint == f"tcp://127.0.0.1:{pub.port}"
    assert pub.replay_endpoint == f"tcp://127.0.0.1:{pub.replay_port}"
    other = make_pub(replay_port=0)
    assert len({pub.port, pub.replay_port, other.port, other.replay_port}) == 4
    port, replay_port = pub.port, pub.replay_port
    pub.close()
    pub.close()                                   # idempotent
    again = make_pub(port=port, replay_port=replay_port)    # both ports free again, at once
    assert (again.port, again.replay_port) == (port, replay_port)
    without = make_pub()
    assert without.replay_port is None and without.replay_endpoint is None


def test_binding_a_used_port_fails_naming_the_endpoint(make_pub):
    pub = make_pub(replay_port=0)
    with pytest.raises(KvEventBindError, match=re.escape(pub.endpoint)) as info:
        make_pub(port=pub.port)
    assert info.value.errno == errno.EADDRINUSE and "PUB" in str(info.value)
    with pytest.raises(KvEventBindError, match=re.escape(pub.replay_endpoint)) as info:
        make_pub(replay_port=pub.replay_port)
    assert "replay" in str(info.value)
    with pytest.raises(KvEventBindError):
        make_pub(port=pub.replay_port)
    # A constructor that fails on the PUB releases the replay port it had already bound.
    free = _free_port()
    with pytest.raises(KvEventBindError):
        make_pub(port=pub.port, replay_port=free)
    assert make_pub(replay_port=free).replay_port == free


def test_published_stored_event_replays_from_seq_0(ctx, make_pub):
    pub = make_pub(replay_port=0)
    pub.publish(KvEventBatch(1.0, (AllBlocksCleared(),), dp_rank=3))    # emits nothing, no seq
    assert pub.next_seq == 0
    pub.publish(KvEventBatch(1234.5, (_stored([42, 43], parent=41),), dp_rank=3))
    assert pub.next_seq == 1
    ((seq, payload),) = _replay(ctx, pub.replay_endpoint, 0)     # then the -1 sentinel
    assert seq == 0
    ts, events, rank = msgpack.unpackb(payload)
    assert (ts, rank) == (1234.5, 3)
    assert events[0]["block_hashes"] == [42, 43] and events[0]["parent_block_hash"] == 41
    decoded = VLLM_DECODER.decode(payload)
    assert decoded.data_parallel_rank == 3 and decoded.events[0].block_hashes == [42, 43]


def test_replay_without_topic_frame_and_req_client(ctx, make_pub):
    pub = make_pub(replay_port=0, replay_topic_frame=False)
    pub.publish(KvEventBatch(1.0, (_stored([1]),)))
    pub.publish(KvEventBatch(2.0, (BlockRemoved((1,)),)))
    got = _replay(ctx, pub.replay_endpoint, 1, topic_frame=False)
    assert [seq for seq, _ in got] == [1]
    # A REQ client sends the bare 8-byte seq; it sees the first reply without the delimiter.
    req = ctx.socket(zmq.REQ)
    req.linger = 0
    req.connect(pub.replay_endpoint)
    req.send((0).to_bytes(8, "big"))
    seq_bytes, payload = _recv(req)
    assert int.from_bytes(seq_bytes, "big") == 0 and _events(payload)[0]["type"] == "BlockStored"
    req.close()


def test_ring_buffer_evicts_oldest_and_start_beyond_last_is_sentinel_only(ctx, make_pub):
    pub = make_pub(replay_port=0, buffer_size=4)
    for i in range(10):
        pub.publish(KvEventBatch(float(i), (BlockRemoved((i,)),)))
    assert [s for s, _ in _replay(ctx, pub.replay_endpoint, 0)] == [6, 7, 8, 9]
    got = _replay(ctx, pub.replay_endpoint, 8)
    assert [s for s, _ in got] == [8, 9]
    assert [_events(p)[0]["block_hashes"] for _, p in got] == [[8], [9]]
    assert _replay(ctx, pub.replay_endpoint, 10) == []
    assert _replay(ctx, pub.replay_endpoint, 1 << 40) == []
    _eventually(lambda: pub.stats["replays_served"] == 4)   # counted after the sentinel went out


def test_malformed_replay_requests_are_ignored(ctx, make_pub):
    pub = make_pub(replay_port=0)
    pub.publish(KvEventBatch(1.0, (BlockRemoved((1,)),)))
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(pub.replay_endpoint)
    dealer.send_multipart([b"", b"abc"])                             # seq not 8 bytes
    dealer.send_multipart([(0).to_bytes(8, "big")])                  # no delimiter: 2 frames
    dealer.send_multipart([b"", (0).to_bytes(8, "big"), b"extra"])   # 4 frames
    assert not dealer.poll(300)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])             # still serving
    assert _recv(dealer)[2] == (0).to_bytes(8, "big")
    assert _recv(dealer)[2] == END_SEQ
    dealer.close()
    _eventually(lambda: pub.stats["bad_replay_requests"] == 3)


def test_publish_after_close_raises_and_fanout_absorbs_it(make_pub):
    pub = make_pub()
    pub.close()
    with pytest.raises(SinkClosedError, match=re.escape(pub.endpoint)):
        pub.publish(KvEventBatch(1.0, (BlockRemoved((1,)),)))
    ok = ListSink()
    fan = FanoutSink([pub, ok])
    fan.publish(KvEventBatch(1.0, (BlockRemoved((1,)),)))
    assert fan.failures == [1, 0] and len(ok.batches) == 1


def test_publish_from_event_loop_and_threads_keeps_publish_order(ctx, make_pub):
    pub = make_pub(replay_port=0)

    async def main():
        for i in range(50):
            pub.publish(KvEventBatch(float(i), (BlockRemoved((i,)),)))

    asyncio.run(main())

    def worker(base):
        for i in range(100):
            pub.publish(KvEventBatch(0.0, (BlockRemoved((base + i,)),)))

    threads = [threading.Thread(target=worker, args=(base,)) for base in (1000, 2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    got = _replay(ctx, pub.replay_endpoint, 0)
    assert [s for s, _ in got] == list(range(250))
    hashes = [_events(p)[0]["block_hashes"][0] for _, p in got]
    assert hashes[:50] == list(range(50))
    for base in (1000, 2000):      # each thread's batches keep its own order
        assert [h for h in hashes if base <= h < base + 100] == list(range(base, base + 100))


# --------------------------------------------------------------------------- a vLLM-schema subscriber

PROBE_HASH = 0x5EED_0000_0000_0001     # removals of a hash that is never stored


class Model:
    """The publisher side: random batches and the set of (medium, hash) they intend to leave."""

    MEDIA = (None, None, "GPU", "CPU_PINNED", "cpu", "DISK")

    def __init__(self, seed: int, dp_rank: int):
        self.rng = random.Random(seed)
        self.dp_rank = dp_rank
        self.by_medium: dict[Any, list[int]] = {}     # wire medium -> resident hashes (ordered)
        self.used = {PROBE_HASH}
        self.sent: dict[int, KvEventBatch] = {}       # seq -> batch, as the publisher emitted it
        self.i = 0

    @property
    def intended(self) -> set[tuple[Any, int]]:
        return {(m, h) for m, hs in self.by_medium.items() for h in hs}

    def _fresh(self) -> int:
        while True:
            h = self.rng.getrandbits(64)
            if h not in self.used:
                self.used.add(h)
                return h

    def _event(self):
        rng = self.rng
        resident = [m for m, hs in self.by_medium.items() if hs]
        if resident and rng.random() < 0.35:
            medium = rng.choice(sorted(resident, key=str))
            hashes = self.by_medium[medium]
            gone = rng.sample(hashes, rng.randint(1, min(3, len(hashes))))
            for h in gone:
                hashes.remove(h)
            return BlockRemoved(tuple(gone), medium)
        medium = rng.choice(self.MEDIA)
        chain = self.by_medium.setdefault(medium_wire_name(medium), [])
        parent = chain[-1] if chain and rng.random() < 0.7 else None
        hashes = tuple(self._fresh() for _ in range(rng.randint(1, 4)))
        chain.extend(hashes)
        tokens = tuple(rng.randrange(50_000) for _ in range(len(hashes) * 4))
        return BlockStored(hashes, parent, tokens, 4, medium)

    def batch(self) -> KvEventBatch:
        self.i += 1
        if self.rng.random() < 0.05:                  # emits nothing, consumes no seq
            events = (AllBlocksCleared(),)
        else:
            events = tuple(self._event() for _ in range(self.rng.randint(1, 3)))
        return KvEventBatch(1.7e9 + self.i * 0.01, events, self.dp_rank)

    def emit(self, pub: ZmqKvEventPublisher, batch: KvEventBatch) -> None:
        seq = pub.next_seq
        pub.publish(batch)
        if pub.next_seq > seq:
            self.sent[seq] = batch

    def probe(self, pub: ZmqKvEventPublisher) -> None:
        self.emit(pub, KvEventBatch(time.time(), (BlockRemoved((PROBE_HASH,)),), self.dp_rank))


class VllmSubscriber:
    """A consumer written against vLLM's schema: SUB for live batches, DEALER replay for gaps."""

    def __init__(self, ctx, pub: ZmqKvEventPublisher):
        self.ctx, self.pub = ctx, pub
        self.last_seq = -1
        self.blocks: set[tuple[Any, int]] = set()
        self.decoded: dict[int, VKVEventBatch] = {}
        self.replayed: list[int] = []
        self.sub = None

    def connect(self, model: Model) -> None:
        """Connect a SUB and wait out the slow-joiner window: probe until one batch arrives."""
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.linger = 0
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(self.pub.endpoint)
        deadline = time.monotonic() + 5
        while not self.sub.poll(20):
            assert time.monotonic() < deadline, "SUB never received a probe"
            model.probe(self.pub)

    def disconnect(self) -> None:
        self.sub.close()
        self.sub = None

    def _apply(self, seq: int, payload: bytes) -> None:
        assert seq == self.last_seq + 1
        batch = VLLM_DECODER.decode(payload)
        assert batch.data_parallel_rank == 2
        for ev in batch.events:
            if isinstance(ev, VBlockStored):
                assert ev.group_idx == 0 and len(ev.token_ids) == len(ev.block_hashes) * ev.block_size
                self.blocks.update((ev.medium, h) for h in ev.block_hashes)
            elif isinstance(ev, VBlockRemoved):
                assert ev.group_idx == 0
                self.blocks.difference_update((ev.medium, h) for h in ev.block_hashes)
            else:
                self.blocks.clear()
        self.decoded[seq] = batch
        self.last_seq = seq

    def _on_live(self, frames: list[bytes]) -> None:
        topic, seq_bytes, payload = frames
        assert topic == b""
        seq = int.from_bytes(seq_bytes, "big")
        if seq <= self.last_seq:
            return
        if seq > self.last_seq + 1:                   # missed some: replay from the first missed
            for rseq, rpayload in _replay(self.ctx, self.pub.replay_endpoint, self.last_seq + 1):
                if self.last_seq < rseq < seq:
                    self._apply(rseq, rpayload)
                    self.replayed.append(rseq)
        self._apply(seq, payload)

    def pump_until(self, seq: int) -> None:
        while self.last_seq < seq:
            self._on_live(_recv(self.sub))


def _check_contents(model: Model, sub: VllmSubscriber) -> None:
    """Every emitted batch decodes, field by field, to what the publisher side published."""
    assert sorted(sub.decoded) == sorted(model.sent) == list(range(len(model.sent)))
    for seq, source in model.sent.items():
        got = sub.decoded[seq]
        assert got.ts == source.ts
        wire = [e for e in source.events if not isinstance(e, AllBlocksCleared)]
        assert len(got.events) == len(wire)
        for want, ev in zip(wire, got.events):
            assert ev.block_hashes == list(want.block_hashes)
            assert ev.medium == medium_wire_name(want.medium)
            if isinstance(want, BlockStored):
                assert isinstance(ev, VBlockStored)
                assert (ev.parent_block_hash, ev.token_ids, ev.block_size) == (
                    want.parent_block_hash, list(want.token_ids), want.block_size)
            else:
                assert isinstance(ev, VBlockRemoved)


def test_vllm_subscriber_tracks_the_publisher_state(ctx, make_pub):
    pub = make_pub(replay_port=0)
    model = Model(seed=1234, dp_rank=2)
    sub = VllmSubscriber(ctx, pub)
    sub.connect(model)
    for _ in range(300):
        model.emit(pub, model.batch())
    sub.pump_until(pub.next_seq - 1)
    assert sub.blocks == model.intended and len(model.intended) > 50
    assert any(m == "CPU_PINNED" for m, _ in model.intended)
    _check_contents(model, sub)


def test_vllm_subscriber_recovers_missed_batches_by_replay(ctx, make_pub):
    pub = make_pub(replay_port=0)
    model = Model(seed=99, dp_rank=2)
    sub = VllmSubscriber(ctx, pub)
    sub.connect(model)
    for _ in range(40):
        model.emit(pub, model.batch())
    sub.pump_until(pub.next_seq - 1)
    assert sub.blocks == model.intended

    sub.disconnect()
    first_missed = pub.next_seq
    for _ in range(60):                                # published while nobody listens
        model.emit(pub, model.batch())
    missed = set(range(first_missed, pub.next_seq))
    # the publisher thread sends asynchronously: let it put them on the wire (to nobody) before
    # a new subscriber could still catch them live
    _eventually(lambda: pub.stats["sent"] + pub.stats["send_failures"] >= pub.next_seq)
    time.sleep(0.05)

    sub.connect(model)                                 # the first live probe reveals the gap
    for _ in range(40):
        model.emit(pub, model.batch())
    sub.pump_until(pub.next_seq - 1)
    assert missed <= set(sub.replayed)
    assert sub.replayed == sorted(sub.replayed) and sub.replayed[0] == first_missed
    assert sub.blocks == model.intended
    _check_contents(model, sub)


def test_full_replay_to_a_slow_client_is_not_dropped(ctx, make_pub):
    """A ROUTER at ZMQ's default SNDHWM (1000) silently drops replies beyond what the pipe and TCP
    buffers hold, sentinel included; the publisher raises the mark to the buffer size."""
    n = 5000
    pub = make_pub(replay_port=0, buffer_size=n)
    tokens = tuple(range(40_000, 40_000 + 16 * 64))          # ~3 KB payloads, ~15 MB in all
    for i in range(n):
        pub.publish(KvEventBatch(float(i), (BlockStored(tuple(range(i, i + 16)), None, tokens, 64),)))
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(pub.replay_endpoint)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    deadline = time.monotonic() + 10
    while pub.stats["replays_served"] == 0:                  # the whole reply is queued before we read
        assert time.monotonic() < deadline
        time.sleep(0.01)
    seqs = []
    while (frames := _recv(dealer))[2] != END_SEQ:
        seqs.append(int.from_bytes(frames[2], "big"))
    dealer.close()
    assert seqs == list(range(n))
