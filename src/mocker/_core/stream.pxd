# The live engine's request output streams (see stream.pyx).

cdef class _Park

cdef class _Dispatcher:
    cdef list _pending            # readers woken since the last run, in hand-out order
    cdef bint _scheduled          # a run is scheduled on the loop
    cdef object _loop             # the event loop
    cdef object _done             # a finished asyncio future (result None) on that loop
    cdef object __weakref__
    cdef int _add(self, _Park r) except -1

cdef class SignalStream:
    cdef object _head             # the oldest signal not yet read (valid if _n > 0)
    cdef object _rest             # the others, a collections.deque (created when needed)
    cdef Py_ssize_t _n            # signals queued
    cdef Py_ssize_t _cap          # queue capacity (>= 1)
    cdef bint _closed             # no more signals will be queued
    cdef bint _interrupted        # the next read raises StreamInterrupted
    cdef object _waiter           # what the parked read waits on (a _Park), or None
    cdef _Dispatcher _disp        # runs the wake-ups of the loop's readers
    cdef int _wake(self) except -1
    cdef void _push(self, sig)
    cdef object _pop(self)


cdef class _NextSignal:
    cdef SignalStream stream
    cdef _Park park               # what the read is parked on, or None
    cdef void _unpark(self)


cdef class _Park:
    cdef SignalStream stream
    cdef int _state               # IDLE / PARKED / WOKEN / CANCELLED (stream.pyx)
    cdef object _cb               # the waiting task's wake-up callback
    cdef object _ctx              # ... and the context it runs in
    cdef bint _cb_task            # _cb is a C asyncio task's own wake-up
    cdef list _more               # further (callback, context) pairs, rarely any
    cdef object _cancel_msg
    cdef public bint _asyncio_future_blocking
    cdef int _fire(self, done) except -1
    cdef void _set_cb(self, fn, ctx)
    cdef void _drop(self)
    cdef _schedule(self, list pairs)
