# Declarations for the compiled build (docs/architecture.md): the datagram's bytes, its size, frame size and the
# lone frame's number as machine integers.
import cython

cdef Py_ssize_t _DELIVER, _FRAME_HEADER, _MAX_DATAGRAM

@cython.locals(size=Py_ssize_t, step=Py_ssize_t, at=Py_ssize_t, seq=cython.ulonglong)
cpdef Py_ssize_t continuing_step(bytes data, object expected)
