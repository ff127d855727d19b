"""The local stack runs per-tenant fairness and the long-poll: with a running cap of 1, tenant A's
long tasks run one at a time while tenant B's single job goes through, and B's client learns it
finished from a `GET /jobs/{id}?wait=20` long-poll.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from aijobs.store.keys import PK, SK, job_sk, user_pk
from aijobs_cli.local.stack import DEMO_USER, LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack, wait_until

pytestmark = pytest.mark.integration

LONG_TASK = "#running:1000 A long task the provider keeps working on."
TERMINAL = ("succeeded", "failed_final")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    values = {
        "QUEUE_NAMES": "tts-generate",
        "KIND_PRICES": "tts-generate:1",
        "CRONS": "",
        "PROVIDER_RECHECK_SECONDS": "900",  # A's tasks stay running through the test
        "TENANT_MAX_RUNNING": "1",
        "TENANT_HOLD_SECONDS": "1",
    }
    with running_local_stack(tmp_path, values) as local:
        yield local


def _cli(stack: LocalStack, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "--info-file", str(stack.info_file), "--json"])
    assert result.exit_code == 0, result.output
    body: dict[str, object] = json.loads(result.stdout)
    return body


def test_the_local_stack_caps_a_tenant_and_long_polls_another_tenants_job(stack: LocalStack) -> None:
    assert stack.info_file is not None
    tenant_a = Target.from_info_file(stack.info_file)
    key_b = str(_cli(stack, "keys", "create", "tenant-b")["apiKey"])
    _cli(stack, "credits", "grant", "tenant-b", "5")
    tenant_b = dataclasses.replace(tenant_a, api_key=key_b)

    # One after the other, each started or held before the next arrives: submitted together, two
    # consumers may each count none running and start one each (the cap's documented overshoot).
    flood: list[str] = []

    def started_or_held() -> bool:
        job_id = flood[-1]
        return bool(tenant_a.request("GET", f"/jobs/{job_id}").body["status"] == "running") or bool(
            _held_until(stack, job_id)
        )

    for _ in range(3):
        response = tenant_a.request("POST", "/jobs", {"kind": "tts-generate", "input": LONG_TASK})
        assert response.status == 202, response.body
        flood.append(str(response.body["jobId"]))
        wait_until(started_or_held, "tenant A's job to start or be held")
    response = tenant_b.request("POST", "/jobs", {"kind": "tts-generate", "input": "One short summary."})
    assert response.status == 202, response.body
    single = str(response.body["jobId"])

    # Long-polls until it has finished (one, unless a busy machine lets a poll's 20 s run out).
    deadline = time.monotonic() + 120
    answer = tenant_b.request("GET", f"/jobs/{single}?wait=20")
    while answer.status == 200 and answer.body["status"] not in TERMINAL and time.monotonic() < deadline:
        answer = tenant_b.request("GET", f"/jobs/{single}?wait=20")
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "succeeded"

    # Tenant A: exactly its cap of 1 running, also after each of its held jobs came back and was
    # held again twice (hold 1 s); the others wait, with no attempt spent. Counted in returns, not
    # in seconds: a busy machine takes longer, and the test looks as many times as it needs.
    marks: dict[str, set[str]] = {job_id: set() for job_id in flood}

    def held_again_twice() -> bool:
        rows = [tenant_a.request("GET", f"/jobs/{job_id}").body for job_id in flood]
        assert sorted(row["status"] for row in rows) == ["queued", "queued", "running"]
        assert sorted(row["attempts"] for row in rows) == [0, 0, 1]
        waiting = [row["jobId"] for row in rows if row["status"] == "queued"]
        for job_id in waiting:
            if mark := _held_until(stack, job_id):
                marks[job_id].add(mark)
        return all(len(marks[job_id]) >= 3 for job_id in waiting)

    wait_until(held_again_twice, "tenant A's held jobs to come back and be held again twice")


def _held_until(stack: LocalStack, job_id: str) -> str:
    """The row's hold mark (the time its held copy is due back), as the consumer wrote it."""
    assert stack.resources is not None
    table = boto3.resource("dynamodb").Table(stack.resources.shard_tables[0])
    item = table.get_item(Key={PK: user_pk(DEMO_USER), SK: job_sk(job_id)})["Item"]
    return str(item.get("held_until", ""))
