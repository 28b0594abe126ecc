"""Runs one fuzz target: under atheris (coverage-guided) when it is installed, else a seeded mutation loop.

Every target module defines ``check(data: bytes) -> None`` (raises only when an
invariant breaks) and ``SEEDS`` (valid inputs to mutate), and ends with
``main(check, SEEDS)``.  Usage, from the repository root:

    python tools/fuzz/targets/fuzz_codec.py -atheris_runs=100000      # atheris, libFuzzer flags pass through
    python tools/fuzz/targets/fuzz_codec.py -atheris_runs=100000 -use_random=1   # the mutation loop, no atheris

The mutation loop exists so that the targets run where atheris has no wheel
(it ships binary wheels for CPython on Linux x86-64 only).

The targets import fyrehose as any program does, so they fuzz the compiled
modules where the install built them (``FYREHOSE_PURE=1`` fuzzes the .py
files); each run says first which build it fuzzes.  atheris has no coverage
feedback from compiled modules (it instruments Python bytecode), so a
coverage-guided campaign on a compiled module runs blind there: run it with
``FYREHOSE_PURE=1`` too.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable


def run_mutations(check: Callable[[bytes], None], seeds: list[bytes], runs: int, seed: int = 0) -> int:
    from fyrehose.tools.fuzz.mutation import mutation_inputs  # here: fyrehose is imported instrumented first

    count = 0
    for data in mutation_inputs(seeds, runs, seed):
        check(data)
        count += 1
    return count


def instrumented() -> contextlib.AbstractContextManager:
    """Wrap the target's fyrehose imports: atheris then gets coverage feedback from them (a no-op without it)."""
    try:
        import atheris
    except ImportError:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=["fyrehose"])


def _flag(argv: list[str], name: str, default: int) -> int:
    for arg in argv:
        if arg.startswith(f"-{name}="):
            return int(arg.split("=", 1)[1])
    return default


def main(check: Callable[[bytes], None], seeds: list[bytes]) -> None:
    from fyrehose.runtime.compiled import describe

    argv = sys.argv
    print(f"{argv[0]}: fuzzing fyrehose {describe()}", flush=True)
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is None or _flag(argv, "use_random", 0):
        runs = _flag(argv, "atheris_runs", 100_000)
        done = run_mutations(check, seeds, runs, _flag(argv, "seed", 0))
        print(f"{argv[0]}: {done} inputs, no invariant broken (mutation loop)")
        return
    args = [a for a in argv if not a.startswith(("-use_random=", "-seed="))]
    if not any(not a.startswith("-") for a in args[1:]):  # no corpus directory given: start from SEEDS
        corpus = tempfile.mkdtemp(prefix="fyrehose-fuzz-")
        for i, data in enumerate(seeds):
            with open(os.path.join(corpus, f"seed-{i}"), "wb") as file:
                file.write(data)
        args.append(corpus)
    atheris.Setup(args, check)
    atheris.Fuzz()
