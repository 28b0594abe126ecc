# Declarations for the compiled build (docs/architecture.md): the envelope's offsets as machine integers, so that
# reading a plain message's fields is a few byte comparisons.
import cython

cdef Py_ssize_t _MAGIC0, _MAGIC1, _VERSION, _VERSION_HEADERS, _FLAG_REPLY, _FIXED_SIZE

@cython.locals(size=Py_ssize_t, flags=Py_ssize_t, offset=Py_ssize_t, start=Py_ssize_t)
cpdef tuple plain_fields(bytes data)

cpdef bytes msg_tail(bytes data, Py_ssize_t start, object reply)
