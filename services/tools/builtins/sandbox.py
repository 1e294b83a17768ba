"""A bubblewrap container per python_exec call: the boundary between a snippet and the host.

Each call gets new user, network, PID, IPC, UTS and mount namespaces. The root is an empty,
read-only tmpfs holding only the interpreter, its standard library and the shared
libraries they load (found once, at start-up, by loading every extension module of the
standard library and reading which files got mapped); the run's workspace is the one
writable bind, mounted as the working directory; `/tmp` is a small private tmpfs, `/proc`
the new PID namespace's own. bwrap itself is started with an empty environment, so not
even its own process (PID 1 inside) carries the service's variables. The seccomp filter
of `syscall_filter` is loaded last, just before the interpreter starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.tools.builtins.spawn import PASSED_FD, Exit, run_child
from services.tools.builtins.syscall_filter import UnsupportedArchitecture, build_filter

WORKSPACE_MOUNT = "/workspace"
SANDBOX_UID = 65534  # "nobody" inside the container; no passwd entry is needed
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`)"
NAMESPACE_HINT = (
    "bubblewrap could not build its container. The host must let an unprivileged process "
    "create user namespaces (sysctls user.max_user_namespaces > 0, "
    "kernel.unprivileged_userns_clone=1 where it exists, "
    "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 23.10+); in Kubernetes the "
    "tools container needs seccompProfile Unconfined, appArmorProfile Unconfined and "
    "procMount Unmasked, which needs hostUsers: false (docs/tools.md, 'python_exec')"
)
# Entry points of the root's merged-/usr layout, recreated when they are links on the host.
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

# Run by the chosen interpreter, outside the container, once at start-up: where its
# standard library is, and which shared objects it maps once every extension module of the
# standard library is loaded.
_PROBE = r"""
import importlib, json, os, sys, sysconfig
paths = sysconfig.get_paths()
dynload = os.path.join(paths["platstdlib"], "lib-dynload")
for name in sorted(os.listdir(dynload)) if os.path.isdir(dynload) else []:
    if name.endswith(".so"):
        try:
            importlib.import_module(name.split(".")[0])
        except Exception:
            pass
mapped = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
            mapped.add(fields[5].strip())
print("\n" + json.dumps({
    "executable": os.path.realpath(sys.executable),
    "stdlib": [paths["stdlib"], paths["platstdlib"]],
    "site": [paths["purelib"], paths["platlib"]],
    "libraries": sorted(mapped),
}))
"""


class SandboxUnavailable(Exception):
    """The container cannot be built here; the message says what to install or allow."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 10
    memory_bytes: int = 512 * 1024 * 1024
    file_bytes: int = 10 * 1024 * 1024
    processes: int = 32
    wall_seconds: float = 20.0
    output_bytes: int = 100_000
    tmp_bytes: int = 64 * 1024 * 1024
    # The in-process audit hook (defence in depth); off only to test the container alone.
    audit_guard: bool = True


def _links_on_the_way(path: str) -> tuple[list[tuple[str, str]], str]:
    """The symlinks met resolving `path` one component at a time, and where it ends."""
    links: list[tuple[str, str]] = []
    pending = os.path.normpath(path)
    for _ in range(40):
        parts = Path(pending).parts
        current = "/"
        for index, part in enumerate(parts[1:], start=1):
            candidate = os.path.join(current, part)
            if os.path.islink(candidate):
                target = os.readlink(candidate)
                links.append((candidate, target))
                pending = os.path.normpath(os.path.join(current, target, *parts[index + 1 :]))
                break
            current = candidate
        else:
            return links, pending
    raise SandboxUnavailable(f"python_exec: too many symbolic links resolving {path}")


def elf_interpreter(path: str) -> str | None:
    """The program interpreter (dynamic loader) an ELF executable names, if any."""
    with open(path, "rb") as handle:
        head = handle.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF":
            return None
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide:
            (table,) = struct.unpack_from(order + "Q", head, 32)
            size, count = struct.unpack_from(order + "HH", head, 54)
        else:
            (table,) = struct.unpack_from(order + "I", head, 28)
            size, count = struct.unpack_from(order + "HH", head, 42)
        for index in range(count):
            handle.seek(table + index * size)
            entry = handle.read(size)
            if struct.unpack_from(order + "I", entry, 0)[0] != 3:  # PT_INTERP
                continue
            if wide:
                (offset,) = struct.unpack_from(order + "Q", entry, 8)
                (length,) = struct.unpack_from(order + "Q", entry, 32)
            else:
                (offset,) = struct.unpack_from(order + "I", entry, 4)
                (length,) = struct.unpack_from(order + "I", entry, 16)
            handle.seek(offset)
            return handle.read(length).rstrip(b"\0").decode()
    return None


def _outermost(paths: set[str]) -> list[str]:
    """`paths` without those inside another one of them."""
    kept: list[str] = []
    for path in sorted(paths):
        if not any(path == outer or path.startswith(outer.rstrip("/") + "/") for outer in kept):
            kept.append(path)
    return kept


@dataclass(frozen=True)
class Layout:
    """What of the host the container shows, read-only: found once per interpreter."""

    interpreter: str
    directories: tuple[str, ...]
    files: tuple[str, ...]
    hidden: tuple[str, ...]
    links: tuple[tuple[str, str], ...]

    @classmethod
    def from_probe(cls, found: dict[str, list[str] | str]) -> Layout:
        executable = str(found["executable"])
        directories = {os.path.realpath(p) for p in found["stdlib"] if os.path.isdir(p)}
        directories |= {os.path.dirname(os.path.realpath(lib)) for lib in found["libraries"]}
        links: dict[str, str] = {}
        for name in _ROOT_LINKS:
            if os.path.islink(f"/{name}"):
                links[f"/{name}"] = os.readlink(f"/{name}")
        loader = elf_interpreter(executable)
        if loader:
            on_the_way, real = _links_on_the_way(loader)
            links.update(on_the_way)
            directories.add(os.path.dirname(real))
        kept = _outermost(directories)
        files = [executable] + (["/etc/ld.so.cache"] if os.path.isfile("/etc/ld.so.cache") else [])
        files = [f for f in files if not any(f.startswith(d + "/") for d in kept)]
        # Packages installed beside the standard library are not the snippet's to see.
        hidden = {
            os.path.realpath(p)
            for p in found["site"]
            if os.path.isdir(p) and any(os.path.realpath(p).startswith(d + "/") for d in kept)
        }
        return cls(
            executable, tuple(kept), tuple(files), tuple(sorted(hidden)), tuple(links.items())
        )

    def arguments(self) -> list[str]:
        args: list[str] = []
        for link, target in self.links:
            args += ["--symlink", target, link]
        for path in (*self.directories, *self.files):
            args += ["--ro-bind", path, path]
        for path in self.hidden:
            args += ["--tmpfs", path, "--remount-ro", path]
        return args


async def discover_layout(interpreter: str) -> Layout:
    finished = await run_child(
        [interpreter, "-I", "-S", "-c", _PROBE],
        stdin=b"",
        pass_data=b"",
        output_limit=4 * 1024 * 1024,
        wall_seconds=60,
    )
    said = finished.output.decode(errors="replace").strip()
    if finished.status != 0 or finished.timed_out:
        raise SandboxUnavailable(
            f"python_exec: the interpreter {interpreter} did not start (status "
            f"{finished.status}: {said[-500:]}); set SHUTTLE_PYTHON_EXEC_INTERPRETER"
        )
    return Layout.from_probe(json.loads(said.splitlines()[-1]))


def find_interpreter(preferred: str = "") -> str:
    """`preferred`, else the interpreter this service's virtualenv was made from.

    The base interpreter rather than the virtualenv's, so the container holds none of
    Shuttle's packages.
    """
    base = getattr(sys, "_base_executable", "") or sys.executable
    for candidate in [preferred] if preferred else [base, "/usr/bin/python3"]:
        real = os.path.realpath(candidate)
        if os.path.isfile(real) and os.access(real, os.X_OK):
            return real
    raise SandboxUnavailable(
        f"python_exec: no Python interpreter at {preferred or base}; "
        "set SHUTTLE_PYTHON_EXEC_INTERPRETER"
    )


def _check_bwrap(bwrap: str) -> None:
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        raise SandboxUnavailable(
            f"python_exec runs each snippet in a bubblewrap container, and {bwrap} "
            f"(SHUTTLE_PYTHON_EXEC_BWRAP) is not an executable file: {INSTALL_HINT}, or "
            "point SHUTTLE_PYTHON_EXEC_BWRAP at it, or leave SHUTTLE_PYTHON_EXEC_ENABLED off"
        )


class Sandbox:
    """Runs interpreter arguments in a fresh container; build one with `prepare`."""

    def __init__(self, bwrap: str, layout: Layout, syscall_filter: bytes) -> None:
        self._bwrap = bwrap
        self.layout = layout
        self._filter = syscall_filter

    @classmethod
    async def prepare(cls, bwrap: str = "/usr/bin/bwrap", interpreter: str = "") -> Sandbox:
        """Find the layout and start one trivial container; SandboxUnavailable says why not."""
        _check_bwrap(bwrap)
        try:
            syscall_filter = build_filter()
        except UnsupportedArchitecture as exc:
            raise SandboxUnavailable(str(exc)) from None
        sandbox = cls(bwrap, await discover_layout(find_interpreter(interpreter)), syscall_filter)
        with _scratch_directory() as scratch:
            finished = await sandbox.run(
                ["-I", "-S", "-c", "print('sandbox ok')"], b"", scratch, SandboxLimits()
            )
        if finished.status != 0 or finished.output.strip() != b"sandbox ok":
            said = finished.output.decode(errors="replace").strip()[-1000:]
            raise SandboxUnavailable(
                f"python_exec: a trial container failed (status {finished.status}: {said}). "
                f"{NAMESPACE_HINT}"
            )
        return sandbox

    def arguments(self, workdir: Path, limits: SandboxLimits) -> list[str]:
        uid = str(SANDBOX_UID)
        return [
            self._bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--uid",
            uid,
            "--gid",
            uid,
            "--hostname",
            "sandbox",
            "--clearenv",
            *self.layout.arguments(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/tmp",
            "--bind",
            str(workdir),
            WORKSPACE_MOUNT,
            "--chdir",
            WORKSPACE_MOUNT,
            # The root and /dev are tmpfs mounts bwrap made; left writable they would take
            # files without any size limit.
            "--remount-ro",
            "/dev",
            "--remount-ro",
            "/",
            "--seccomp",
            str(PASSED_FD),
            "--",
            self.layout.interpreter,
        ]

    async def run(
        self, python_args: Sequence[str], stdin: bytes, workdir: Path, limits: SandboxLimits
    ) -> Exit:
        """Run the interpreter with `python_args` on `workdir`; stdout and stderr merged."""
        return await run_child(
            [*self.arguments(workdir, limits), *python_args],
            stdin=stdin,
            pass_data=self._filter,
            output_limit=limits.output_bytes,
            wall_seconds=limits.wall_seconds,
        )


@contextlib.contextmanager
def _scratch_directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="shuttle-sandbox-check-") as path:
        yield Path(path)
