"""The sandbox against hostile programs: a fork bomb, a 10 GB allocation, network access, and a batch mixing them
with an infinite loop, `sys.exit` and a good program, which must come back as failures while the good one passes.

(Timeouts, crashes, the 6 GB allocation and process-group kills are tested in test_bench_humaneval.py.) The process
cap is lowered to 4 here so that a fork bomb that got past it could not hurt the machine either.
"""

from __future__ import annotations

import socket
import sys
import textwrap
import threading

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
