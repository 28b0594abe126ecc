# Declarations for the compiled build (docs/architecture.md): the read's offsets, counts and lengths as machine
# integers, so that a read's commands are one pass of byte comparisons and one bytes object per argument.
import cython

cdef Py_ssize_t _STAR, _DOLLAR, _CR, _LF, _ZERO, _NINE, _MAX_DIGITS, _ARG_OVERHEAD

@cython.locals(size=Py_ssize_t, pos=Py_ssize_t, end=Py_ssize_t)
cpdef tuple whole_commands(bytes data, Py_ssize_t max_bulk, Py_ssize_t max_args, Py_ssize_t max_command)

@cython.locals(index=Py_ssize_t, count=Py_ssize_t, total=Py_ssize_t, start=Py_ssize_t, length=Py_ssize_t)
cdef Py_ssize_t _command(bytes data, Py_ssize_t pos, Py_ssize_t size, list args, Py_ssize_t max_bulk,
                         Py_ssize_t max_args, Py_ssize_t max_command) except -2

@cython.locals(index=Py_ssize_t)
cdef Py_ssize_t _number_end(bytes data, Py_ssize_t start, Py_ssize_t size) noexcept

@cython.locals(value=Py_ssize_t, index=Py_ssize_t)
cdef Py_ssize_t _number(bytes data, Py_ssize_t start, Py_ssize_t end) noexcept
