# Declarations for the compiled build (docs/architecture.md): the log as a class of C fields, its positions and
# sizes as machine integers, so that copying a one-message datagram in is a few C steps around one memcpy.
import cython

cdef Py_ssize_t _HEADER

cdef class RecentLog:
    cdef public Py_ssize_t max_bytes
    cdef public Py_ssize_t bytes
    cdef object _ring
    cdef object _view
    cdef Py_ssize_t _head
    cdef object _firsts, _starts, _lengths, _steps, _counts
    cdef Py_ssize_t _oldest

    @cython.locals(capacity=Py_ssize_t, size=Py_ssize_t, start=Py_ssize_t, offset=Py_ssize_t, end=Py_ssize_t,
                   oldest=Py_ssize_t)
    cpdef add(self, list entries)
