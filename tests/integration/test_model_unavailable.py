"""A model that can no longer be called (`model_unavailable`): the job fails for good with a message
naming the model and the fix, the kind's consumer is never paused, and the operator is alerted once
per model across containers. Against moto; the Bedrock path through a stubbed client."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs import runtime
from aijobs.consumer.attempts import Consumer
from aijobs.domain import JobStatus
from aijobs.provider_plan import plans_setting
from aijobs.providers.bedrock import BedrockProvider, client_config
from aijobs.settings import ConsumerSettings
from aijobs_cdk.provider_plans import parse_provider_plan
from aijobs_cli.local.esm import QueueMapping
from tests.integration.harness import Stage
from tests.integration.test_consumer import TEXT, RecordingControl

pytestmark = pytest.mark.integration

END_OF_LIFE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more "
    "details."
)


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    # One kind on the local provider and its `#fail:eol`, without its fallback model (which
    # tests/integration/test_fallbacks.py covers); the last test plans it on Bedrock and runs a
    # stubbed Bedrock client.
    return {**stage_values, "QUEUE_NAMES": "summary", "KIND_FALLBACKS": "summary=none"}


def _alerts(stage: Stage, inbox: str) -> list[dict[str, Any]]:
    return [json.loads(json.loads(m["Body"])["Message"]) for m in stage.receive(inbox)]


def _mapping(stage: Stage, consumer: Consumer, kind: str = "summary") -> QueueMapping:
    return QueueMapping(
        sqs=stage.sqs, queue_url=stage.resources.queue_urls[kind], queue_arn=stage.resources.queue_arns[kind],
        handler=consumer.handle, function_name=f"aijobs-dev-consumer-{kind}",
    )  # fmt: skip


def test_an_end_of_life_model_fails_its_job_for_good_without_pausing_the_consumer(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    consumer = stage.consumer("summary")
    control = RecordingControl()
    consumer.control = control  # type: ignore[assignment]
    gone = stage.submit("alice", "summary", "#fail:eol " + TEXT)
    others = [stage.submit("alice", "summary", TEXT) for _ in range(2)]

    (outcome,) = stage.drain("summary")

    assert outcome.failed_ids == []  # acknowledged: never retried, never dead-lettered
    row = stage.job(gone)
    assert (row.status, row.attempts, row.last_error_class) == (
        JobStatus.FAILED_FINAL,
        1,
        "model_unavailable",
    )
    assert row.last_error_message is not None
    assert row.last_error_message.startswith(
        "model 'local-text-1' is no longer available (end of life): pick a current model for summary"
    )
    assert "`aijobs models check`" in row.last_error_message
    assert row.last_error_message.endswith(f"local provider ResourceNotFoundException: {END_OF_LIFE}")
    # Not paused: the mapping stays enabled and the rest of the batch ran.
    assert control.calls == []
    assert [stage.job(job).status for job in others] == [JobStatus.SUCCEEDED] * 2
    assert stage.receive(stage.resources.dlq_urls["summary"]) == []
    (alert,) = _alerts(stage, inbox)
    assert (alert["kind"], alert["model"], alert["reason"]) == ("summary", "local-text-1", "end_of_life")
    assert "aijobs models check" in alert["fix"]
    assert TEXT not in json.dumps(alert)


def test_the_alert_goes_out_once_per_model_across_containers(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    for _ in range(2):
        stage.submit("alice", "summary", "#fail:eol " + TEXT)
    list(stage.drain("summary"))
    # Another container of the same kind (a cold start elsewhere) sees the same model fail.
    other = runtime.build_consumer(
        ConsumerSettings.from_env(stage.resources.consumer_env("summary")), clock=stage.clock
    )
    other.provider = stage.provider
    later = stage.submit("bob", "summary", "#fail:eol " + TEXT)
    _mapping(stage, other).poll_once()
    assert stage.job(later).last_error_class == "model_unavailable"
    assert [a["model"] for a in _alerts(stage, inbox)] == ["local-text-1"]
    # Another model of the same kind is news: it alerts once too.
    chosen = stage.submit("alice", "summary", "#fail:eol " + TEXT, model="local-text-2")
    stage.submit("bob", "summary", "#fail:eol " + TEXT, model="local-text-2")
    list(stage.drain("summary"))
    assert "'local-text-2'" in str(stage.job(chosen).last_error_message)
    assert [a["model"] for a in _alerts(stage, inbox)] == ["local-text-2"]


class _FailingAlerts:
    def __init__(self) -> None:
        self.calls = 0

    def publish(self, subject: str, detail: dict[str, Any]) -> None:
        self.calls += 1
        raise RuntimeError("SNS is down")


def test_an_alert_that_could_not_be_sent_is_sent_by_the_next_failure(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    consumer = stage.consumer("summary")
    real, failing = consumer.alerts, _FailingAlerts()
    consumer.alerts = failing  # type: ignore[assignment]
    first = stage.submit("alice", "summary", "#fail:eol " + TEXT)
    list(stage.drain("summary"))
    assert failing.calls == 1
    assert stage.job(first).status is JobStatus.FAILED_FINAL  # the job's end does not wait for SNS
    consumer.alerts = real
    stage.submit("alice", "summary", "#fail:eol " + TEXT)
    list(stage.drain("summary"))
    assert [a["model"] for a in _alerts(stage, inbox)] == ["local-text-1"]


def test_a_bedrock_job_names_its_kinds_default_model_and_the_operator_hears_of_it(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    # Built from the stage's environment as the function builds itself: the plan's default model.
    env = {**stage.resources.consumer_env("summary"), "PROVIDER": "bedrock"}
    env.update(
        plans_setting(
            parse_provider_plan(
                stage="dev", kinds=("summary",), default_provider="bedrock", kind_fallbacks="summary=none"
            )
        )
    )
    consumer = runtime.build_consumer(ConsumerSettings.from_env(env), clock=stage.clock)
    control = RecordingControl()
    consumer.control = control  # type: ignore[assignment]
    client = boto3.client("bedrock-runtime", region_name="us-east-1", config=client_config())
    consumer.provider = BedrockProvider(bucket=stage.resources.bucket, client=client)
    job = stage.submit("alice", "summary", TEXT)
    with Stubber(client) as stub:
        stub.add_client_error("converse", "ResourceNotFoundException", END_OF_LIFE, 404)
        assert _mapping(stage, consumer).poll_once().failed_ids == []
        stub.assert_no_pending_responses()
    row = stage.job(job)
    assert row.last_error_class == "model_unavailable"
    assert str(row.last_error_message).startswith("model 'us.amazon.nova-lite-v1:0' is no longer available")
    assert str(row.last_error_message).endswith(f"Bedrock ResourceNotFoundException: {END_OF_LIFE}")
    assert control.calls == []
    (alert,) = _alerts(stage, inbox)
    assert alert["model"] == "us.amazon.nova-lite-v1:0"
    assert alert["error"] == f"Bedrock ResourceNotFoundException: {END_OF_LIFE}"
