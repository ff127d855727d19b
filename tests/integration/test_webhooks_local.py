"""Webhooks on the local stack (`aijobs dev`): the CLI creates the secret, the API takes a
callbackUrl, and the webhook consumer's poller POSTs the signed outcome to a receiver here."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from aijobs_cli.local.stack import DEMO_USER
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack
from tests.unit.openai_server import ScriptedServer
from tests.unit.test_webhooks import receiver_accepts

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer does the slow part."


def _until(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_jobs_outcome_reaches_a_local_receiver_signed(tmp_path: Path) -> None:
    with running_local_stack(tmp_path) as local, ScriptedServer() as receiver:
        info = str(local.info_file)
        client = Target.from_info_file(Path(info))
        assert _cli("webhooks", "secret", "--user", DEMO_USER, "--info-file", info)["exists"] is False
        secret = _cli("webhooks", "secret", "--rotate", "--user", DEMO_USER, "--info-file", info)["secret"]
        status = _cli("webhooks", "secret", "--user", DEMO_USER, "--info-file", info)
        assert status["exists"] is True
        assert secret not in json.dumps(status)
        receiver.reply({"ok": True})
        submitted = client.request(
            "POST", "/jobs", {"kind": "summary", "input": TEXT, "callbackUrl": receiver.base_url + "/hook"}
        )
        assert submitted.status == 202, submitted.body
        job_id = submitted.body["jobId"]
        (request,) = _until(lambda: list(receiver.requests), "the webhook POST")
        assert receiver_accepts(
            secret, request.headers["aijobs-signature"], request.body, now=int(time.time())
        )
        assert request.json["data"]["job"]["jobId"] == job_id
        job = _until(
            lambda: (
                (body := client.request("GET", f"/jobs/{job_id}").body)["callback"]["state"] == "delivered"
                and body
            ),
            "the delivery to be recorded",
        )
        assert (job["status"], job["callback"]["attempts"], job["callback"]["lastStatus"]) == (
            "succeeded",
            1,
            200,
        )
        refused = client.request(
            "POST", "/jobs", {"kind": "summary", "input": TEXT, "callbackUrl": "http://169.254.169.254/x"}
        )
        assert (refused.status, refused.body["code"]) == (422, "invalid_callback_url")
