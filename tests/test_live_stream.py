"""The compiled request stream (mocker._core.stream): order, bounds, end, interruption, and that a
read cancelled at any moment loses no signal."""
import asyncio

import pytest

from mocker._core.stream import SignalStream, StreamInterrupted, handout
from mocker.live.engine import LiveEngine, LiveEngineError


class Sig:
    __slots__ = ("v", "observed_at")

    def __init__(self, v):
        self.v = v
        self.observed_at = None


class Stream(SignalStream):
    __slots__ = ()

    def __init__(self, loop, capacity):
        self._init_stream(loop, capacity)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_signals_arrive_in_order_then_the_stream_ends():
    async def main():
        s = Stream(asyncio.get_running_loop(), 100)
        got = []

        async def reader():
            async for sig in s:
                got.append((sig.v, sig.observed_at))

        task = asyncio.ensure_future(reader())
        await asyncio.sleep(0)                      # the reader parks on an empty stream
        assert handout([s, s], [Sig(1), Sig(2)], 5.0) is None
        handout([s], [Sig(3)], 6.0)
        s._close()
        await task
        return got, s.closed

    got, closed = run(main())
    assert got == [(1, 5.0), (2, 5.0), (3, 6.0)]
    assert closed


def test_a_read_cancelled_after_its_wake_up_keeps_the_signal():
    async def main():
        s = Stream(asyncio.get_running_loop(), 8)
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        handout([s], [Sig("a")], 0.0)               # wakes the reader ...
        task.cancel()                               # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.queued == 1
        first = await s.__anext__()
        with pytest.raises(asyncio.TimeoutError):   # a timed-out read loses nothing either
            await asyncio.wait_for(s.__anext__(), 0.01)
        s._offer(Sig("b"))
        second = await s.__anext__()
        return first.v, second.v

    assert run(main()) == ("a", "b")


def test_a_full_stream_is_closed_and_reported_and_closed_streams_are_skipped():
    async def main():
        loop = asyncio.get_running_loop()
        full, other = Stream(loop, 1), Stream(loop, 1)
        over = handout([full, full, other], [Sig(1), Sig(2), Sig(3)], 0.0)
        assert over == [1]
        assert handout([full], [Sig(4)], 0.0) is None       # closed: skipped, not overflowed again
        got = [sig.v async for sig in full]
        return got, other.queued

    assert run(main()) == ([1], 1)


def test_interrupt_wakes_a_parked_read_once():
    async def main():
        s = Stream(asyncio.get_running_loop(), 4)
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        s.interrupt()
        with pytest.raises(StreamInterrupted):
            await task
        s._offer(Sig(7))
        return (await s.__anext__()).v

    assert run(main()) == 7


def test_tuple_signals_come_back_whole():
    async def main():
        s = Stream(asyncio.get_running_loop(), 4)
        s._offer((1, 2))
        awaited = await s.__anext__()                       # the coroutine protocol (am_send)
        s._offer((3, 4))
        with pytest.raises(StopIteration) as stop:          # the iterator protocol (tp_iternext)
            next(s.__anext__())
        s._offer((5, 6))
        with pytest.raises(StopIteration) as stop2:         # an explicit __next__() call
            s.__anext__().__next__()
        return awaited, stop.value.value, stop2.value.value

    assert run(main()) == ((1, 2), (3, 4), (5, 6))


@pytest.mark.parametrize("bad", [-1.0, float("inf"), "soon", True])
def test_handout_lead_must_be_auto_or_seconds(bad):
    with pytest.raises(LiveEngineError, match="handout_lead"):
        LiveEngine({"engine": {}}, handout_lead=bad)
