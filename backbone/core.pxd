# Declarations for the compiled build (docs/architecture.md): the backbone as a class of C fields whose
# one-message path (receive, push, flush, keep_recent) calls itself directly rather than through attribute
# lookups; every field the drivers read or set stays public.
import cython

from fyrehose.backbone.recent_log cimport RecentLog

cdef class Backbone:
    cdef public object sequence, clients, confirmed, cookies, policy, multicast, rng, rate_limiter, counters
    cdef public object replicas, gone, peer_asks
    cdef public Py_ssize_t batch_bytes, max_request_range
    cdef list _log, _control, _unkept
    cdef dict _confirms
    cdef RecentLog _recent
    cdef object _asked, _redeliveries, _recovery, _peer_asks

    cpdef receive(self, datagram, source, now)
    cpdef _drop(self, reason)

    @cython.locals(size=Py_ssize_t)
    cpdef push(self, datagram, source, now)

    cdef _push_one(self, datagram, Py_ssize_t size)

    cpdef take_log(self)
    cpdef keep_recent(self)
    cpdef flush_control(self, now=*)
    cpdef flush(self, now)
