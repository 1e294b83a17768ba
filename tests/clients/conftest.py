"""One embedded stack for the clients in other languages, and their pinned npm packages
(`@grpc/grpc-js`, `@grpc/proto-loader`, `@bufbuild/buf`, `@bufbuild/protoc-gen-es`)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stack import Stack, start_stack

CLIENT_DIR = Path(__file__).parent / "node_client"
BIN = CLIENT_DIR / "node_modules" / ".bin"
# A service caller names the tenant it acts for; with auth off the gateway's is this one.
TENANT = "default"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if shutil.which("node") is None:
        pytest.fail("node is required for the clients' tests (see .ci/run)")
    if not (BIN / "buf").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENT_DIR, check=True, timeout=600
        )
    running = start_stack(Path(tmp_path_factory.mktemp("clients")))
    yield running
    running.stop()
