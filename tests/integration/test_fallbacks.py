"""A kind's fallback models (aijobs/kinds/<kind>.py `fallbacks`, or KIND_FALLBACKS): an unavailable
model moves the attempt to the next model at once; a throttle or a 5xx does from the kind's
`patience`-th attempt on. The row records the model that answered. The local stage's `summary`
falls back from local-text-1 to local-text-2, and `#fail:CODE@MODEL` faults one model only."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs.domain import JobStatus
from aijobs.errors import InvalidOptionError, ModelUnavailableError, TransientProviderError
from aijobs.kinds.registry import require
from aijobs.kinds.run import Candidate, Step, check_input, run_chain
from aijobs.providers.bedrock import BedrockProvider
from aijobs.providers.local import LocalProvider
from tests.integration.harness import CountingProvider, Stage

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer runs the model. The row keeps the state."


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "QUEUE_NAMES": "summary"}


def _drain(stage: Stage) -> None:
    mapping = stage.mapping("summary")
    for _ in range(10):
        if mapping.poll_once().received == 0:
            return


def test_the_local_stage_plans_summary_with_its_declared_fallback(stage: Stage) -> None:
    assert stage.resources.config.plan("summary").chain == (
        ("local", "local-text-1"),
        ("local", "local-text-2"),
    )


def test_an_unavailable_model_falls_back_within_the_same_attempt_and_alerts_once(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    jobs = [stage.submit("alice", "summary", f"#fail:eol@local-text-1 {TEXT}") for _ in range(2)]
    _drain(stage)
    for job in jobs:
        row = stage.job(job)
        assert (row.status, row.attempts, row.model) == (JobStatus.SUCCEEDED, 1, "local-text-2")
        assert row.result["output"]["summary"]
    alerts = [json.loads(json.loads(m["Body"])["Message"]) for m in stage.receive(inbox)]
    assert [alert["model"] for alert in alerts] == ["local-text-1"]


@pytest.mark.parametrize("code", ["503", "429"])
def test_a_failing_model_is_retried_then_the_next_attempt_falls_back(stage: Stage, code: str) -> None:
    stage.provider = CountingProvider(throttle_retry_after=0)  # the retry is due at once
    job = stage.submit("alice", "summary", f"#fail:{code}@local-text-1 {TEXT}")
    _drain(stage)
    stage.clock.advance(120)  # past any Retry-After
    _drain(stage)
    row = stage.job(job)
    # Attempt 1 on the first model (patience 2), attempt 2 moves on after it fails again.
    assert (row.status, row.attempts, row.model) == (JobStatus.SUCCEEDED, 2, "local-text-2")
    assert row.last_error_class in ("transient", "throttled")


def test_when_every_model_fails_the_job_fails_as_the_last_one_did(stage: Stage) -> None:
    job = stage.submit("alice", "summary", f"#fail:eol {TEXT}")
    _drain(stage)
    row = stage.job(job)
    assert (row.status, row.last_error_class) == (JobStatus.FAILED_FINAL, "model_unavailable")
    assert "'local-text-2'" in str(row.last_error_message)


def test_a_job_without_faults_runs_on_the_first_model(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    _drain(stage)
    assert stage.job(job).model == "local-text-1"


class _Other(LocalProvider):
    name = "other"


def test_a_fallback_on_another_provider_names_it_so_the_cost_is_priced_there() -> None:
    kind = require("summary")
    step = Step(job_id="j", input=check_input(kind, f"#fail:eol@local-text-1 {TEXT}"), options={}, model="x")
    result = run_chain(
        kind, [Candidate(LocalProvider(), "local-text-1"), Candidate(_Other(), "local-text-2")], step
    )
    assert (result.provider, result.model, result.unavailable) == ("other", "local-text-2", ("local-text-1",))


def test_a_started_task_is_checked_on_its_own_model_only() -> None:
    calls: list[str] = []

    class Failing(LocalProvider):
        def check_video(self, request: Any) -> Any:
            calls.append(request.call.model)
            raise TransientProviderError("503")

    kind = require("video-generate")
    step = Step(job_id="j", input=check_input(kind, "a wave"), options={}, model="x", handle="h", attempt=3)
    with pytest.raises(TransientProviderError):
        run_chain(kind, [Candidate(Failing(), "local-video-1"), Candidate(Failing(), "local-video-1")], step)
    assert calls == ["local-video-1"]


def test_the_first_attempts_do_not_fall_back_on_a_blip() -> None:
    kind = require("summary")
    step = Step(job_id="j", input=check_input(kind, f"#fail:503@local-text-1 {TEXT}"), options={}, model="x")
    chain = [Candidate(LocalProvider(), "local-text-1"), Candidate(LocalProvider(), "local-text-2")]
    with pytest.raises(TransientProviderError):
        run_chain(kind, chain, step)
    assert run_chain(kind, chain, Step(**{**step.__dict__, "attempt": kind.patience})).model == "local-text-2"
    with pytest.raises(ModelUnavailableError):
        run_chain(
            kind,
            chain[:1],
            Step(job_id="j", input=check_input(kind, f"#fail:eol {TEXT}"), options={}, model="x"),
        )


def test_when_every_model_is_unavailable_each_is_alerted_once(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    for _ in range(2):
        stage.submit("alice", "summary", f"#fail:eol {TEXT}")
    _drain(stage)
    alerts = [json.loads(json.loads(m["Body"])["Message"]) for m in stage.receive(inbox)]
    assert sorted(alert["model"] for alert in alerts) == ["local-text-1", "local-text-2"]


# --- a fallback whose bounds differ from the first model's ------------------------------------


class _Gone(LocalProvider):
    def embed(self, request: Any) -> Any:
        raise ModelUnavailableError("gone", model=request.call.model)


def _titan() -> BedrockProvider:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    Stubber(client).activate()  # nothing queued: a call that went out would fail the test
    return BedrockProvider(bucket="b", client=client)


def test_a_fallback_that_does_not_take_the_options_is_passed_over() -> None:
    """Options are checked against the job's first model at submit; 64 dimensions suit the local
    model but not Titan (256, 512 or 1024): Titan is skipped without a call, the next one answers."""
    kind = require("embedding")
    step = Step(job_id="j", input=check_input(kind, TEXT), options={"dimensions": 64}, model="x")
    chain = [
        Candidate(_Gone(), "local-embedding-1"),
        Candidate(_titan(), "amazon.titan-embed-text-v2:0"),
        Candidate(_Other(), "local-embedding-1"),
    ]
    result = run_chain(kind, chain, step)
    assert (result.provider, result.output["dimensions"], result.unavailable) == (
        "other",
        64,
        ("local-embedding-1",),
    )


def test_when_only_such_fallbacks_are_left_the_job_fails_as_the_first_model_did() -> None:
    kind = require("embedding")
    step = Step(job_id="j", input=check_input(kind, TEXT), options={"dimensions": 64}, model="x")
    chain = [Candidate(_Gone(), "local-embedding-1"), Candidate(_titan(), "amazon.titan-embed-text-v2:0")]
    with pytest.raises(ModelUnavailableError) as raised:
        run_chain(kind, chain, step)
    assert raised.value.model == "local-embedding-1"
    # The first model refusing the options is the job's own fault (the API refuses it at submit).
    with pytest.raises(InvalidOptionError):
        run_chain(kind, chain[1:], step)
