"""What runs in the sandbox's child interpreter around a model-written program: isolation, limits, the verdict.

`sandbox.py` runs this file's source with `python -c SOURCE CONFIG_JSON` (never imported), as three processes: the
supervisor enters new user, mount, network and PID namespaces (`sandbox_isolation.py`) as an otherwise unused uid
when started as root, leaves only the run's folder writable and hides the caller's home, the temp folder, /run and
/dev; the namespace's init mounts a private /proc and drops every capability; the program's process sets its
limits and guards, runs the program, then gives the verdict.

The verdict comes from a random key the supervisor keeps in memory only: the program's process writes it to a pipe
once the program has returned, and the supervisor, out of the program's reach, reports it on a descriptor only it
holds. RLIMIT_NPROC, counted per user namespace, caps the program's tasks; Python's fork, spawn, setsid and setpgid
refuse first with a clear message; when the init exits, the kernel kills all left in the namespace. Every protection
the kernel refuses is named in `missing`. docs/benchmarking.md ("The code sandbox") says what this holds and what not.
"""

import contextlib
import errno
import json
import os
import resource
import runpy
import secrets
import signal
import sys

SANDBOX_UID_BASE = 0x7E000000
"""Root runs programs as `SANDBOX_UID_BASE + r`, r < 65536: uids no account or container range uses."""
NETWORK, FILESYSTEM, HIDDEN, PIDS = "network namespace", "read-only filesystem", "hidden folders", "pid namespace"
USER, NPROC, CAPS, PROC = "separate user", "kernel process cap", "capability drop", "private /proc"
NESTED = "no nested user namespaces"
ALL_LAYERS = (NETWORK, FILESYSTEM, HIDDEN, PIDS, USER, NPROC, CAPS, PROC, NESTED)


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


def load_isolation(path: str):
    """`sandbox_isolation.py`, run by path (this script is not in a package): its functions as attributes."""
    import types

    return types.SimpleNamespace(**runpy.run_path(path, run_name="hf_jacobi_sandbox_isolation"))


def enter_namespaces(iso, outer_id: int, missing: dict) -> int:
    """Enters as many namespaces as the kernel allows; returns their flags and names what is missing."""
    flags, refusal, mapped = iso.enter_namespaces(outer_id)
    if flags & iso.CLONE_NEWUSER and not mapped:
        missing[USER] = "the id maps were refused"
    for flag, layers in (
        (iso.CLONE_NEWNET, [NETWORK]),
        (iso.CLONE_NEWNS, [FILESYSTEM, HIDDEN]),
        (iso.CLONE_NEWPID, [PIDS, PROC]),
    ):
        if not flags & flag:
            missing.update(dict.fromkeys(layers, refusal))
    if os.geteuid() == 0 and not flags & iso.CLONE_NEWUSER:
        missing[USER] = refusal
    return flags


def cap_kernel_tasks(tasks: int, per_namespace: bool, as_root: bool, missing: dict) -> None:
    """RLIMIT_NPROC: per user namespace where one was entered, else on top of this user's current tasks."""
    if as_root:
        missing[NPROC] = "root is exempt from RLIMIT_NPROC and no other user could be used"
        return
    limit(resource.RLIMIT_NPROC, *(2 * [tasks if per_namespace else user_tasks() + tasks]))


def isolate(iso, config: dict, missing: dict) -> int:
    """The supervisor's setup, in order: namespaces, descriptors of what stays visible, the uid switch, no nested user
    namespaces, the process cap, the filesystem view. Returns the namespace flags entered."""
    run, root = config["writable"][0], os.geteuid() == 0
    outer_id = SANDBOX_UID_BASE + secrets.randbelow(1 << 16) if root else os.geteuid()
    if root:
        os.chown(run, outer_id, outer_id)
        os.chmod(os.path.dirname(run), 0o711)
    flags = enter_namespaces(iso, outer_id, missing)
    shifted = root and USER not in missing
    if root and not shifted:
        os.chown(run, 0, 0)
    keep = iso.open_paths(iso.interpreter_paths() + config["writable"] + [f"/dev/{name}" for name in iso.DEVICES])
    if shifted:  # root inside the namespace is the unused uid outside it
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    try:
        if not flags & iso.CLONE_NEWUSER:
            raise OSError(errno.EPERM, "no user namespace of its own to set the limit in")
        iso.forbid_user_namespaces()
    except OSError as error:
        missing[NESTED] = str(error)
    if config["processes"] > 0:
        cap_kernel_tasks(2 + 2 * config["processes"], bool(flags & iso.CLONE_NEWUSER), root and not shifted, missing)
    if flags & iso.CLONE_NEWNS:
        try:
            iso.confine_filesystem(config["writable"], config["hidden"], keep)
        except OSError as error:
            missing.update({FILESYSTEM: str(error), HIDDEN: str(error)})
    for handle in keep.values():
        os.close(handle)
    return flags


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
    """Python's fork and spawn entry points refuse once the session holds `cap` processes besides the harness's."""
    import _posixsubprocess
    import posix

    session = os.getsid(0)

    def members() -> int:
        return sum(int(fields[3]) == session for _, fields in proc_stats())

    harness = members() - 1  # in the session before the program: the init (and the supervisor without a PID ns)

    def guarded(create):
        def call(*args, **kwargs):
            if members() - harness >= cap:
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


def reap_until(pid: int) -> int:
    """Reaps every child (as a namespace's init must) until `pid` ends; returns its exit code (-signal if killed)."""
    while True:
        try:
            child, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if child == pid:
            return os.waitstatus_to_exitcode(status)


def run_init(iso, config: dict, flags: int, verdict_w: int, status_w: int):
    """The namespace's init: /proc, no capabilities, then the program's process; relays how it ended and exits,
    which ends every process left in the namespace. Returns only in the program's process."""
    os.close(config["report_fd"])
    missing = {}
    if iso is not None and config["isolate"]:
        if flags & iso.CLONE_NEWPID:
            try:
                iso.mount_proc()
            except OSError as error:
                missing[PROC] = str(error)
        try:
            iso.drop_capabilities()
        except OSError as error:
            missing[CAPS] = str(error)
    if iso is not None:
        iso.prctl(iso.PR_SET_DUMPABLE, 0)
        iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # should the supervisor be killed first
    pid = os.fork()
    if pid == 0:
        os.close(status_w)
        return
    os.close(verdict_w)
    code = reap_until(pid)
    os.write(status_w, json.dumps({"code": code, "missing": missing}).encode())
    os._exit(0)


def read_available(fd: int, size: int = 65536) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return b""


def report(config: dict, message: dict) -> None:
    """One line to `sandbox.py` on the descriptor only the supervisor holds."""
    os.write(config["report_fd"], (json.dumps(message) + "\n").encode())


def exit_like(code: int) -> None:
    """Ends this process the way the program's did: its exit status, or the signal that killed it."""
    if code < 0:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def supervise(config: dict):
    """The supervisor: isolation, then the init; waits, reports and exits like the program. Returns (in the
    program's process only) the verdict pipe and the key the program's process writes there once it has run."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    missing, iso, flags = {}, None, 0
    try:
        iso = load_isolation(config["isolation"])
    except (OSError, ImportError, AttributeError) as error:  # no ctypes, no libc, not Linux
        missing = dict.fromkeys(ALL_LAYERS, str(error))
    if iso is not None and not config["isolate"]:
        missing = dict.fromkeys(ALL_LAYERS, "turned off")
    elif iso is not None:
        try:
            flags = isolate(iso, config, missing)
        except OSError as error:
            missing.update({layer: str(error) for layer in ALL_LAYERS if layer not in missing})
    if iso is not None:  # after the id maps (written through /proc/<pid>) and the uid switch (which resets both)
        iso.prctl(iso.PR_SET_DUMPABLE, 0)  # nothing of the same uid may read this process's memory or descriptors
        iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != config["parent"]:  # the caller died first: nobody will read a result
            os._exit(1)
    report(config, {"missing": missing})  # now, for a run that ends in a timeout (the supervisor is killed then)
    key = secrets.token_hex(16)
    verdict_r, verdict_w = os.pipe()
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(verdict_r)
        os.close(status_r)
        run_init(iso, config, flags, verdict_w, status_w)
        return verdict_w, key
    os.close(verdict_w)
    os.close(status_w)
    os.waitpid(pid, 0)
    status = json.loads(read_available(status_r) or b'{"code": 1, "missing": {}}')
    missing.update(status["missing"])
    report(config, {"verdict": read_available(verdict_r) == key.encode(), "missing": missing})
    exit_like(status["code"])


def run_program(config: dict, verdict_w: int, key: str) -> None:
    """In the program's own process: only stdio and the verdict pipe stay open; limits, guards, the program, and
    the key once it has run to its end (a `sys.exit` or an exception never gets there)."""
    os.closerange(3, verdict_w)
    os.closerange(verdict_w + 1, max(verdict_w + 1, os.sysconf("SC_OPEN_MAX")))
    memory, cpu = config["memory"], config["cpu"]
    limit(resource.RLIMIT_AS, memory, memory)
    limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    limit(resource.RLIMIT_FSIZE, config["file_size"], config["file_size"])
    refuse_sockets()
    if config["processes"] > 0:
        cap_processes(config["processes"])
    sys.argv = [config["script"]]
    runpy.run_path(config["script"], run_name="__main__")
    os.write(verdict_w, key.encode())


if __name__ == "__main__":
    CONFIG = json.loads(sys.argv[1])
    run_program(CONFIG, *supervise(CONFIG))
