"""Running the campaign's jobs (trainings, quality judges) side by side as processes, or one after another in this
process, each stopped at a deadline.

Why both: on the GPU the jobs share the device as separate processes (one per run, as gpu_sweep.py does); the CPU
rehearsal inside the test suite runs them in its own process instead, since importing the training stack costs a
small CPU machine more seconds per process than a tiny run takes.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_campaign.py"


@dataclass
class Job:
    """One job: `argv` for `python gpu_campaign.py ...` (process mode) and `call` running the same in this process
    (inline mode), with its log file."""

    name: str
    argv: list[str]
    call: Callable[[], int]
    log: Path


def cli(*args: str) -> list[str]:
    """argv of an `hf-jacobi` command as a module run (the GPU machine has no installed entry point)."""
    return [sys.executable, "-m", "hf_jacobi.cli", *args]


LOG_TAIL_CHARS = 3000
"""How much of a failed job's log its result carries: the job logs stay on the lent machine, campaign.json comes back."""


def job_environment() -> dict[str, str]:
    """A job's environment: the Hub offline (a lent GPU reaches nothing: no lookup waits on a network timeout), and
    few torch threads per job (one on a CPU, two beside a GPU), since jobs side by side with a thread per core each
    run many times slower: up to five of them, their data-loader and sandbox workers share the GPU machine's CPU
    cores."""
    import torch

    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    environment["OMP_NUM_THREADS"] = environment["MKL_NUM_THREADS"] = "2" if torch.cuda.is_available() else "1"
    return environment


def log_tail(log: Path) -> str:
    """The end of a job's log (what a failure prints last), or a note that it wrote none."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return f"(no log at {log})"
    return text[-LOG_TAIL_CHARS:]


def with_log_tails(results: dict[str, dict], logs: dict[str, Path]) -> dict[str, dict]:
    """`results` with the tail of its log added to each job that did not exit 0 (stopped ones included)."""
    for name, result in results.items():
        if result["exit_code"] != 0 and name in logs:
            result["log_tail"] = log_tail(logs[name])
    return results


def start(job: Job) -> subprocess.Popen:
    """Starts a job in its own process group (a deadline stops it and whatever it started), output to its log. Not a
    session of its own: a job must end with the call that started it, and a lent machine's runner ends the call's
    session, not what left it."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with job.log.open("w") as log:
        return subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, process_group=0, env=job_environment())


def _stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_all(processes: dict[str, subprocess.Popen], deadline: float) -> dict[str, dict]:
    """Exit code and seconds per process; those still running at `deadline` (monotonic) are stopped ('stopped')."""
    started, ended = time.monotonic(), {}
    while len(ended) < len(processes) and time.monotonic() < deadline:
        for name, process in processes.items():
            if name not in ended and process.poll() is not None:
                ended[name] = {"exit_code": process.returncode, "seconds": round(time.monotonic() - started, 1)}
        time.sleep(0.5)
    for name, process in processes.items():
        if name not in ended:
            _stop(process)
            ended[name] = {"exit_code": "stopped", "seconds": round(time.monotonic() - started, 1)}
    return ended


def run_inline(job: Job) -> dict:
    """Runs a job in this process, its output captured into its log; exceptions become exit code 1 (logged)."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    started, buffer = time.monotonic(), io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            code = job.call()
        except Exception:  # a failed job is recorded, and the campaign goes on to the others
            traceback.print_exc()
            code = 1
    job.log.write_text(buffer.getvalue())
    return {"exit_code": code, "seconds": round(time.monotonic() - started, 1)}


def run_jobs(jobs: list[Job], deadline: float, inline: bool) -> dict[str, dict]:
    """All jobs to the end or `deadline`: side by side as processes, or one after another in this process; a job that
    failed or was stopped carries the tail of its log."""
    if inline:
        results = {job.name: run_inline(job) for job in jobs}
    else:
        results = wait_all({job.name: start(job) for job in jobs}, deadline)
    return with_log_tails(results, {job.name: job.log for job in jobs})
