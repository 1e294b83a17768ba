"""The seccomp filter of python_exec's container, as classic BPF for bwrap's `--seccomp FD`.

Assembled here rather than by libseccomp: the filter is a few dozen instructions, the
virtualenv has no libseccomp binding (Debian's python3-seccomp serves only the system
Python, and a wheel would bring a C library into the image for this alone), and building it
needs nothing installed. What it denies, and why:

- calls that reach the kernel's less-used or privileged surfaces: mount and the new mount
  API, namespaces (unshare, setns, clone with a CLONE_NEW* flag), ptrace and cross-process
  memory access, keyrings, bpf, perf events, io_uring, userfaultfd, module and kexec calls;
- sockets of any family but AF_UNIX (the network namespace is empty already; this also
  keeps netlink and packet sockets away from the kernel);
- new processes: fork, vfork, and clone without CLONE_THREAD. The container holds no
  program but the interpreter, so a child could only be another interpreter, and
  RLIMIT_NPROC does not bind a sandbox started by root (its uid maps to root, whose
  processes the kernel exempts). Threads stay allowed; the address-space limit bounds them.
- clone3 answers ENOSYS: its flags sit in memory a filter cannot read, and the C library
  then falls back to clone, which the filter can judge;
- a call from another architecture's table (x32, or 32-bit entry points) is killed.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# Instruction classes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# Offsets in struct seccomp_data; both architectures below are little-endian, so an
# argument's low 32 bits come first.
_NR, _ARCH, _ARG0 = 0, 4, 16

AF_UNIX = 1
CLONE_THREAD = 0x00010000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME.
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
CLONE_NAMESPACES |= 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080

DENIED = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "personality",
    "sethostname",
    "setdomainname",
]


@dataclass(frozen=True)
class _Arch:
    audit: int  # AUDIT_ARCH_* of the native table
    numbers: dict[str, int]
    # Numbers at or above this belong to another table on the same architecture (x32).
    foreign_from: int | None = None


_COMMON_NEW = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}

ARCHES: dict[str, _Arch] = {
    "x86_64": _Arch(
        audit=0xC000003E,
        foreign_from=0x40000000,
        numbers={
            **_COMMON_NEW,
            "socket": 41,
            "socketpair": 53,
            "clone": 56,
            "fork": 57,
            "vfork": 58,
            "ptrace": 101,
            "syslog": 103,
            "personality": 135,
            "pivot_root": 155,
            "chroot": 161,
            "acct": 163,
            "mount": 165,
            "umount2": 166,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "sethostname": 170,
            "setdomainname": 171,
            "init_module": 175,
            "delete_module": 176,
            "quotactl": 179,
            "kexec_load": 246,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "perf_event_open": 298,
            "name_to_handle_at": 303,
            "open_by_handle_at": 304,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "kcmp": 312,
            "finit_module": 313,
            "kexec_file_load": 320,
            "bpf": 321,
            "userfaultfd": 323,
        },
    ),
    # arm64 has no fork or vfork; both go through clone.
    "aarch64": _Arch(
        audit=0xC00000B7,
        numbers={
            **_COMMON_NEW,
            "umount2": 39,
            "mount": 40,
            "pivot_root": 41,
            "chroot": 51,
            "quotactl": 60,
            "acct": 89,
            "personality": 92,
            "unshare": 97,
            "kexec_load": 104,
            "init_module": 105,
            "delete_module": 106,
            "syslog": 116,
            "ptrace": 117,
            "reboot": 142,
            "sethostname": 161,
            "setdomainname": 162,
            "socket": 198,
            "socketpair": 199,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "clone": 220,
            "swapon": 224,
            "swapoff": 225,
            "perf_event_open": 241,
            "name_to_handle_at": 264,
            "open_by_handle_at": 265,
            "setns": 268,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "kcmp": 272,
            "finit_module": 273,
            "bpf": 280,
            "userfaultfd": 282,
            "kexec_file_load": 294,
        },
    ),
}


class UnsupportedArchitecture(Exception):
    """No syscall table for this machine; the message names it."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _ret(value: int) -> bytes:
    return _insn(_RET_K, value)


def build_filter(machine: str = "") -> bytes:
    """The filter for `machine` (this one's by default), ready to hand to bwrap."""
    name = machine or platform.machine()
    arch = ARCHES.get(name)
    if arch is None:
        raise UnsupportedArchitecture(
            f"python_exec's seccomp filter knows the syscall tables of {', '.join(ARCHES)}, "
            f"not of this machine ({name})"
        )
    numbers = arch.numbers
    denied = sorted({numbers[call] for call in DENIED if call in numbers})
    for call in ("fork", "vfork"):
        if call in numbers:
            denied.append(numbers[call])
    deny = _ret(_RET_ERRNO | errno.EPERM)
    # Straight-line checks with the verdicts at the end; each jump counts forward to them.
    checks: list[tuple[int, str]] = [(nr, "deny") for nr in denied]
    checks += [(numbers["socket"], "socket"), (numbers["clone"], "clone")]
    checks.append((numbers["clone3"], "nosys"))
    head = [_insn(_LD_W_ABS, _ARCH), b"", _insn(_LD_W_ABS, _NR)]
    if arch.foreign_from is not None:
        head.append(b"")  # foreign table check, filled in below
    tail = {
        "allow": [_ret(_RET_ALLOW)],
        "deny": [deny],
        "nosys": [_ret(_RET_ERRNO | errno.ENOSYS)],
        # socket(family, ...): only AF_UNIX.
        "socket": [
            _insn(_LD_W_ABS, _ARG0),
            _insn(_JEQ_K, AF_UNIX, jt=0, jf=1),
            _ret(_RET_ALLOW),
            _ret(_RET_ERRNO | errno.EAFNOSUPPORT),
        ],
        # clone(flags, ...): threads only, and no new namespace.
        "clone": [
            _insn(_LD_W_ABS, _ARG0),
            _insn(_JSET_K, CLONE_NAMESPACES, jt=2, jf=0),
            _insn(_JSET_K, CLONE_THREAD, jt=0, jf=1),
            _ret(_RET_ALLOW),
            deny,
        ],
        "kill": [_ret(_RET_KILL_PROCESS)],
    }
    order = ["allow", "deny", "nosys", "socket", "clone", "kill"]
    offsets: dict[str, int] = {}
    position = len(head) + len(checks)
    for label in order:
        offsets[label] = position
        position += len(tail[label])

    def jump(at: int, label: str) -> int:
        distance = offsets[label] - at - 1
        if distance > 255:
            raise ValueError("seccomp filter too long for a one-byte jump")
        return distance

    head[1] = _insn(_JEQ_K, arch.audit, jt=0, jf=jump(1, "kill"))
    if arch.foreign_from is not None:
        head[3] = _insn(_JGE_K, arch.foreign_from, jt=jump(3, "kill"), jf=0)
    body = [
        _insn(_JEQ_K, nr, jt=jump(len(head) + index, label), jf=0)
        for index, (nr, label) in enumerate(checks)
    ]
    program = head + body
    for label in order:
        program += tail[label]
    return b"".join(program)
