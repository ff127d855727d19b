"""The local stack runs per-tenant fairness and the long-poll: with a running cap of 1, tenant A's
long tasks run one at a time while tenant B's single job goes through, and B's client learns it
finished from one `GET /jobs/{id}?wait=20`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aijobs_cli.local_stack import LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack

pytestmark = pytest.mark.integration

LONG_TASK = "#running:1000 A long task the provider keeps working on."


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

    flood = []
    for _ in range(3):
        response = tenant_a.request("POST", "/jobs", {"kind": "tts-generate", "input": LONG_TASK})
        assert response.status == 202, response.body
        flood.append(str(response.body["jobId"]))
    response = tenant_b.request("POST", "/jobs", {"kind": "tts-generate", "input": "One short summary."})
    assert response.status == 202, response.body
    single = str(response.body["jobId"])

    answer = tenant_b.request("GET", f"/jobs/{single}?wait=20")
    assert answer.status == 200, answer.body
    assert answer.body["status"] == "succeeded"

    # Tenant A: exactly its cap of 1 running, also after its held copies came back (hold 1 s, a
    # few times over); the others wait, with no attempt spent.
    deadline = time.monotonic() + 4
    while True:
        rows = [tenant_a.request("GET", f"/jobs/{job_id}").body for job_id in flood]
        assert sorted(row["status"] for row in rows) == ["queued", "queued", "running"]
        assert sorted(row["attempts"] for row in rows) == [0, 0, 1]
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
