"""moto's own process for the local stack: started, found and stopped with it, never left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import boto3
import pytest

from aijobs_cli.local.moto_server import MotoProcess

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
            "import time; from aijobs_cli.local.moto_server import MotoProcess; "
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


def test_moto_serves_each_dynamodb_update_whole_to_concurrent_reads() -> None:
    """An UpdateItem that sets many attributes is never seen half done by a GetItem meanwhile
    (moto applies an update's actions one by one; DynamoDB's items change atomically)."""
    names = [f"a{i}" for i in range(40)]
    with MotoProcess() as moto:
        session = boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
        )
        ddb = session.client("dynamodb", endpoint_url=moto.endpoint_url)
        ddb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        key = {"pk": {"S": "job"}}
        ddb.put_item(TableName="t", Item=key)
        done = threading.Event()
        seen: set[int] = set()

        def read() -> None:
            reader = session.client("dynamodb", endpoint_url=moto.endpoint_url)
            while not done.is_set():
                seen.add(len(reader.get_item(TableName="t", Key=key)["Item"]))

        readers = [threading.Thread(target=read) for _ in range(3)]
        for thread in readers:
            thread.start()
        try:
            for n in range(40):  # set all of them, then remove all of them
                ddb.update_item(
                    TableName="t",
                    Key=key,
                    UpdateExpression="SET " + ", ".join(f"{name} = :n" for name in names),
                    ExpressionAttributeValues={":n": {"N": str(n)}},
                )
                ddb.update_item(TableName="t", Key=key, UpdateExpression="REMOVE " + ", ".join(names))
        finally:
            done.set()
            for thread in readers:
                thread.join(timeout=30)
        assert seen <= {1, 1 + len(names)}  # the key alone, or the key and every attribute
