"""A LiveEngine publishing its KV events on ZMQ: a subscriber written against vLLM's schema (its
msgspec structs, with the fields vLLM declares required) rebuilds exactly the set of block
hashes the engine's cache holds — also after it was disconnected and recovered the missed
batches through the replay socket (issue 5, third point)."""
import asyncio
import random

import msgspec
import pytest
import zmq

from mocker.events.zmq import ZmqKvEventPublisher
from mocker.live.engine import DirectRequest, FullResponse, LiveEngine

END = (-1).to_bytes(8, "big", signed=True)


# vLLM's event structs with the fields it declares required (lora_id, medium, lora_name):
# written once, in test_kv_zmq
from test_kv_zmq import SBlockRemoved as BlockRemoved, SBlockStored as BlockStored, SKVEventBatch as KVEventBatch  # noqa: E402

DECODER = msgspec.msgpack.Decoder(KVEventBatch)


class Subscriber:
    """SUB for live batches; a gap in the sequence numbers is filled from the replay ROUTER."""

    def __init__(self, ctx, pub_endpoint, replay_endpoint, dp_rank):
        self.ctx, self.pub_endpoint, self.replay_endpoint = ctx, pub_endpoint, replay_endpoint
        self.dp_rank = dp_rank
        self.sub = None
        self.last = -1
        self.blocks: set[int] = set()
        self.replayed = 0

    def connect(self):
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.linger = 0
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(self.pub_endpoint.replace("0.0.0.0", "127.0.0.1"))

    def disconnect(self):
        self.sub.close()
        self.sub = None

    def _apply(self, seq, payload):
        assert seq == self.last + 1, (seq, self.last)
        batch = DECODER.decode(payload)
        assert batch.data_parallel_rank == self.dp_rank
        for ev in batch.events:
            if isinstance(ev, BlockStored):
                assert len(ev.token_ids) == len(ev.block_hashes) * ev.block_size
                assert ev.parent_block_hash is None or ev.parent_block_hash in self.blocks
                self.blocks.update(ev.block_hashes)
            else:
                assert isinstance(ev, BlockRemoved)
                assert set(ev.block_hashes) <= self.blocks
                self.blocks.difference_update(ev.block_hashes)
        self.last = seq

    def _replay(self, upto):
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.connect(self.replay_endpoint.replace("0.0.0.0", "127.0.0.1"))
        try:
            dealer.send_multipart([b"", (self.last + 1).to_bytes(8, "big")])
            while True:
                assert dealer.poll(5000), "replay did not answer"
                frames = dealer.recv_multipart()
                seq_b, payload = frames[-2:]
                if seq_b == END:
                    return
                seq = int.from_bytes(seq_b, "big")
                if self.last < seq < upto:
                    self._apply(seq, payload)
                    self.replayed += 1
        finally:
            dealer.close()

    def pump(self, until_seq, timeout_ms=5000):
        while self.last < until_seq:
            if not self.sub.poll(timeout_ms):
                # the tail may have gone out before this socket joined: ask the replay socket
                self._replay(until_seq + 1)
                continue
            _topic, seq_b, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_b, "big")
            if seq <= self.last:
                continue
            if seq > self.last + 1:
                self._replay(seq)
            self._apply(seq, payload)


async def _traffic(eng, rng, prefixes, n, dp):
    streams = []
    for i in range(n):
        tokens = rng.choice(prefixes) + [rng.randrange(1, 5000) for _ in range(rng.randint(1, 40))]
        streams.append(eng.submit(DirectRequest(tokens=tokens, max_output_tokens=rng.randint(1, 12),
                                                dp_rank=i % dp)))
    for s in await asyncio.gather(*streams):
        while await s.recv() is not None:
            pass


@pytest.mark.parametrize("backend,dp", [("vllm", 1), ("sglang", 1), ("vllm", 2)])
def test_vllm_schema_subscriber_rebuilds_cache_state_across_a_disconnect(backend, dp):
    async def main():
        pubs = [ZmqKvEventPublisher(port=0, replay_port=0) for _ in range(dp)]
        eng = await LiveEngine.start(
            {"engine": {"backend": backend, "num_gpu_blocks": 48, "block_size": 4, "speedup_ratio": 200.0},
             "dp_size": dp}, buffering=FullResponse(), kv_event_sinks=pubs)
        ctx = zmq.Context()
        subs = [Subscriber(ctx, p.endpoint, p.replay_endpoint, r) for r, p in enumerate(pubs)]
        rng = random.Random(11)
        prefixes = [[rng.randrange(1, 5000) for _ in range(rng.randint(4, 24))] for _ in range(5)]
        try:
            for s in subs:
                s.connect()
            await _traffic(eng, rng, prefixes, 30, dp)
            for s, p in zip(subs, pubs):
                s.pump(p.next_seq - 1)
            for s in subs:
                s.disconnect()                           # events published now are missed
            await _traffic(eng, rng, prefixes, 40, dp)
            for p in pubs:                               # wait until the PUB sent them (to nobody)
                while p.stats["sent"] < p.next_seq:
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
            for s in subs:
                s.connect()
            await _traffic(eng, rng, prefixes, 30, dp)
            await asyncio.sleep(0.05)
            for r, (s, p) in enumerate(zip(subs, pubs)):
                s.pump(p.next_seq - 1)
                assert s.replayed > 0                    # recovery went through the replay socket
                assert s.blocks == eng._core.cached_hashes(r) and s.blocks
        finally:
            await eng.shutdown()
            ctx.destroy(linger=0)
        assert all(p.closed for p in pubs)               # the engine released its sinks
    asyncio.run(asyncio.wait_for(main(), 60))
