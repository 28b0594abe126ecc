"""Random edits of valid inputs: what a fuzzer without coverage feedback feeds a parser.

Pure apart from the ``random.Random`` it is given, so a run is repeatable from its seed.
"""
from __future__ import annotations

import random
from collections.abc import Iterable

_EXTREMES = (b"\x00\x00", b"\xff\xff", b"\x7f\xff", b"\x80\x00")


def mutate(data: bytes, rng: random.Random, seeds: list[bytes]) -> bytes:
    """One to four random edits: flip a bit, insert, delete, repeat a slice, splice another seed, set a byte."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:
            buf[pos % len(buf)] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 2 and buf:
            del buf[pos:pos + rng.randint(1, 16)]
        elif op == 3 and buf:
            start = rng.randrange(len(buf))
            buf[pos:pos] = buf[start:start + rng.randint(1, 64)]
        elif op == 4:
            other = rng.choice(seeds)
            buf[pos:] = other[rng.randint(0, len(other)):]
        elif op == 5 and buf:
            buf[pos % len(buf)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 6 and len(buf) >= 2:  # a length or count field set to an extreme
            at = pos % (len(buf) - 1)
            buf[at:at + 2] = rng.choice(_EXTREMES)
    return bytes(buf)


def mutation_inputs(seeds: list[bytes], runs: int, seed: int = 0, random_share: int = 10) -> Iterable[bytes]:
    """``runs`` inputs: the seeds, then one random byte string in ``random_share`` and mutants of seeds and mutants."""
    rng = random.Random(seed)
    pool = list(seeds)
    yield from seeds[:runs]
    for i in range(max(0, runs - len(seeds))):
        if i % random_share == 0:
            yield rng.randbytes(rng.randint(0, 300))
            continue
        data = mutate(rng.choice(pool), rng, seeds)
        if len(pool) < 1000:
            pool.append(data)
        else:
            pool[rng.randrange(len(pool))] = data
        yield data
