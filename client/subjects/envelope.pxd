# Declarations for the compiled build (docs/architecture.md): the payload's bytes (``data``), its
# lengths and offsets as machine integers.
import cython

cdef Py_ssize_t _FIXED_SIZE, _MAGIC0, _MAGIC1, _TYPE_COUNT, _STATUS_COUNT

@cython.locals(data=bytes, size=Py_ssize_t, version=Py_ssize_t, kind=Py_ssize_t, status=Py_ssize_t,
               flags=Py_ssize_t, subject_len=Py_ssize_t, offset=Py_ssize_t, length=Py_ssize_t, checked=bint)
cpdef decode(payload, dict known_subjects=*)

@cython.locals(data=bytes, size=Py_ssize_t, version=Py_ssize_t, end=Py_ssize_t)
cpdef peek_subject(payload)
