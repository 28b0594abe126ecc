"""The frames of a whole DELIVER datagram that a reader of some subjects wants, chosen in one loop per datagram.

Every gateway process reads the deployment's whole stream and serves only
what its clients subscribed to; most messages it reads are for nobody
there, its own publishes on their way back among them.  Reading such a
message as a message (a payload, a subject string, a call of the reader's
``wants``) cost more than everything the backbone does for it.  Here a
datagram's frames are walked in one loop (compiled, see
docs/architecture.md): each frame's subject is read from its envelope's
fixed header as bytes and looked up in the reader's ``verdicts``; only a
subject seen for the first time calls back into the reader's ``decide``,
whose answer is remembered.  Only the chosen frames become payloads.
``decide`` gets the subject's bytes as they travel, not checked as UTF-8
(that would cost every frame): a reader says no to bytes that do not decode,
as :func:`fyrehose.subjects.envelope.peek_subject` reads no subject there.

The verdicts belong to the reader, which empties them when what it wants
changes (a subscription added); they never hold more than
:data:`MAX_VERDICTS` subjects, so a publisher inventing a subject per
message costs a call of ``decide`` each, never memory.  Raw payloads and
damaged envelopes have no subject and are never chosen, as
:func:`fyrehose.subjects.envelope.peek_subject` reads none from them; an empty
subject is never chosen either.
"""
from __future__ import annotations

from collections.abc import Callable

from fyrehose.protocol import codec
from fyrehose.subjects import envelope

MAX_VERDICTS = 65536  # subjects remembered; past it they are forgotten at once and decided again

# The layout constants as machine integers for the compiled build (the .pxd declares them), checked below.
_FRAME_HEADER = 9
_FIXED_SIZE = 8
_MAGIC0 = 0xFB
_MAGIC1 = 0x1E
_VERSION = 1
_VERSION_HEADERS = 2
_MAX_VERDICTS = MAX_VERDICTS
assert (_FRAME_HEADER, _FIXED_SIZE, bytes((_MAGIC0, _MAGIC1)), _VERSION, _VERSION_HEADERS) == (
    codec.FRAME_HEADER, envelope.FIXED_SIZE, envelope.MAGIC, envelope.VERSION, envelope.VERSION_HEADERS)

Decide = Callable[[bytes], bool]


def wanted(data: bytes, first: int, step: int, spans: list[tuple[int, int, int]] | None, low: int,
           verdicts: dict[bytes, bool], decide: Decide) -> list[tuple[int, bytes]]:
    """(sequence, payload) of the frames from sequence ``low`` on whose subject the reader wants, in order.

    ``data``, ``first``, ``step`` and ``spans`` are a
    :class:`~fyrehose.protocol.frame_run.FrameRun`'s: consecutive frames
    numbered from ``first``, each ``step`` bytes, or placed by ``spans``
    (start, end, sequence) when ``step`` is 0.
    """
    chosen: list[tuple[int, bytes]] = []
    count = len(spans) if spans is not None else (len(data) // step if step > 0 else 0)
    index = low - first if low > first else 0
    while index < count:
        if spans is not None:
            start = spans[index][0]
            end = spans[index][1]
        else:
            start = index * step
            end = start + step
        payload = start + _FRAME_HEADER
        if (end - payload >= _FIXED_SIZE and data[payload] == _MAGIC0 and data[payload + 1] == _MAGIC1
                and (data[payload + 2] == _VERSION or data[payload + 2] == _VERSION_HEADERS)):
            subject_end = payload + _FIXED_SIZE + ((data[payload + 6] << 8) | data[payload + 7])
            if payload + _FIXED_SIZE < subject_end <= end:
                subject = data[payload + _FIXED_SIZE:subject_end]
                verdict = verdicts.get(subject)
                if verdict is None:
                    verdict = bool(decide(subject))
                    if len(verdicts) >= _MAX_VERDICTS:
                        verdicts.clear()
                    verdicts[subject] = verdict
                if verdict:
                    chosen.append((first + index, data[payload:end]))
        index += 1
    return chosen
