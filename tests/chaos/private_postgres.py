"""A PostgreSQL cluster of the test's own (initdb + pg_ctl in a temporary directory on a free
port, trust auth), so a test can restart it mid-run without touching the shared server."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.databases import free_port, unavailable

SERVER_USER = "postgres"


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


@dataclass
class PrivatePostgres:
    """initdb, start, restart and destroy one throw-away cluster."""

    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="shuttle-pg-")))

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{SERVER_USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        binaries = _binaries()
        if binaries is None:
            unavailable("PostgreSQL server binaries (pg_ctl, initdb)", "not installed")
            return
        command = [str(binaries / tool), *args]
        # The server refuses to run as root: run its tools as the postgres user then.
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def create(self) -> PrivatePostgres:
        if os.geteuid() == 0:
            shutil.chown(self.root, user=SERVER_USER)
        self._run("initdb", "-D", str(self.data_dir), "-A", "trust", "-U", SERVER_USER)
        self.start()
        return self

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.data_dir), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        """Stop with `immediate` (as a crash would: clients are cut, recovery replays WAL)."""
        self.stop("immediate")
        self.start()

    def destroy(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
