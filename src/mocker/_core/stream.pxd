# The live engine's request output streams (see stream.pyx).

cdef class SignalStream:
    cdef object _buf              # collections.deque of signals not yet read
    cdef Py_ssize_t _cap          # queue capacity (>= 1)
    cdef bint _closed             # no more signals will be queued
    cdef bint _interrupted        # the next read raises StreamInterrupted
    cdef object _waiter           # the parked reader's asyncio future, or None
    cdef object _new_future       # the loop's create_future
    cdef void _wake(self)
