# Declarations for the compiled build (docs/architecture.md): the datagram's bytes, its offsets and the
# layout constants as machine integers, so that a frame nobody wants costs a few byte reads and one lookup.
import cython

cdef Py_ssize_t _FRAME_HEADER, _FIXED_SIZE, _MAGIC0, _MAGIC1, _VERSION, _VERSION_HEADERS, _MAX_VERDICTS

@cython.locals(chosen=list, count=Py_ssize_t, index=Py_ssize_t, start=Py_ssize_t, end=Py_ssize_t,
               payload=Py_ssize_t, subject_end=Py_ssize_t, subject=bytes)
cpdef list wanted(bytes data, Py_ssize_t first, Py_ssize_t step, list spans, Py_ssize_t low, dict verdicts,
                  decide)
