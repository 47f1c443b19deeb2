"""A seccomp filter for a call's child: the syscalls sandboxes usually deny, refused.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). Installed in the child after its privileges are gone
(``no_new_privs`` lets an unprivileged process install it; it is inherited by every process
the code starts and cannot be removed). A deny-list, as Docker's and nsjail's defaults
are in spirit: namespaces (``unshare``, ``setns``, ``clone`` with a namespace flag, so no
user namespace with full capabilities inside), mounts, ``ptrace`` and cross-process memory
access, the kernel keyring, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``
(its operations bypass seccomp), module and kexec loading, swap, reboot and friends.
Denied calls fail with ``EPERM``; ``clone3`` fails with ``ENOSYS`` (its flags sit in
memory a filter cannot read; the C library then falls back to ``clone``, whose flags it
can); a foreign syscall ABI (32-bit ``int 0x80`` on x86-64, x32) kills the process.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# Per architecture: the audit arch, and the syscall numbers (from the kernel's unistd tables).
_X86_64 = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "keyctl": 250, "add_key": 248,
    "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "swapon": 167,
    "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "syslog": 103, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "iopl": 172, "ioperm": 173, "lookup_dcookie": 212,
}  # fmt: skip
_AARCH64 = {
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "ptrace": 117,
    "process_vm_readv": 270, "process_vm_writev": 271, "keyctl": 219, "add_key": 217, "request_key": 218,
    "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294,
    "init_module": 105, "finit_module": 273, "delete_module": 106, "swapon": 224, "swapoff": 225, "reboot": 142,
    "acct": 89, "quotactl": 60, "syslog": 116, "open_by_handle_at": 265, "name_to_handle_at": 264,
    "lookup_dcookie": 18,
}  # fmt: skip
# The same numbers on both (the newer calls share one table).
_COMMON = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}  # fmt: skip
ARCHES = {
    "x86_64": (0xC000003E, {**_X86_64, **_COMMON}, 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, {**_AARCH64, **_COMMON}, 220, 435, None),
}
"""machine -> (AUDIT_ARCH, denied name -> nr, clone nr, clone3 nr, first x32 nr or None)."""

NAMESPACE_FLAGS = 0x7E020080
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME."""

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low half, little-endian)


def _program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions."""
    arch, denied, clone, clone3, x32 = ARCHES[machine]
    body: list = [(_LD_W_ABS, 0, 0, _NR)]
    if x32 is not None:
        body.append((_JGE, "eperm", 0, x32))
    body += [(_JEQ, "eperm", 0, nr) for nr in sorted(denied.values())]
    body += [(_JEQ, "enosys", 0, clone3), (_JEQ, "clone", 0, clone), (_RET, 0, 0, _ALLOW)]
    labels = {
        "clone": [(_LD_W_ABS, 0, 0, _ARG0), (_JSET, "eperm", 0, NAMESPACE_FLAGS), (_RET, 0, 0, _ALLOW)],
        "enosys": [(_RET, 0, 0, _ERRNO | errno.ENOSYS)],
        "eperm": [(_RET, 0, 0, _ERRNO | errno.EPERM)],
    }
    program = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL_PROCESS), *body]
    where = {}
    for name, block in labels.items():
        where[name] = len(program)
        program += block
    resolved = []
    for index, (code, jt, jf, k) in enumerate(program):
        jt = where[jt] - index - 1 if isinstance(jt, str) else jt
        if not 0 <= jt <= 255:
            raise ValueError("seccomp program too long for its jumps")
        resolved.append((code, jt, jf, k))
    return resolved


def install() -> None:
    """Install the filter on this process (after ``no_new_privs``); ``OSError`` when the
    kernel refuses, ``ValueError`` on an architecture without a table here."""
    machine = platform.machine()
    if machine not in ARCHES:
        raise ValueError(f"no seccomp table for {machine}")
    program = _program(machine)
    buffer = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in program))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(program), ctypes.addressof(buffer))
    lib = ctypes.CDLL(None, use_errno=True)
    lib.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: what lets an unprivileged process install it
    if lib.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "could not install the seccomp filter")


def filters() -> int:
    """How many seccomp filters this process runs under (``Seccomp_filters`` in /proc; 0 if unknown)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def verify(before: int) -> bool:
    """In a process that had ``before`` filters and then called :func:`install`: whether the
    kernel counts one more, and a user namespace is refused with EPERM."""
    lib = ctypes.CDLL(None, use_errno=True)
    refused = lib.unshare(0x10000000) != 0 and ctypes.get_errno() == errno.EPERM  # CLONE_NEWUSER
    return refused and filters() == before + 1
