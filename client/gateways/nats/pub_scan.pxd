# Declarations for the compiled build (docs/architecture.md): the buffer's offsets and the size as machine
# integers, so that a plain PUB is one pass of byte comparisons.
import cython

cdef Py_ssize_t _P, _U, _B, _SPACE, _CR, _LF, _ZERO, _NINE, _TILDE, _MAX_DIGITS

@cython.locals(size=Py_ssize_t, end=Py_ssize_t, start=Py_ssize_t, index=Py_ssize_t, subject_end=Py_ssize_t,
               digits_start=Py_ssize_t, total=Py_ssize_t, payload_start=Py_ssize_t, payload_end=Py_ssize_t)
cpdef tuple plain_pub(bytearray buffer, Py_ssize_t pos, Py_ssize_t max_payload, Py_ssize_t max_line)
