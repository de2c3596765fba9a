"""The compiled request stream (mocker._core.stream): order, bounds, end, interruption, and that a
read cancelled at any moment loses no signal."""
import asyncio
import sys

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


def test_a_read_is_an_awaitable_not_a_future():
    # asyncio.wait_for / ensure_future must wrap a read in a task that drives it; were the
    # read itself future-like they would wait on it without ever driving it
    async def main():
        s = Stream(asyncio.get_running_loop(), 4)
        nxt = s.__anext__()
        assert not asyncio.isfuture(nxt)
        task = asyncio.ensure_future(nxt)
        assert isinstance(task, asyncio.Task)
        s._offer(Sig("x"))
        return (await asyncio.wait_for(task, 1)).v

    assert run(main()) == "x"


def test_readers_wake_in_hand_out_order_in_their_own_context():
    import contextvars
    who = contextvars.ContextVar("who")

    async def main():
        loop = asyncio.get_running_loop()
        streams = [Stream(loop, 4) for _ in range(50)]
        seen = []

        async def reader(i):
            who.set(i)
            async for sig in streams[i]:
                seen.append((who.get(), sig.v))

        tasks = [asyncio.ensure_future(reader(i)) for i in range(50)]
        await asyncio.sleep(0)
        order = list(range(50))
        order.reverse()
        handout([streams[i] for i in order], [Sig(i) for i in order], 1.0)
        await asyncio.sleep(0)
        for s in streams:
            s._close()
        await asyncio.gather(*tasks)
        return seen, order

    seen, order = run(main())
    assert seen == [(i, i) for i in order]


class _Awaiting:
    """An awaitable that is not a future, so that ensure_future wraps it in a task."""

    def __init__(self, fut):
        self.fut = fut

    def __await__(self):
        return self.fut.__await__()


def _args_chain(exc):
    """The args of an exception and of each one in its ``__context__`` chain."""
    out = []
    while exc is not None:
        out.append(exc.args)
        exc = exc.__context__
    return out


@pytest.mark.parametrize("task_type", ["C Task", "pure-Python Task"])
def test_a_parked_read_cancelled_with_a_message_keeps_later_signals(task_type):
    # The message reaches the awaiting code as it does from asyncio's own future on this
    # Python: as the CancelledError's args from 3.11 on; on 3.10 asyncio's Task re-raises a
    # bare CancelledError whose __context__ holds the message (changed in 3.11, bpo-45390).
    from asyncio.tasks import _PyTask

    async def main():
        loop = asyncio.get_running_loop()

        def start(aw):
            if task_type == "C Task":
                return asyncio.ensure_future(aw)

            async def wrapped():
                return await aw
            return _PyTask(wrapped(), loop=loop)

        s = Stream(loop, 4)
        chains = []
        for aw in (s.__anext__(), _Awaiting(loop.create_future())):
            task = start(aw)
            await asyncio.sleep(0)
            task.cancel("stop reading")
            with pytest.raises(asyncio.CancelledError) as err:
                await task
            chains.append(_args_chain(err.value))
        assert handout([s], [Sig("late")], 0.0) is None     # nobody parked: just queued
        return chains, (await s.__anext__()).v

    (stream_chain, future_chain), late = run(main())
    assert stream_chain == future_chain
    assert ("stop reading",) in stream_chain
    if sys.version_info >= (3, 11):
        assert stream_chain[0] == ("stop reading",)
    assert late == "late"


def test_a_failing_wake_up_is_reported_and_the_others_still_run():
    # drive two reads by hand: the park each yields takes done-callbacks like a future
    async def main():
        loop = asyncio.get_running_loop()
        errors, woken = [], []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["exception"]))
        a, b = Stream(loop, 4), Stream(loop, 4)
        park_a = a.__anext__().__await__().send(None)
        park_b = b.__anext__().__await__().send(None)
        assert not park_a.done() and park_a.get_loop() is loop

        def bad(fut):
            raise ValueError("boom")

        park_a.add_done_callback(bad)
        park_b.add_done_callback(woken.append)
        handout([a, b], [Sig(1), Sig(2)], 0.0)
        assert park_a.done() and park_a.result() is None
        await asyncio.sleep(0)
        park_a.add_done_callback(woken.append)              # on a done park: scheduled at once
        await asyncio.sleep(0)
        return [type(e) for e in errors], woken == [park_b, park_a]

    assert run(main()) == ([ValueError], True)


def test_the_pure_python_task_drives_reads_too():
    # asyncio's pure-Python Task takes the same duck-typed future protocol (keyword msg etc.)
    from asyncio.tasks import _PyTask

    async def main():
        loop = asyncio.get_running_loop()
        s = Stream(loop, 4)

        async def read_two():
            return [(await s.__anext__()).v, (await s.__anext__()).v]

        task = _PyTask(read_two(), loop=loop)
        await asyncio.sleep(0)
        handout([s], [Sig(1)], 0.0)
        await asyncio.sleep(0)
        s._offer(Sig(2))
        got = await task
        parked = _PyTask(read_two(), loop=loop)
        await asyncio.sleep(0)
        parked.cancel("bye")
        with pytest.raises(asyncio.CancelledError):
            await parked
        return got

    assert run(main()) == [1, 2]


def test_streams_on_uvloop():
    uvloop = pytest.importorskip("uvloop")

    async def main():
        s = Stream(asyncio.get_running_loop(), 4)
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        handout([s], [Sig("u")], 0.0)
        got = (await task).v
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(s.__anext__(), 0.01)
        s._offer(Sig("v"))
        return got, (await s.__anext__()).v

    assert uvloop.run(main()) == ("u", "v")


def test_event_loops_are_not_kept_alive_by_their_streams_dispatcher():
    import gc
    import weakref

    import mocker._core.stream as stream_mod

    loops = []

    async def main():
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        s = Stream(loop, 4)
        task = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        handout([s], [Sig(1)], 0.0)
        return (await task).v

    for _ in range(5):
        assert asyncio.run(main()) == 1
    gc.collect()
    assert [r() for r in loops] == [None] * 5
    assert len(stream_mod._dispatchers) == 0


def test_a_second_concurrent_read_is_refused_not_left_hanging():
    async def main():
        s = Stream(asyncio.get_running_loop(), 4)
        first = asyncio.ensure_future(s.__anext__())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already waiting"):
            await s.__anext__()
        s._offer(Sig("one"))
        got = (await first).v
        s._close()
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        return got

    assert run(main()) == "one"


def test_every_done_callback_runs_even_if_an_earlier_one_fails():
    async def main():
        loop = asyncio.get_running_loop()
        errors, woken = [], []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["exception"]))
        s = Stream(loop, 4)
        park = s.__anext__().__await__().send(None)

        def bad(fut):
            raise ValueError("boom")

        park.add_done_callback(bad)
        park.add_done_callback(woken.append)
        s._offer(Sig(1))
        for _ in range(3):
            await asyncio.sleep(0)
        return [type(e) for e in errors], woken == [park]

    assert run(main()) == ([ValueError], True)


def test_wake_ups_not_run_when_the_loop_stops_run_when_it_restarts():
    loop = asyncio.new_event_loop()
    try:
        a, b, c = Stream(loop, 4), Stream(loop, 4), Stream(loop, 4)
        got = []

        async def reader(s, stop):
            sig = await s.__anext__()
            if stop:
                raise KeyboardInterrupt
            got.append(sig.v)

        tasks = [loop.create_task(reader(s, s is b)) for s in (a, b, c)]
        loop.run_until_complete(asyncio.sleep(0))
        handout([a, b, c], [Sig("a"), Sig("b"), Sig("c")], 0.0)
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(0.01))
        assert got == ["a"]
        loop.run_until_complete(asyncio.sleep(0.01))
        assert got == ["a", "c"] and tasks[2].done()
        assert isinstance(tasks[1].exception(), KeyboardInterrupt)     # retrieved: no log at exit
    finally:
        loop.close()


def test_misuse_is_an_error_not_a_crash():
    async def main():
        bare = SignalStream()                          # never initialised
        with pytest.raises(RuntimeError, match="not initialised"):
            await bare.__anext__()
        s = Stream(asyncio.get_running_loop(), 4)
        with pytest.raises(TypeError):
            handout([s, object()], [Sig(1), Sig(2)], 0.0)

    run(main())
