# cython: language_level=3
"""Request output streams of the live engine: the per-token hand-off between the pass loop
and thousands of consumer tasks.

A ``SignalStream`` is a bounded FIFO of output signals with at most one waiting reader.  The
pass loop hands a whole pass out with ``handout()`` (one call, a C loop); a reader's
``async for`` / ``await stream.__anext__()`` gets an awaitable that is a C iterator, not a
coroutine: it takes the next signal from the queue when the task runs, and otherwise parks the
task on one asyncio future that the producer completes with no value.  The signal stays queued
until the reader's task actually resumes, so a reader cancelled at any moment (a timeout, a
task cancel landing in the same loop iteration as the wake-up) never loses a signal.

Waking a consumer is the per-token cost that bounds how many live streams one event loop can
pace; this keeps it to the asyncio minimum (one future, one task step, no Python frame of ours).
"""
cimport cython
from cpython.object cimport PyObject
from collections import deque


class StreamInterrupted(Exception):
    """``recv()`` was woken by ``LiveRequest.interrupt()`` (its caller's context stopped)."""



cdef class SignalStream:
    """A bounded queue of signals with one reader (see the module docstring)."""

    def __cinit__(self, *args, **kwargs):
        self._buf = deque()
        self._cap = 1
        self._closed = False
        self._interrupted = False
        self._waiter = None
        self._new_future = None

    def _init_stream(self, loop, Py_ssize_t capacity):
        self._new_future = loop.create_future
        self._cap = capacity if capacity > 0 else 1

    # -- producer side (the pass loop) -----------------------------------------------------
    cdef void _wake(self):
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def _offer(self, sig) -> bool:
        """Queue one signal and wake the reader; False if the stream is closed or full."""
        if self._closed or len(self._buf) >= self._cap:
            return False
        self._buf.append(sig)
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
        return self._closed and not self._buf

    @property
    def queued(self) -> int:
        return len(self._buf)


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
    cdef SignalStream stream
    cdef object fut

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
        s = self.stream
        if self.fut is not None and s._waiter is self.fut:
            s._waiter = None
        self.fut = None
        if val is None:
            raise typ
        if tb is not None:
            raise val.with_traceback(tb)
        raise val

    def close(self):
        s = self.stream
        if self.fut is not None and s._waiter is self.fut:
            s._waiter = None
        self.fut = None


cdef object _advance(object obj, int* done):
    """One step of a read: the next signal (``done`` set), or the future to park on."""
    cdef _NextSignal self = <_NextSignal>obj
    cdef SignalStream s = self.stream
    self.fut = None
    if s._interrupted:
        s._interrupted = False
        raise StreamInterrupted()
    if s._buf:
        done[0] = 1
        return s._buf.popleft()
    if s._closed:
        raise StopAsyncIteration
    fut = s._new_future()
    fut._asyncio_future_blocking = True       # what Future.__await__ sets before it yields
    s._waiter = fut
    self.fut = fut
    return fut


mocker_install_next_slots(_NextSignal, <mocker_advance_fn>_advance)


def handout(list streams, list sigs, double wall):
    """Hand one pass's signals out in order: stamp ``observed_at``, queue, wake the reader.

    Returns the positions whose stream was full (the caller abandons those requests; their
    stream is closed here, so the reader drains what it holds and then sees the end), or None.
    Closed streams are skipped."""
    cdef Py_ssize_t i, n = len(streams)
    cdef SignalStream s
    cdef list overflowed = None
    if len(sigs) != n:
        raise ValueError("handout: streams and signals differ in length")
    for i in range(n):
        s = <SignalStream>streams[i]
        if s._closed:
            continue
        sig = sigs[i]
        if len(s._buf) >= s._cap:
            s._closed = True
            s._wake()
            if overflowed is None:
                overflowed = []
            overflowed.append(i)
            continue
        sig.observed_at = wall
        s._buf.append(sig)
        s._wake()
    return overflowed
