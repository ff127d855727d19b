"""The local stack runs the spend brake: jobs whose `#cost:` inputs take the stage past its daily
cap are held (queued, no attempt) and run after `aijobs spend release`.

The brake's waits are a minute in AWS (a held job is looked at again after HOLD_SECONDS, a
consumer trusts the day's state for STATE_REFRESH); here they are shortened to keep the test short.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from aijobs import spend
from aijobs.consumer import attempts
from aijobs.store.keys import PK, SK, job_sk, user_pk
from aijobs_cli.local.stack import DEMO_USER, LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack, wait_until

pytestmark = pytest.mark.integration

TEXT = "#cost:0.06 Queues decouple accepting work from doing it. The consumer does the slow part."


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    monkeypatch.setattr(attempts, "HOLD_SECONDS", 1)
    monkeypatch.setattr(spend, "STATE_REFRESH", timedelta(0))
    values = {"QUEUE_NAMES": "summary", "KIND_PRICES": "summary:1", "CRONS": "", "SPEND_DAILY_CAP_USD": "0.1"}
    with running_local_stack(tmp_path, values) as local:
        yield local


def _row(stack: LocalStack, job_id: str) -> dict[str, Any]:
    assert stack.resources is not None
    table = boto3.resource("dynamodb").Table(stack.resources.shard_tables[0])
    item: dict[str, Any] = table.get_item(Key={PK: user_pk(DEMO_USER), SK: job_sk(job_id)})["Item"]
    return item


def _spend(stack: LocalStack, *args: str) -> Any:
    result = CliRunner().invoke(app, ["spend", *args, "--info-file", str(stack.info_file), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_braked_local_stack_holds_jobs_past_its_cap_and_runs_them_after_a_release(
    stack: LocalStack,
) -> None:
    assert stack.info_file is not None
    client = Target.from_info_file(stack.info_file)

    def submit() -> str:
        response = client.request("POST", "/jobs", {"kind": "summary", "input": TEXT})
        assert response.status == 202, response.body
        return str(response.body["jobId"])

    def succeeded(job_id: str) -> Callable[[], bool]:
        return lambda: bool(_row(stack, job_id)["status"] == "succeeded")

    for _ in range(2):  # one after the other: 0.12 USD of the 0.1 USD cap
        wait_until(succeeded(submit()), "a job to succeed")
    stage = _spend(stack)["stage"]
    assert (stage["spentUsd"], stage["capUsd"], stage["held"]) == ("0.12", "0.1", True)

    held = submit()
    wait_until(lambda: "held_until" in _row(stack, held), "the job to be held")
    first_mark = _row(stack, held)["held_until"]
    wait_until(lambda: _row(stack, held)["held_until"] != first_mark, "the job to be held again")
    row = _row(stack, held)
    assert (row["status"], row["attempts"]) == ("queued", 0)

    assert _spend(stack, "release")["released"] == "stage"
    wait_until(succeeded(held), "the released job to run")
    assert _row(stack, held)["attempts"] == 1
    report = _spend(stack)["stage"]
    assert (report["spentUsd"], report["released"], report["held"]) == ("0.18", True, False)
