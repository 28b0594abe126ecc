"""The multi-process backbone (``--workers R``): receive workers, a sequencer and fan-out workers over shared memory."""
