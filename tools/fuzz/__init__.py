"""Fuzzing: mutation helpers shared by the fuzz targets (tools/fuzz/targets/), and the live fuzzers of the backbone
(``fuzz.backbone``) and of every client endpoint (``fuzz.endpoint``), both run by ``python -m fyrehose.tools.fuzz``."""
