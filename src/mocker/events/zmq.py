"""vLLM-compatible KV-event publication over ZMQ (docs/live.md §4.3, docs/live.md §4.4).

Two layers:

* ``encode_batch`` — sans-I/O: one ``KvEventBatch`` → the msgpack payload vLLM-style consumers
  (vLLM's own msgspec structs, Dynamo's KV router) decode, or None when nothing is encodable;
* ``ZmqKvEventPublisher`` — a ``KvEventSink`` that sends one ``[topic, seq, payload]`` multipart
  message per encoded batch on a PUB socket and answers replay requests on an optional ROUTER.

Requires the ``live`` extra (pyzmq, msgpack).
"""
from __future__ import annotations

import collections
import itertools
import logging
import queue
import socket
import threading
from dataclasses import dataclass, field

try:
    import msgpack
    import zmq
except ModuleNotFoundError as _e:     # pragma: no cover - depends on the environment
    from mocker.extras import LIVE_MODULES, missing_extra
    if _e.name not in LIVE_MODULES:
        raise
    raise missing_extra("mocker.events.zmq", _e) from _e

from .kv import (AllBlocksCleared, BlockRemoved, BlockStored, KvEventBatch, StorageTier,
                 parse_storage_tier)
from .sink import SinkClosedError

__all__ = ["encode_batch", "medium_wire_name", "parse_storage_tier", "StorageTier",
           "ZmqKvEventPublisher", "KvEventBindError", "END_SEQ", "DEFAULT_BUFFER_SIZE"]

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)   # replay sentinel: FF x 8
DEFAULT_BUFFER_SIZE = 10_000
_U64 = 1 << 64
_I64_MIN = -(1 << 63)


# --------------------------------------------------------------------------- encoding (sans-I/O)

def medium_wire_name(medium: str | StorageTier | None) -> str | None:
    """The ``medium`` string on the wire for a tier or alias; None (key omitted) for the device."""
    return parse_storage_tier(medium).value


def _u64_list(hashes: tuple[int, ...] | list[int]) -> list[int]:
    """Hashes as unsigned 64-bit ints; a negative (i64 two's-complement) hash is reinterpreted."""
    out = []
    for h in hashes:
        if h < 0:
            if h < _I64_MIN:
                raise ValueError(f"block hash {h} does not fit in 64 bits")
            h += _U64
        elif h >= _U64:
            raise ValueError(f"block hash {h} does not fit in 64 bits")
        out.append(h)
    return out


def _encode_event(event: object, explicit_nulls: bool) -> dict | None:
    if isinstance(event, BlockStored):
        n_tokens = len(event.block_hashes) * event.block_size
        if len(event.token_ids) != n_tokens:
            raise ValueError(f"BlockStored carries {len(event.token_ids)} token ids, expected "
                             f"{n_tokens} ({len(event.block_hashes)} blocks x {event.block_size})")
        parent = event.parent_block_hash
        out = {"type": "BlockStored",
               "block_hashes": _u64_list(event.block_hashes),
               "parent_block_hash": None if parent is None else _u64_list((parent,))[0],
               "token_ids": list(event.token_ids),
               "block_size": event.block_size}
        if explicit_nulls:
            out["lora_id"] = None
            out["lora_name"] = None
    elif isinstance(event, BlockRemoved):
        out = {"type": "BlockRemoved", "block_hashes": _u64_list(event.block_hashes)}
    elif isinstance(event, AllBlocksCleared):
        return None                     # never produced by the live engine; not on the wire
    else:
        raise TypeError(f"not a KV event: {event!r}")
    medium = medium_wire_name(event.medium)
    if medium is not None or explicit_nulls:
        out["medium"] = medium
    out["group_idx"] = 0
    return out


def encode_batch(batch: KvEventBatch, *, explicit_nulls: bool = True) -> bytes | None:
    """Encode a batch as vLLM's ``KVEventBatch``: msgpack ``[ts float64, [event map...], dp_rank]``.

    Events are string-keyed maps tagged by ``"type"``, in batch order; ``AllBlocksCleared`` is
    dropped, and a batch left with no events gives None (the publisher then emits nothing and
    consumes no sequence number).  By default (``explicit_nulls=True``) ``lora_id``,
    ``lora_name`` and ``medium`` are written as nil when absent: vLLM's own msgspec structs
    declare those fields without defaults, so its decoder rejects events that omit them.
    ``explicit_nulls=False`` gives the Dynamo mocker's compact shape (``medium`` only for a
    non-device tier, no ``lora_*``), which Dynamo's router and tolerant consumers accept.

    Raises ``ValueError`` for a hash outside 64 bits, an unknown medium, or a Stored event whose
    token count is not ``len(block_hashes) * block_size``.
    """
    events = []
    for event in batch.events:
        encoded = _encode_event(event, explicit_nulls)
        if encoded is not None:
            events.append(encoded)
    if not events:
        return None
    return msgpack.packb([float(batch.ts), events, int(batch.dp_rank)],
                         use_bin_type=True, use_single_float=False)


# --------------------------------------------------------------------------- publisher

class KvEventBindError(OSError):
    """A KV-event socket could not bind its endpoint (typically: the port is in use)."""


@dataclass(slots=True)
class _Shared:
    """State the publishing thread owns; other threads only read the counters."""
    ring: collections.deque = field(default_factory=collections.deque)   # (seq, payload)
    sent: int = 0                 # messages handed to the PUB socket
    send_failures: int = 0        # PUB sends that raised (the message is still replayable)
    replays_served: int = 0
    bad_requests: int = 0


class ZmqKvEventPublisher:
    """KV-event sink publishing vLLM's ZMQ wire format, with an optional replay ROUTER.

    * PUB bound at ``tcp://{host}:{port}``; ``port`` None (or 0) → OS-assigned.  Each batch that
      encodes to at least one event becomes ``[b"", seq (8-byte big-endian), payload]``; ``seq``
      counts emitted messages from 0.
    * ``replay_port`` None → no replay socket and no ring buffer; 0 → an OS-assigned port; else
      that port.  The ROUTER is bound *before* an automatic PUB port, so the OS cannot hand the PUB
      the replay port that was asked for.  It keeps the last ``buffer_size`` ``(seq, payload)``
      and answers ``[identity, b"", start_seq]`` with every kept entry from ``start_seq`` on as
      ``[identity, b"", b"", seq, payload]`` (``replay_topic_frame=False``: without the ``b""``
      topic frame, the shape of vLLM and older mocker), then the sentinel ``seq = -1`` with an empty
      payload.  Malformed requests are logged and ignored.
    * ``host`` defaults to ``127.0.0.1`` (loopback only, the project rule); the reference mocker
      binds ``0.0.0.0`` — pass ``host="0.0.0.0"`` for remote subscribers.
    * Binding a used port raises ``KvEventBindError`` naming the endpoint; ``close()`` is
      idempotent and releases both ports before returning (the publisher owns a private ZMQ
      context and terminates it, which waits until the listening sockets are really closed).

    Threading — why a thread and not an asyncio task: ``publish`` runs on the engine's pass loop
    and must never block, and replay may stream up to ``buffer_size`` messages at once.  A small
    daemon thread owns both sockets and the ring buffer; ``publish`` only encodes, numbers the
    message under a lock and hands ``(seq, payload)`` to a ``SimpleQueue`` plus a one-byte wakeup
    on a socketpair (both non-blocking).  Because numbering and enqueueing happen in one critical
    section and the thread consumes the FIFO in order, seq, PUB order and ring order are exactly
    publish order.  The thread sleeps in ``zmq.Poller`` on the wakeup fd and the ROUTER (no
    busy polling), sends queued messages first, then serves replay requests — so a replay includes
    every batch whose ``publish`` returned before the request arrived.  Compared with an asyncio
    task this works from any thread or loop (or none), keeps a long replay off the pass loop, and
    makes ``close()`` synchronous.  The Rust mocker instead serves replay with priority in its
    publishing task; the observable protocol is the same.

    PUB sends never block (a PUB drops for subscribers above their high-water mark; the ring keeps
    the message for replay).  The ROUTER's send high-water mark is raised to ``buffer_size + 2`` so
    a full replay to a slow client is queued rather than silently dropped.
    """

    def __init__(self, port: int | None = None, replay_port: int | None = None,
                 host: str = "127.0.0.1", buffer_size: int = DEFAULT_BUFFER_SIZE,
                 replay_topic_frame: bool = True, *, explicit_nulls: bool = True) -> None:
        for name, value in (("port", port), ("replay_port", replay_port)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value <= 65535):
                raise ValueError(f"{name} must be a TCP port (an integer in 0..65535, 0 = any free port), "
                                 f"got {value!r}")
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"buffer_size must be an integer >= 1, got {buffer_size!r}")
        self._host = host
        self._buffer_size = buffer_size
        self._replay_topic_frame = replay_topic_frame
        self._explicit_nulls = explicit_nulls
        self._lock = threading.Lock()
        self._next_seq = 0
        self._closed = False
        self._thread_error: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._state = _Shared(ring=collections.deque(maxlen=buffer_size))

        self._ctx = zmq.Context(io_threads=1)
        zsocks: list[zmq.Socket] = []
        ends: list[socket.socket] = []
        try:
            router = None
            if replay_port is not None:
                router = self._bind(zmq.ROUTER, replay_port, "replay ROUTER")
                zsocks.append(router)
            pub = self._bind(zmq.PUB, port, "PUB")
            zsocks.append(pub)
            ends.extend(socket.socketpair())
            for end in ends:
                end.setblocking(False)
        except BaseException:
            self._release(zsocks, ends)
            raise
        self._pub: zmq.Socket = pub
        self._router: zmq.Socket | None = router
        self._wake_r, self._wake_w = ends
        self._endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._port = int(self._endpoint.rsplit(":", 1)[1])
        self._replay_endpoint = (None if self._router is None
                                 else self._router.getsockopt_string(zmq.LAST_ENDPOINT))
        self._replay_port = (None if self._replay_endpoint is None
                             else int(self._replay_endpoint.rsplit(":", 1)[1]))
        # The sockets migrate to the thread here; Thread.start() is the memory barrier ZMQ needs.
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"mocker-kv-zmq-{self._port}")
        self._thread.start()

    # -- setup ------------------------------------------------------------------------------

    def _bind(self, kind: int, port: int | None, what: str) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        sock.setsockopt(zmq.SNDTIMEO, 0)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.RCVTIMEO, 100)
            sock.setsockopt(zmq.SNDHWM, self._buffer_size + 2)
        endpoint = f"tcp://{self._host}:{port if port else '*'}"
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            raise KvEventBindError(exc.errno, f"cannot bind KV event {what} socket to "
                                              f"{endpoint}: {exc.strerror}") from exc
        return sock

    def _release(self, zsocks: list[zmq.Socket], ends: list[socket.socket]) -> None:
        for sock in zsocks:
            sock.close(linger=0)
        for end in ends:
            end.close()
        self._ctx.term()        # returns once the listeners are closed: the ports are free again

    # -- properties -------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The PUB socket's bound endpoint, e.g. ``tcp://127.0.0.1:41234``."""
        return self._endpoint

    @property
    def port(self) -> int:
        return self._port

    @property
    def replay_endpoint(self) -> str | None:
        return self._replay_endpoint

    @property
    def replay_port(self) -> int | None:
        return self._replay_port

    @property
    def next_seq(self) -> int:
        """The sequence number the next emitted message will carry (= messages emitted so far)."""
        return self._next_seq

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stats(self) -> dict[str, int]:
        s = self._state
        return {"published": self._next_seq, "sent": s.sent, "send_failures": s.send_failures,
                "replays_served": s.replays_served, "bad_replay_requests": s.bad_requests}

    # -- KvEventSink ------------------------------------------------------------------------

    def publish(self, batch: KvEventBatch) -> None:
        """Encode and queue one batch; never blocks.  Raises ``SinkClosedError`` after close."""
        payload = encode_batch(batch, explicit_nulls=self._explicit_nulls)
        with self._lock:
            if self._closed:
                raise SinkClosedError(f"KV event publisher {self._endpoint} is closed")
            if self._thread_error is not None:
                raise SinkClosedError(f"KV event publisher {self._endpoint} failed: "
                                      f"{self._thread_error!r}")
            if payload is None:
                return
            seq = self._next_seq
            self._next_seq = seq + 1
            self._queue.put((seq, payload))
        self._wake()

    def close(self) -> None:
        """Send what is queued, stop the thread, close the sockets; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        self._thread.join(timeout=5.0)
        if self._thread.is_alive():     # cannot happen short of a bug: every send is non-blocking
            log.error("KV event publisher thread for %s did not stop; leaking its sockets",
                      self._endpoint)
            return
        self._release([self._pub] if self._router is None else [self._pub, self._router],
                      [self._wake_r, self._wake_w])

    def __enter__(self) -> "ZmqKvEventPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ZmqKvEventPublisher(endpoint={self._endpoint!r}, "
                f"replay_endpoint={self._replay_endpoint!r}, closed={self._closed})")

    # -- the publishing thread --------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass                # the pipe is full: a wakeup is already pending (or we are closing)

    def _run(self) -> None:
        try:
            poller = zmq.Poller()
            router = self._router
            poller.register(self._wake_r, zmq.POLLIN)
            if router is not None:
                poller.register(router, zmq.POLLIN)
            while True:
                ready = dict(poller.poll())
                if self._wake_r in ready:
                    self._drain_wakeups()
                self._flush()
                if self._closed and self._queue.empty():
                    # publish() enqueues under the lock before _closed can be set: nothing follows.
                    return
                if router is not None and router in ready:
                    if not self._serve_replays(router):
                        poller.unregister(router)
        except BaseException as exc:        # keep publish() from queueing into a dead thread
            log.exception("KV event publisher thread for %s failed", self._endpoint)
            self._thread_error = exc

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _flush(self) -> None:
        state, pub = self._state, self._pub
        keep = self._router is not None
        while True:
            try:
                seq, payload = self._queue.get_nowait()
            except queue.Empty:
                return
            if keep:
                state.ring.append((seq, payload))
            try:
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
                state.sent += 1
            except zmq.ZMQError as exc:
                state.send_failures += 1
                if state.send_failures == 1:
                    log.warning("KV event PUB send on %s failed (%s); further failures are only "
                                "counted", self._endpoint, exc)

    def _serve_replays(self, router: zmq.Socket) -> bool:
        """Answer every pending replay request.  False: the ROUTER failed and replay is disabled."""
        try:
            while True:
                try:
                    frames = router.recv_multipart(flags=zmq.NOBLOCK)
                except zmq.Again:
                    return True
                self._flush()   # everything published before the request is in the reply
                self._answer(router, frames)
        except zmq.ZMQError:
            log.exception("KV event replay ROUTER %s failed; replay disabled", self._replay_endpoint)
            return False

    def _answer(self, router: zmq.Socket, frames: list[bytes]) -> None:
        state = self._state
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            state.bad_requests += 1
            log.warning("ignoring malformed KV event replay request on %s: %d frames, sizes %s "
                        "(expected [identity, b'', 8-byte start seq])", self._replay_endpoint,
                        len(frames), [len(f) for f in frames])
            return
        identity, start_seq = frames[0], int.from_bytes(frames[2], "big")
        ring = state.ring
        head = (identity, b"", b"") if self._replay_topic_frame else (identity, b"")
        try:
            if ring:
                first, last = ring[0][0], ring[-1][0]
                if not first <= start_seq <= last:
                    log.info("KV event replay from seq %d on %s: buffer holds %d..%d", start_seq,
                             self._replay_endpoint, first, last)
                for seq, payload in itertools.islice(ring, max(0, start_seq - first), None):
                    router.send_multipart((*head, seq.to_bytes(8, "big"), payload),
                                          flags=zmq.NOBLOCK)
            else:
                log.info("KV event replay from seq %d on %s: buffer empty", start_seq,
                         self._replay_endpoint)
            router.send_multipart((*head, END_SEQ, b""), flags=zmq.NOBLOCK)
        except zmq.Again:       # not raised by a ROUTER without ROUTER_MANDATORY; be safe anyway
            log.warning("KV event replay to a client of %s cut short: send queue full",
                        self._replay_endpoint)
            return
        state.replays_served += 1
