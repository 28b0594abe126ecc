"""Fuzzing helpers shared by the fuzz targets (tests/fuzz/) and the live-backbone fuzzer (``fuzz.backbone``)."""
