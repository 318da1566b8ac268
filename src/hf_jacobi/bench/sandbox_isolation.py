"""Kernel isolation for the sandbox's child: namespaces, a read-only view of the filesystem, a separate user, no
capabilities. Linux only, through the C library (ctypes), since `os.unshare` and friends are missing before 3.12.

`sandbox_child.py` loads this file by path (it is never imported as part of the package, so the child does not
import `hf_jacobi`); it must use the standard library only. Every function raises `OSError` when the kernel refuses,
so that the child can record which protection is missing instead of pretending it holds.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RDONLY = 2, 4, 8, 1
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls share one table since 5.1)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 4, 24, 28
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
SECURE_BITS_LOCKED_DOWN = 0xEF  # NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and KEEP_CAPS off, all locked
DEVICES = ("null", "zero", "full", "random", "urandom")
"""The device nodes a program keeps once /dev is hidden: what Python and ordinary programs open."""


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_LIBC.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    """Raises OSError naming `what` when a C call returned an error."""
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def unshare(flags: int) -> None:
    """Moves this process into new namespaces (`flags`); a new PID namespace holds this process's next child."""
    _check(_LIBC.unshare(flags), "unshare")


def prctl(option: int, value: int = 0) -> None:
    _check(_LIBC.prctl(option, value, 0, 0, 0), f"prctl({option})")


def write_id_maps(pid: int, uid: int, gid: int, outer_uid: int, outer_gid: int) -> None:
    """Maps `uid`/`gid` inside process `pid`'s new user namespace to `outer_uid`/`outer_gid` outside it.

    Written from the parent namespace: root may map any id (the sandbox's otherwise unused one); any other user only
    its own, after giving up `setgroups` in there (the kernel's rule for unprivileged maps)."""
    if os.geteuid() != 0:
        with open(f"/proc/{pid}/setgroups", "w") as handle:
            handle.write("deny")
    for name, inner, outer in (("uid_map", uid, outer_uid), ("gid_map", gid, outer_gid)):
        with open(f"/proc/{pid}/{name}", "w") as handle:
            handle.write(f"{inner} {outer} 1")


def _map_ids_when_told(outer_id: int) -> tuple[int, int]:
    """Forks the helper that writes this process's id maps once it is in its new user namespace (only a process
    outside may map root to another uid). Returns its pid and the pipe on which to say b"1" (map) or b"0" (don't)."""
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        if os.read(go_r, 1) == b"1":
            try:
                write_id_maps(os.getppid(), 0, 0, outer_id, outer_id if os.geteuid() == 0 else os.getegid())
                code = 0
            except OSError as error:
                print(f"hf_jacobi sandbox: could not map ids: {error}", file=sys.stderr)
        os._exit(code)
    os.close(go_r)
    return pid, go_w


def enter_namespaces(outer_id: int) -> tuple[int, str, bool]:
    """Enters the most namespaces the kernel allows: user, mount, PID and network, else (root) all but user, else
    network alone. Root inside a new user namespace is `outer_id` outside it (this process's own uid when not root).

    Returns:
        The flags entered, the first refusal's reason ("" if none) and whether the id maps were written."""
    root, everything = os.geteuid() == 0, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET
    tries = [everything, everything & ~CLONE_NEWUSER] if root else [everything]
    tries += [CLONE_NEWUSER | CLONE_NEWNET] + ([CLONE_NEWNET] if root else [])
    helper, go = _map_ids_when_told(outer_id)
    flags, refusal = 0, ""
    for candidate in tries:
        try:
            unshare(candidate)
            flags = candidate
            break
        except OSError as error:
            refusal = refusal or str(error)
    os.write(go, b"1" if flags & CLONE_NEWUSER else b"0")
    os.close(go)
    mapped = os.waitpid(helper, 0)[1] == 0
    return flags, refusal, mapped


def interpreter_paths() -> list[str]:
    """What the program's imports need: the interpreter's prefixes and its path entries, as given and resolved."""
    exe = sys.executable
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}
    candidates |= {os.path.dirname(exe), os.path.dirname(os.path.realpath(exe))}
    paths = set()
    for path in candidates:
        if path and os.path.exists(path):
            paths |= {os.path.abspath(path), os.path.realpath(path)}
    return sorted(paths)


def open_paths(paths: list[str]) -> dict[str, int]:
    """O_PATH descriptors of the existing `paths`: the way to bind them back after a tmpfs hides their parents (and
    after this process may no longer be allowed to walk there)."""
    handles = {}
    for path in paths:
        try:
            handles[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
    return handles


def _encode(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_LIBC.mount(_encode(source), _encode(target), _encode(fstype), flags, _encode(data)), f"mount {target}")


def _mount_setattr(path: str, set_flags: int, clear_flags: int, recursive: bool) -> None:
    attr = _MountAttr(set_flags, clear_flags, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    result = _LIBC.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, os.fsencode(path), flags, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))
    )
    _check(result, f"mount_setattr {path}")


def _outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside another of them (hiding or binding the outer one covers them)."""
    real = sorted({os.path.abspath(path) for path in paths})
    return [path for path in real if not any(path != other and _inside(path, other) for other in real)]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bind(handle: int, target: str, is_dir: bool) -> None:
    """Binds the file or folder behind `handle` at `target`, creating the mount point on the tmpfs first."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            with open(target, "w"):
                pass
    _mount(f"/proc/self/fd/{handle}", target, None, MS_BIND | MS_REC)


def confine_filesystem(writable: list[str], hidden: list[str], keep: dict[str, int]) -> None:
    """Makes this mount namespace's whole tree read-only except `writable`, and hides the `hidden` folders.

    Each hidden folder gets an empty tmpfs on top; the paths in `keep` (descriptors from `open_paths`, taken before:
    the interpreter, its libraries, the writable folders, the device nodes) are bound back at their own paths. Needs
    `CAP_SYS_ADMIN` in the mount namespace's user namespace; must run before capabilities are dropped."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hidden = [path for path in _outermost(hidden) if path != "/" and os.path.isdir(path)]
    for folder in hidden:
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    if "/dev" in hidden:
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "0"), ("stdout", "1"), ("stderr", "2")):
            os.symlink(target if name == "fd" else f"/proc/self/fd/{target}", f"/dev/{name}")
    for path in _outermost([path for path in keep if path not in writable]):
        if any(_inside(path, folder) for folder in hidden):
            _bind(keep[path], path, os.path.isdir(f"/proc/self/fd/{keep[path]}"))
    for path in writable:  # its own mount even where nothing hides it, so that it alone can be made writable
        _bind(keep[path], path, is_dir=True)
    _mount_setattr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, recursive=True)
    for path in writable:
        _mount_setattr(path, 0, MOUNT_ATTR_RDONLY, recursive=False)
    os.chdir(writable[0])  # the old working directory is on the read-only mount below the bind


def forbid_user_namespaces() -> None:
    """No user namespace may be made inside this one (a per-namespace limit). In one, a program would hold every
    capability over mounts of its own: not a way out (what it inherits stays read-only and hidden), but a tmpfs to
    fill, outside the address-space limit."""
    with open("/proc/sys/user/max_user_namespaces", "w") as handle:
        handle.write("0")


def mount_proc() -> None:
    """A read-only /proc of this process's PID namespace: the program sees its own processes only, and cannot
    write /proc/sysrq-trigger and the like. Call from inside the new PID namespace (its init)."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)


def drop_capabilities() -> None:
    """Gives up every capability for good: the bounding and ambient sets, securebits so that running as (namespace)
    root or exec'ing a set-uid file grants none back, no_new_privs, then the effective/permitted/inheritable sets.
    Without this, namespace root could simply remount the filesystem writable."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for capability in range(last + 1):
        prctl(PR_CAPBSET_DROP, capability)
    prctl(PR_SET_SECUREBITS, SECURE_BITS_LOCKED_DOWN)
    _check(_LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_LIBC.capset(ctypes.byref(header), data), "capset")
