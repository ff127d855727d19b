"""moto's own process for the local stack: started, found and stopped with it, never left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from aijobs_cli.moto_server import MotoProcess

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaps it if it is our child and has exited
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for every purpose here
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, within: float = 30.0) -> bool:
    """Waits (up to `within` s, a generous bound) for the process to end; whether it did."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_moto_runs_in_a_child_process_and_stop_ends_it() -> None:
    moto = MotoProcess().start()
    assert moto.pid is not None
    assert moto.pid != os.getpid()
    try:
        with urllib.request.urlopen(f"{moto.endpoint_url}/moto-api/data.json", timeout=30) as answer:  # noqa: S310
            assert answer.status == 200
    finally:
        moto.stop()
    assert _gone(moto.pid)


def test_moto_stops_by_itself_when_its_parent_dies() -> None:
    """The parent is killed outright (no clean-up of its own): moto must not outlive it."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from aijobs_cli.moto_server import MotoProcess; "
            "print(MotoProcess().start().pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
    )
    assert parent.stdout is not None
    moto_pid = int(parent.stdout.readline())
    assert _alive(moto_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(moto_pid)


def test_ctrl_c_reaches_the_stack_not_moto() -> None:
    """SIGINT to the process group (a terminal's Ctrl-C) leaves moto to its parent's stop()."""
    moto = MotoProcess().start()
    assert moto.pid is not None
    try:
        os.kill(moto.pid, signal.SIGINT)
        with urllib.request.urlopen(f"{moto.endpoint_url}/moto-api/data.json", timeout=30) as answer:  # noqa: S310
            assert answer.status == 200
    finally:
        moto.stop()
    assert _gone(moto.pid)
