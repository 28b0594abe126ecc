# Declarations for the compiled build (docs/architecture.md): the outbox and its slots as classes of C fields, whose
# methods call each other directly; every field a connection or driver reads or sets stays public.  The bytes
# travel as objects (a framing may hand back any bytes-like value).

cdef class Slot:
    cdef public object data
    cdef public bint filled
    cdef public object close

cdef class _Close:
    cdef public object reason

cdef class Outbox:
    cdef public object became_ready, owner, framing, closing
    cdef public bint held
    cdef public Py_ssize_t waiting
    cdef public list _ready  # read by its tests
    cdef object _queue
    cpdef object take(self)
    cpdef reply(self, object data)
    cpdef push(self, object data)
    cpdef raw(self, object data)
    cpdef Slot hold(self)
    cpdef fill(self, Slot slot, object data, str close=*)
    cpdef close(self, str reason)
    cpdef close_now(self, str reason, object farewell=*)
    cdef _release(self)
    cdef _closed(self, str reason)
    cdef _write(self, object data)
    cdef _turned_ready(self)
