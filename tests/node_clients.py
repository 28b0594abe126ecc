"""Run the unmodified npm clients (installed by ``tools/bootstrap --test`` into tools/node) from tests."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from fyrehose.tools.bench.npm_packages import SOURCE_TREE

NODE_MODULES = SOURCE_TREE  # where tools/bootstrap --test installs tools/node/package.json
SCRIPTS = Path(__file__).resolve().parent / "node"


def run_node(script: str, *args: object, timeout: float = 90.0) -> str:
    """Run ``tests/node/<script>`` with the project's npm clients; its stdout (AssertionError if it failed)."""
    node = shutil.which("node")
    assert node is not None and NODE_MODULES.is_dir(), "node and tools/node/node_modules: run tools/bootstrap --test"
    result = subprocess.run([node, str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, env=dict(os.environ, NODE_PATH=str(NODE_MODULES)))
    assert result.returncode == 0, f"{script} exited {result.returncode}: {result.stdout}{result.stderr}"
    return result.stdout
