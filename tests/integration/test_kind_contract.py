"""The contract every declared kind passes, read from the kind registry: a kind added to
aijobs/kinds/ is tested here without editing this file.

For each kind that runs on a queue: submit validation (a bad option, an empty input), success
through the real consumer on moto, a retryable failure that succeeds on its next attempt, and a
final failure that refunds its credits. The provider is the local one (the adapters have their
own tests); failures are raised at the provider's door, the same for every capability.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from aijobs.domain import JobStatus
from aijobs.errors import InvalidInputError, TransientProviderError
from aijobs.kinds.base import Kind
from aijobs.kinds.registry import queued, require
from aijobs.providers.local_media import render_image
from tests.integration.harness import Stage, api_caller

pytestmark = pytest.mark.integration

QUEUED = queued()
TEXT = (
    "Queues decouple accepting work from doing it. The producer answers at once. The consumer runs the model."
)
Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def stage_values() -> dict[str, str]:
    return {
        "QUEUE_NAMES": ";".join(QUEUED),
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
        "PROVIDER_RECHECK_SECONDS": "0",
        "PROVIDER": "local",
    }


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    yield from api_caller(stage, monkeypatch, credits=1_000)


def _body(stage: Stage, kind: Kind) -> dict[str, Any]:
    """A valid submit of the kind: its example input, or an uploaded image."""
    if kind.inputs.type == "image":
        key = "inputs/alice/contract-image.png"
        boto3.client("s3").put_object(
            Bucket=stage.resources.bucket,
            Key=key,
            Body=render_image("a red square", 16, 16),
            ContentType="image/png",
        )
        return {"kind": kind.name, "inputRef": key}
    return {"kind": kind.name, "input": kind.example if kind.example is not None else TEXT}


def _run_until_idle(stage: Stage, kind: str) -> None:
    mapping = stage.mapping(kind, batch_size=10)
    for _ in range(30):
        if mapping.poll_once().received == 0:
            return
    raise AssertionError("the queue never went idle")


def _balance(stage: Stage) -> int:
    return stage.store_for("alice").ledger.account("alice").balance


@pytest.mark.parametrize("name", QUEUED)
def test_an_unknown_option_is_a_422_at_submit_and_nothing_is_written(
    stage: Stage, api: Call, name: str
) -> None:
    body = {**_body(stage, require(name)), "options": {"noSuchOption": 1}}
    status, answer = api("POST", "/jobs", body)
    assert status == 422, answer
    assert answer["code"] == "invalid_options"
    assert "noSuchOption" in answer["message"]
    assert _balance(stage) == 1_000
    assert stage.store_for("alice").list_jobs("alice").jobs == []


@pytest.mark.parametrize("name", QUEUED)
def test_an_empty_input_is_a_422_at_submit(stage: Stage, api: Call, name: str) -> None:
    kind = require(name)
    status, answer = api("POST", "/jobs", {"kind": name, "input": "   "})
    assert status == 422, answer
    assert answer["code"] == "invalid_input"
    if kind.inputs.type == "image":
        assert "inputRef" in answer["message"]


@pytest.mark.parametrize("name", QUEUED)
def test_a_job_succeeds_with_an_output_a_model_and_its_price(stage: Stage, api: Call, name: str) -> None:
    kind = require(name)
    status, answer = api("POST", "/jobs", _body(stage, kind))
    assert status == 202, answer
    _run_until_idle(stage, name)
    status, view = api("GET", f"/jobs/{answer['jobId']}")
    assert status == 200
    assert view["status"] == "succeeded", view
    assert view["result"] is not None or view["artifacts"]
    assert view["model"] == stage.resources.config.plan(name).model
    assert _balance(stage) == 1_000 - kind.price


@pytest.mark.parametrize("name", QUEUED)
def test_a_retryable_failure_is_retried_and_then_succeeds(stage: Stage, api: Call, name: str) -> None:
    def fail_once(_request: Any) -> None:
        raise TransientProviderError("503 from the model", status=503)

    stage.provider.before_run = fail_once
    status, answer = api("POST", "/jobs", _body(stage, require(name)))
    assert status == 202, answer
    _run_until_idle(stage, name)
    job = stage.job_by_id("alice", answer["jobId"])
    if stage.resources.config.queue_tuning(name).max_retries == 0:
        # A kind that declares no retries (Tuning.max_retries=0): its one attempt dead-letters it.
        assert job.attempts == 1
        assert job.status is not JobStatus.SUCCEEDED
        letters = stage.receive(stage.resources.dlq_urls[name])
        assert [json.loads(m["Body"])["jobId"] for m in letters] == [job.job_id]
        return
    assert job.status is JobStatus.SUCCEEDED
    assert job.attempts == 2


@pytest.mark.parametrize("name", QUEUED)
def test_a_final_failure_ends_the_job_and_refunds_it(stage: Stage, api: Call, name: str) -> None:
    def refuse(_request: Any) -> None:
        raise InvalidInputError("the model refused the input")

    stage.provider.before_run = refuse
    status, answer = api("POST", "/jobs", _body(stage, require(name)))
    assert status == 202, answer
    _run_until_idle(stage, name)
    job = stage.job_by_id("alice", answer["jobId"])
    assert (job.status, job.last_error_class, job.attempts) == (JobStatus.FAILED_FINAL, "invalid_input", 1)
    assert _balance(stage) == 1_000


def test_the_openapi_document_describes_every_kinds_options(stage: Stage, api: Call) -> None:
    status, document = api("GET", "/openapi.json")
    assert status == 200
    options = document["components"]["schemas"]["JobRequest"]["properties"]["options"]
    assert set(options["x-options-by-kind"]) == set(QUEUED)
    for name in QUEUED:
        ref = options["x-options-by-kind"][name]["$ref"]
        schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert set(schema.get("properties", {})) == set(require(name).options_model.model_fields)
        assert schema.get("additionalProperties") is False
