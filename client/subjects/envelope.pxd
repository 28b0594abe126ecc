# Declarations for the compiled build (docs/architecture.md): machine integers for the lengths and offsets.
import cython

cdef Py_ssize_t _FIXED_SIZE, _MAGIC0, _MAGIC1, _TYPE_COUNT, _STATUS_COUNT

@cython.locals(size=Py_ssize_t, version=Py_ssize_t, kind=Py_ssize_t, status=Py_ssize_t, flags=Py_ssize_t,
               subject_len=Py_ssize_t, offset=Py_ssize_t, length=Py_ssize_t, checked=bint)
cpdef decode(bytes payload, dict known_subjects=*)

@cython.locals(size=Py_ssize_t, version=Py_ssize_t, end=Py_ssize_t)
cpdef peek_subject(bytes payload)
