# cython: language_level=3
"""Request output streams of the live engine: the per-token hand-off between the pass loop
and thousands of consumer tasks.

A ``SignalStream`` is a bounded FIFO of output signals with at most one waiting reader.  The
pass loop hands a whole pass out with ``handout()`` (one call, a C loop); a reader's
``async for`` / ``await stream.__anext__()`` gets an awaitable that is a C iterator, not a
coroutine: it takes the next signal from the queue when the task runs, and otherwise parks the
task on a ``_Park``, an object that asyncio's tasks treat as a future (the duck-typed future
protocol both the C and the pure-Python ``Task`` accept).  The signal stays queued until the
reader's task actually resumes, so a reader cancelled at any moment (a timeout, a task cancel
landing in the same loop iteration as the wake-up) never loses a signal.

Waking a consumer is the per-token cost that bounds how many live streams one event loop can
pace.  With an asyncio future per read, a hand-out of 2,000 signals allocated 2,000 futures and
scheduled 2,000 loop handles (``call_soon`` with a context keyword, one by one from C); here
a hand-out marks the parks done and schedules *one* loop callback, the loop's ``_Dispatcher``,
which calls each woken task's own wake-up in the task's context, in hand-out order (a C task's
wake-up is handed a finished asyncio future, see ``_Park._fire``).  Measured at 2,000 streams
(``benchmarks/live_pacing.py``): the hand-out went from ~1.3 to ~0.3 µs per signal and a
consumer's wake-up from ~3.9 to ~2–3 µs.
"""
cimport cython
from cpython.object cimport PyObject
from collections import deque
from contextvars import copy_context
import weakref

from asyncio import CancelledError, InvalidStateError
try:
    import _asyncio as _asyncio_c
except ImportError:                    # an interpreter without asyncio's C tasks
    _asyncio_c = None


cdef extern from "Python.h":
    int PyContext_Enter(object ctx) except -1
    int PyContext_Exit(object ctx) except -1
    PyObject *PyCFunction_GET_SELF(object func)    # borrowed, may be NULL

cdef extern from *:
    """
    /* asyncio's C Task registers a built-in method named "task_wakeup" (3.11-3.13); 3.10's
       wake-up is a TaskWakeupMethWrapper object, which takes the generic path (park.result()) */
    static inline int mocker_named_task_wakeup(PyObject *fn) {
        const char *name = ((PyCFunctionObject *)fn)->m_ml->ml_name;
        return name != NULL && strcmp(name, "task_wakeup") == 0;
    }
    """
    bint mocker_named_task_wakeup(object fn)

cdef object _BuiltinMethod = type(len)
cdef object _CTask = _asyncio_c.Task if _asyncio_c is not None else None


class StreamInterrupted(Exception):
    """``recv()`` was woken by ``LiveRequest.interrupt()`` (its caller's context stopped)."""


# states of a ``_Park``, the future-like object a reader's task waits on
cdef enum:
    IDLE = 0          # not parked (running, or handed a signal back)
    PARKED = 1        # the task waits on it
    WOKEN = 2         # done: the task's wake-up is scheduled
    CANCELLED = 3     # done: cancelled while parked (the task sees CancelledError)


cdef class _Dispatcher:
    """Runs the wake-ups of the readers a hand-out woke, all in one event-loop callback.

    A wake-up is the reader task's own done-callback, called in its own context, in the
    order the signals were handed out: what the loop would do with one handle per reader,
    without allocating and scheduling a future and a handle for each."""
    def __cinit__(self, loop):
        self._pending = []
        self._scheduled = False
        self._loop = loop
        # what a woken C task reads its result from (see _Park._fire)
        self._done = loop.create_future()
        self._done.set_result(None)

    cdef int _add(self, _Park r) except -1:
        self._pending.append(r)
        if not self._scheduled:
            self._loop.call_soon(self)
            self._scheduled = True
        return 0

    def __call__(self):
        cdef list batch = self._pending
        cdef Py_ssize_t i = 0, n = len(batch)
        cdef _Park r
        self._pending = []
        self._scheduled = False
        try:
            while i < n:
                r = <_Park>batch[i]
                i += 1
                try:
                    r._fire(self._done)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:      # as the loop does for a failing callback
                    self._loop.call_exception_handler({
                        "message": "Exception in a stream reader's wake-up", "exception": exc})
        finally:
            if i < n:
                # the loop is stopping (SystemExit / KeyboardInterrupt from a wake-up or from the
                # exception handler): the wake-ups not yet run run when it runs again
                try:
                    for r in batch[i:]:
                        self._add(r)
                except RuntimeError:              # the loop is closed: nothing will run
                    pass


# one dispatcher per live event loop; it holds its loop, the streams hold it, so it (and the
# loop) lives as long as a stream of that loop does
_dispatchers = weakref.WeakValueDictionary()      # id(loop) -> _Dispatcher


cdef _Dispatcher _dispatcher_for(loop):
    d = _dispatchers.get(id(loop))
    if d is None or (<_Dispatcher>d)._loop is not loop:
        d = _Dispatcher(loop)
        _dispatchers[id(loop)] = d
    return <_Dispatcher>d


cdef class SignalStream:
    """A bounded queue of signals with one reader (see the module docstring)."""

    def __cinit__(self, *args, **kwargs):
        self._head = None
        self._rest = None
        self._n = 0
        self._cap = 1
        self._closed = False
        self._interrupted = False
        self._waiter = None
        self._disp = None

    def _init_stream(self, loop, Py_ssize_t capacity):
        self._disp = _dispatcher_for(loop)
        self._cap = capacity if capacity > 0 else 1

    # -- the queue: the oldest signal inline, the rest (rarely any) in a deque ---------------
    cdef inline void _push(self, sig):
        if self._n == 0:
            self._head = sig
        else:
            if self._rest is None:
                self._rest = deque()
            self._rest.append(sig)
        self._n += 1

    cdef inline object _pop(self):
        r = self._head
        self._n -= 1
        self._head = self._rest.popleft() if self._n else None
        return r

    # -- producer side (the pass loop) -----------------------------------------------------
    cdef int _wake(self) except -1:
        cdef _Park r
        if self._waiter is not None:
            r = <_Park>self._waiter
            self._waiter = None
            if r._state == PARKED:
                r._state = WOKEN
                if r._cb is not None:
                    self._disp._add(r)     # a parked reader implies _init_stream was called
        return 0

    def _offer(self, sig) -> bool:
        """Queue one signal and wake the reader; False if the stream is closed or full."""
        if self._closed or self._n >= self._cap:
            return False
        self._push(sig)
        self._wake()
        return True

    def _close(self):
        """No more signals: the reader drains what is queued, then sees the end."""
        if not self._closed:
            self._closed = True
            self._wake()

    def interrupt(self):
        """Make the pending (or next) read raise ``StreamInterrupted`` once."""
        self._interrupted = True
        self._wake()

    # -- consumer side ---------------------------------------------------------------------
    def __aiter__(self):
        return self

    def __anext__(self):
        cdef _NextSignal nxt = _NextSignal.__new__(_NextSignal)
        nxt.stream = self
        return nxt

    @property
    def closed(self) -> bool:
        """Ended and fully read."""
        return self._closed and self._n == 0

    @property
    def queued(self) -> int:
        return self._n


cdef extern from *:
    """
    /* _NextSignal's iterator slots, written against the C API so that handing a signal back
       to the awaiting coroutine creates no exception object and no traceback (a Cython
       ``raise StopIteration(value)`` would do both on every read). */
    typedef PyObject *(*mocker_advance_fn)(PyObject *, int *);
    static mocker_advance_fn mocker_advance = NULL;

    static PyObject *mocker_next_iternext(PyObject *self) {
        int done = 0;
        PyObject *r = mocker_advance(self, &done);
        if (r == NULL || !done) return r;
        if (PyTuple_Check(r) || PyExceptionInstance_Check(r)) {
            PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, r);
            Py_DECREF(r);
            if (e != NULL) { PyErr_SetObject(PyExc_StopIteration, e); Py_DECREF(e); }
            return NULL;
        }
        PyErr_SetObject(PyExc_StopIteration, r);
        Py_DECREF(r);
        return NULL;
    }

    #if PY_VERSION_HEX >= 0x030A0000
    static PySendResult mocker_next_send(PyObject *self, PyObject *arg, PyObject **presult) {
        int done = 0;
        PyObject *r = mocker_advance(self, &done);
        *presult = r;
        if (r == NULL) return PYGEN_ERROR;
        return done ? PYGEN_RETURN : PYGEN_NEXT;
    }
    #endif

    static int mocker_install_next_slots(PyObject *type, mocker_advance_fn fn) {
        PyTypeObject *t = (PyTypeObject *)type;
        mocker_advance = fn;
        t->tp_iternext = mocker_next_iternext;
    #if PY_VERSION_HEX >= 0x030A0000
        if (t->tp_as_async != NULL) t->tp_as_async->am_send = mocker_next_send;
    #endif
        PyType_Modified(t);
        return 0;
    }
    """
    ctypedef PyObject *(*mocker_advance_fn)(PyObject *, int *)
    int mocker_install_next_slots(object type, mocker_advance_fn fn) except -1


@cython.freelist(64)
@cython.final
cdef class _NextSignal:
    """The awaitable of one read: an iterator the consumer's task drives directly."""

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        # the type's iterator slots are replaced by C versions at import (see above); this
        # method is what an explicit ``it.__next__()`` call reaches
        cdef int done = 0
        r = _advance(self, &done)
        if done:
            raise StopIteration(r)
        return r

    def send(self, value):
        return self.__next__()

    def throw(self, typ, val=None, tb=None):
        # the reading task was cancelled (or something else was thrown in): leave the queue as
        # it is — an undelivered signal stays for the next read — and let it propagate
        self._unpark()
        if val is None:
            raise typ
        if tb is not None:
            raise val.with_traceback(tb)
        raise val

    def close(self):
        self._unpark()

    cdef void _unpark(self):
        p = self.park
        if p is not None:
            self.park = None
            if self.stream._waiter is p:
                self.stream._waiter = None
            (<_Park>p)._drop()


@cython.freelist(256)
@cython.final
cdef class _Park:
    """What a reader's task waits on while its stream is empty: a future as far as asyncio's
    tasks are concerned (its duck-typed protocol: ``_asyncio_future_blocking``,
    ``add_done_callback``, ``result``, ``cancel``...), completed by the producer's wake-up,
    which the stream's dispatcher then runs in the task's context."""

    cdef int _fire(self, done) except -1:
        """Run the waiting task's wake-up in its context.  A C task's wake-up is handed
        ``done``, a finished asyncio future with the same outcome as this park (result None):
        the callback takes the future it reads the outcome from, and for an exact asyncio
        future the C task reads it directly, where for any other object it looks up and calls
        a ``result`` method by name (a string built, hashed and looked up on every wake-up)."""
        cb, ctx, more = self._cb, self._ctx, self._more
        self._cb = self._ctx = self._more = None
        if cb is None:
            return 0
        try:
            PyContext_Enter(ctx)
            try:
                if self._cb_task:
                    cb(done)
                else:
                    cb(self)
            finally:
                PyContext_Exit(ctx)
        finally:
            if more:                      # further callbacks run even if the first one failed
                self._schedule(more)
        return 0

    cdef void _set_cb(self, fn, ctx):
        self._cb = fn
        self._ctx = ctx
        cdef PyObject *owner = NULL
        if type(fn) is _BuiltinMethod and mocker_named_task_wakeup(fn):
            owner = PyCFunction_GET_SELF(fn)
        self._cb_task = owner != NULL and type(<object>owner) is _CTask

    cdef void _drop(self):
        # the read that parked here is over (resumed, cancelled, or closed)
        if self._state == PARKED:
            self._state = IDLE
        self._cb = self._ctx = self._more = None

    cdef _schedule(self, list pairs):
        loop = self.get_loop()
        for cb, ctx in pairs:
            loop.call_soon(cb, self, context=ctx)

    def __repr__(self):
        state = ("idle", "pending", "finished", "cancelled")[self._state]
        return f"<stream read {state}>"

    def get_loop(self):
        if self.stream is None:
            raise RuntimeError("a stream read's park is made by the stream, not by hand")
        return self.stream._disp._loop

    def add_done_callback(self, fn, *, context=None):
        if context is None:
            context = copy_context()
        if self._state == WOKEN or self._state == CANCELLED:
            self.get_loop().call_soon(fn, self, context=context)
        elif self._cb is None:
            self._set_cb(fn, context)
        else:
            if self._more is None:
                self._more = []
            self._more.append((fn, context))

    def remove_done_callback(self, fn):
        cdef Py_ssize_t n = 0
        if self._cb is not None and self._cb == fn:
            self._cb = self._ctx = None
            n += 1
        if self._more:
            keep = [p for p in self._more if p[0] != fn]
            n += len(self._more) - len(keep)
            self._more = keep
        if self._cb is None and self._more:
            fn2, ctx2 = self._more.pop(0)
            self._set_cb(fn2, ctx2)
        return n

    def done(self):
        return self._state == WOKEN or self._state == CANCELLED

    def cancelled(self):
        return self._state == CANCELLED

    def result(self):
        if self._state == WOKEN:
            return None
        if self._state == CANCELLED:
            raise CancelledError() if self._cancel_msg is None else CancelledError(self._cancel_msg)
        raise InvalidStateError("Result is not ready.")

    def exception(self):
        if self._state == WOKEN:
            return None
        return self.result()

    def cancel(self, msg=None):
        """The waiting task is cancelled: stop waiting (a signal queued meanwhile stays for
        the next read)."""
        if self._state != PARKED:
            return False
        self._state = CANCELLED
        self._cancel_msg = msg
        s = self.stream
        if s._waiter is self:
            s._waiter = None
        pairs = [] if self._cb is None else [(self._cb, self._ctx)]
        if self._more:
            pairs.extend(self._more)
        self._cb = self._ctx = self._more = None
        self._schedule(pairs)
        return True


cdef object _advance(object obj, int* done):
    """One step of a read: the next signal (``done`` set), or the object to park on."""
    cdef _NextSignal self = <_NextSignal>obj
    cdef SignalStream s = self.stream
    cdef _Park p
    if s is None:
        raise RuntimeError("a stream read is made by SignalStream.__anext__, not by hand")
    if self.park is not None:
        self._unpark()
    if s._interrupted:
        s._interrupted = False
        raise StreamInterrupted()
    if s._n:
        done[0] = 1
        return s._pop()
    if s._closed:
        raise StopAsyncIteration
    if s._waiter is not None:
        # one reader at a time: a second would take the wake-up from the first (e.g. a read
        # left pending under asyncio.shield or asyncio.wait while the caller reads again)
        raise RuntimeError("another read of this stream is already waiting")
    if s._disp is None:
        raise RuntimeError("stream not initialised (_init_stream was not called)")
    p = _Park.__new__(_Park)
    p.stream = s
    p._state = PARKED
    p._asyncio_future_blocking = True       # what Future.__await__ sets before it yields
    s._waiter = p
    self.park = p
    return p


mocker_install_next_slots(_NextSignal, <mocker_advance_fn>_advance)


def handout(list streams, list sigs, double wall):
    """Hand one pass's signals out in order: stamp ``observed_at``, queue, wake the reader.

    Returns the positions whose stream was full (the caller abandons those requests; their
    stream is closed here, so the reader drains what it holds and then sees the end), or None.
    Closed streams are skipped."""
    cdef Py_ssize_t i, n = len(streams)
    cdef SignalStream s
    cdef list overflowed = None
    stamp = wall                      # one float object for the whole pass
    if len(sigs) != n:
        raise ValueError("handout: streams and signals differ in length")
    for i in range(n):
        s = <SignalStream?>streams[i]
        if s._closed:
            continue
        sig = sigs[i]
        if s._n >= s._cap:
            s._closed = True
            s._wake()
            if overflowed is None:
                overflowed = []
            overflowed.append(i)
            continue
        sig.observed_at = stamp
        s._push(sig)
        s._wake()
    return overflowed
