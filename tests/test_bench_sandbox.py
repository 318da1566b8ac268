"""The sandbox against hostile programs: a fork bomb, a 10 GB allocation, network access, and a batch mixing them
with an infinite loop, `sys.exit` and a good program, which must come back as failures while the good one passes;
then the escapes a program could try past Python: forging the pass, reading the caller's token, writing outside its
folder, forking or leaving the session through ctypes.

(Timeouts, crashes, the 6 GB allocation and process-group kills are tested in test_bench_humaneval.py.) The process
cap is lowered to 4 here so that a fork bomb that got past it could not hurt the machine either. A test that needs a
kernel layer this machine refuses is skipped, naming it (the result's `missing` says which).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from hf_jacobi.bench import sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the limits are applied on Linux only")

FORK_BOMB = """
import os
while True:
    os.fork()
"""
SPAWN_BOMB = """
import subprocess, sys
helpers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(10)]
"""
TEN_GB = "blob = bytearray(10 * 1024**3)\n"
EXIT = "import sys\nsys.exit(0)\nprint('unreachable')\n"
LOOP = "while True:\n    pass\n"
GOOD = "assert sum(range(4)) == 6\n"


@pytest.fixture(autouse=True)
def small_process_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "MAX_PROCESSES", 4)


@pytest.mark.parametrize("program", [FORK_BOMB, SPAWN_BOMB], ids=["os.fork loop", "subprocess spawns"])
def test_process_creation_is_capped(program):
    result = sandbox.run_program(program, timeout_s=10)
    assert (result.passed, result.status) == (False, "failed")
    assert "allows at most 4 processes" in result.detail


def test_setsid_is_refused_so_the_session_kill_reaches_everything():
    result = sandbox.run_program("import os\nif os.fork() == 0:\n    os.setsid()\n", timeout_s=10)
    assert "leaving the session is not allowed" in result.detail


def test_network_is_unreachable():
    """A server listening on this machine's loopback: the program must not reach it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    port = server.getsockname()[1]
    connections = []
    thread = threading.Thread(target=lambda: connections.append(_accept(server)), daemon=True)
    thread.start()
    program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n"
    result = sandbox.run_program(program, timeout_s=10)
    thread.join()
    server.close()
    assert (result.passed, result.status) == (False, "failed")
    assert "network access is disabled" in result.detail
    assert connections == [None]


def test_a_socket_made_past_the_python_guard_reaches_nothing_either():
    """socket.SocketType is the raw C type the guard does not replace; the network namespace is what stops it."""
    server = socket.create_server(("127.0.0.1", 0))
    program = f"import socket\nsocket.SocketType().connect(('127.0.0.1', {server.getsockname()[1]}))\n"
    result = sandbox.run_program(program, timeout_s=10)
    server.close()
    if result.passed:
        pytest.skip("this kernel refuses network namespaces: only the Python-level guard applies here")
    assert "Network is unreachable" in result.detail


def _accept(server: socket.socket) -> bytes | None:
    try:
        connection, _ = server.accept()
    except TimeoutError:
        return None
    with connection:
        return connection.recv(16)


def test_a_batch_of_hostile_programs_fails_each_and_goes_on():
    programs = [LOOP, FORK_BOMB, TEN_GB, EXIT, GOOD]
    results = sandbox.run_programs([textwrap.dedent(p) for p in programs], timeout_s=3, workers=2)
    assert [r.status for r in results] == ["timeout", "failed", "failed", "failed", "passed"]
    assert "allows at most 4 processes" in results[1].detail
    assert results[2].detail.splitlines()[-1] == "MemoryError"
    assert "before check() finished" in results[3].detail


def _skip_without(result: sandbox.ExecutionResult, *layers: str) -> None:
    """Skips (naming why) when the kernel refused a layer the test relies on."""
    refused = [entry for entry in result.missing if entry.split(":")[0] in layers]
    if refused:
        pytest.skip(f"this machine refuses: {'; '.join(refused)}")


def test_a_program_cannot_forge_the_pass_verdict():
    """The old marker file, the marker text on every descriptor it may have inherited, then a clean exit: no pass."""
    program = """
import os
text = "hf_jacobi: check() returned"
for path in ("../passed", "passed", "../../passed"):
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        pass
for fd in range(3, 256):
    try:
        os.write(fd, text.encode())
    except OSError:
        pass
os._exit(0)
"""
    result = sandbox.run_program(program, timeout_s=10)
    assert (result.passed, result.status) == (False, "failed")
    assert "before check() finished" in result.detail


def test_the_program_sees_no_token_of_the_caller(monkeypatch):
    secret = f"hf_{uuid.uuid4().hex}"
    monkeypatch.setenv("HF_TOKEN", secret)
    program = f"""
import glob, os
assert {secret!r} not in repr(os.environ), "HF_TOKEN in the environment"
assert set(os.environ) <= {{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHOME", "HOME", "TMPDIR",
                            "PYTHONDONTWRITEBYTECODE"}}, sorted(os.environ)
for path in glob.glob("/proc/*/environ"):
    try:
        with open(path, "rb") as handle:
            assert {secret!r}.encode() not in handle.read(), path
    except OSError:
        pass
"""
    result = sandbox.run_program(program, timeout_s=10)
    assert result.passed, result.detail


def test_writes_outside_its_own_folder_are_refused(tmp_path):
    """Its own folder, HOME and TMPDIR (the same folder) take writes; the caller's home, the temp folder, a test's
    folder and the run's parent folder do not."""
    name = f"hf_jacobi_sandbox_probe_{uuid.uuid4().hex}"
    outside = [Path.home() / name, tmp_path / name, Path(tempfile.gettempdir()) / name]
    program = f"""
import os, tempfile
for path in ("inside.txt", os.path.join(os.environ["HOME"], "home.txt")):
    with open(path, "w") as handle:
        handle.write("ok")
tempfile.mkstemp()
written = []
for path in {[str(path) for path in outside]!r} + ["../{name}"]:
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        written.append(path)
    except OSError:
        pass
assert not written, f"wrote {{written}}"
"""
    try:
        result = sandbox.run_program(program, timeout_s=10)
        _skip_without(result, "read-only filesystem", "hidden folders")
        assert result.passed, result.detail
        assert [path for path in outside if path.exists()] == []
    finally:
        for path in outside:
            path.unlink(missing_ok=True)


def test_the_callers_home_and_temp_files_are_hidden(tmp_path):
    name = f"hf_jacobi_sandbox_secret_{uuid.uuid4().hex}"
    secrets = [Path.home() / name, tmp_path / name]
    for path in secrets:
        path.write_text("secret")
    program = f"import os\nassert [p for p in {[str(p) for p in secrets]!r} if os.path.exists(p)] == []\n"
    try:
        result = sandbox.run_program(program, timeout_s=10)
        _skip_without(result, "hidden folders")
        assert result.passed, result.detail
    finally:
        for path in secrets:
            path.unlink(missing_ok=True)


def test_a_ctypes_fork_does_not_get_past_the_process_cap():
    """Python's guards do not see C's fork; the kernel's task limit (twice the cap, for threads and the guard's
    race) must."""
    program = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None)
children = 0
for _ in range(64):
    pid = libc.fork()
    if pid == 0:
        time.sleep(10)
        os._exit(0)
    if pid < 0:
        break
    children += 1
sys.stderr.write(f"children={children}")
"""
    result = sandbox.run_program(program, timeout_s=10)
    _skip_without(result, "kernel process cap")
    children = int(re.search(r"children=(\d+)", result.detail).group(1))
    assert children < 2 * sandbox.MAX_PROCESSES


def processes_with(token: str) -> list[int]:
    """Pids (on this machine) whose command line holds `token`."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return pids


def test_a_ctypes_setsid_child_does_not_outlive_the_run():
    """A child that left the session through C (out of reach of a process-group kill) ends with the run."""
    token = f"hf_jacobi_sandbox_orphan_{uuid.uuid4().hex}"
    program = f"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None)
if libc.fork() == 0:
    libc.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", {token!r}])
time.sleep(0.5)
"""
    try:
        result = sandbox.run_program(program, timeout_s=10)
        assert result.passed, result.detail
        deadline = time.monotonic() + 2
        while processes_with(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(token) == []
    finally:
        for pid in processes_with(token):
            os.kill(pid, signal.SIGKILL)


def test_missing_protections_are_named_and_warned_about(monkeypatch):
    monkeypatch.setattr(sandbox, "KERNEL_ISOLATION", False)
    monkeypatch.setattr(sandbox, "_warned", set())
    with pytest.warns(RuntimeWarning, match="running programs without .*network namespace: turned off"):
        result = sandbox.run_program(GOOD, timeout_s=10)
    assert result.passed
    assert "pid namespace: turned off" in result.missing
