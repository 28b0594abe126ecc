"""The backbone datagram that continues the stream, recognised from its bytes without a scan.

Nearly every datagram a subscriber receives is the backbone's DELIVER of
frames of one size whose numbers continue exactly where the stream stands
(one frame at 10,000 msgs/s, hundreds in BATCH mode).
:meth:`fyrehose.protocol.connection.BackboneConnection.receive` asks
:func:`continuing_step` about every datagram from the backbone before anything
else: a datagram it recognises skips the admission verdict, the scan and the
per-frame checks, and goes to the tracker in one step.  It answers exactly as
``codec.uniform_step`` and ``codec.consecutive_u48`` together would.

Written for the compiler (docs/architecture.md, "Compiled modules"): a lone
frame's number is read byte by byte into a machine integer, no slice and no
object; a run of frames is checked with the codec's strided comparisons.
"""
from __future__ import annotations

from fyrehose.protocol import codec

_DELIVER = codec.DELIVER
_FRAME_HEADER = codec.FRAME_HEADER
_MAX_DATAGRAM = codec.MAX_DATAGRAM
_MAX_SEQUENCE = codec.MAX_SEQUENCE


def continuing_step(data: bytes, expected: int) -> int:
    """The frame size when ``data`` is only well-formed DELIVER frames of one size numbered ``expected``,
    ``expected + 1``, ...; else 0 (the caller takes the datagram the general way)."""
    size = len(data)
    if size < _FRAME_HEADER or data[0] != _DELIVER or not 0 < expected <= _MAX_SEQUENCE:
        return 0
    step = _FRAME_HEADER + ((data[1] << 8) | data[2])
    if step > _MAX_DATAGRAM:
        return 0
    if step == size:  # one frame: its number, big-endian in bytes 3..8
        seq = data[3]
        for at in range(4, _FRAME_HEADER):
            seq = (seq << 8) | data[at]
        return step if seq == expected else 0
    if codec.uniform_step(data, _DELIVER) != step:
        return 0
    return step if codec.consecutive_u48(data, 3, step, size // step) == expected else 0
