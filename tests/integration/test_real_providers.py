"""The full POST -> consumer -> GET path on real adapters: Bedrock stubbed with botocore's Stubber,
an OpenAI-compatible server on 127.0.0.1 whose key comes from Secrets Manager (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs import runtime
from aijobs.consumer.attempts import Consumer
from aijobs.domain import JobStatus
from aijobs.providers.bedrock import BedrockProvider, client_config
from aijobs.providers.openai import OpenAIProvider
from aijobs.settings import ConsumerSettings
from aijobs_cli.local.esm import LambdaContext, QueueMapping
from tests.integration.harness import Stage, load_event
from tests.unit.openai_server import ScriptedServer

pytestmark = pytest.mark.integration

TEXT = "Solar panels convert sunlight into electricity. They lower bills and need little maintenance."
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {
        **stage_values,
        "PROVIDER": "bedrock",
        "KIND_PROVIDERS": "embedding=openai",
        "KIND_ALLOWED_MODELS": "summary=us.amazon.nova-pro-v1:0",
        "OPENAI_SECRET_NAME": "aijobs/openai",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # replaced per test by the scripted server's
    }


class Client:
    """POST /jobs and GET /jobs/{id} through the real API handler."""

    def __init__(self, stage: Stage, handler: Any) -> None:
        self.stage = stage
        self.handler = handler
        self.key = stage.directory.create_api_key("alice")
        # The API handler runs on the real clock (the stage's is fixed): the grant must outlive it.
        stage.store_for("alice").ledger.grant("alice", 100, datetime.now(UTC) + timedelta(days=1))

    def call(self, sample: str, *, body: Any = None, path: str | None = None) -> tuple[int, Any]:
        event = load_event(sample)
        event["headers"]["authorization"] = f"Bearer {self.key}"
        event["headers"].pop("idempotency-key", None)
        if body is not None:
            event["body"] = json.dumps(body)
        if path is not None:
            event["rawPath"] = event["requestContext"]["http"]["path"] = path
        response = self.handler(event, LambdaContext("aijobs-dev-api"))
        return int(response["statusCode"]), json.loads(response["body"])

    def submit(self, body: dict[str, Any]) -> tuple[int, Any]:
        return self.call("api-post-jobs.json", body=body)

    def job(self, job_id: str) -> Any:
        status, body = self.call("api-get-job.json", path=f"/jobs/{job_id}")
        assert status == 200
        return body


@pytest.fixture
def client(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    from api import handler

    yield Client(stage, handler.handler)
    runtime.reset_runtime()


def _consumer(stage: Stage, kind: str) -> Consumer:
    consumer = runtime.build_consumer(
        ConsumerSettings.from_env(stage.resources.consumer_env(kind)), clock=stage.clock
    )
    return consumer


def _mapping(stage: Stage, kind: str, consumer: Consumer) -> QueueMapping:
    return QueueMapping(
        sqs=stage.sqs,
        queue_url=stage.resources.queue_urls[kind],
        queue_arn=stage.resources.queue_arns[kind],
        handler=consumer.handle,
        function_name=f"aijobs-dev-consumer-{kind}",
    )


def _converse_answer(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 42, "outputTokens": 7, "totalTokens": 49},
        "metrics": {"latencyMs": 300},
    }


def _stubbed_bedrock(consumer: Consumer, stage: Stage) -> Stubber:
    """Swap the consumer's Bedrock adapter for one on a stubbed client with the same plan."""
    assert isinstance(consumer.provider, BedrockProvider)  # what the stage's plan built
    bedrock = boto3.client("bedrock-runtime", region_name="us-east-1", config=client_config())
    plans = ConsumerSettings.from_env(stage.resources.consumer_env("summary")).plans
    # The consumer runs the plan's model; the adapter only calls the one each request names.
    assert consumer.model == plans["summary"].model
    consumer.provider = BedrockProvider(bucket=stage.resources.bucket, client=bedrock)
    return Stubber(bedrock)


def test_a_summary_runs_on_bedrock_from_post_to_get(stage: Stage, client: Client) -> None:
    status, accepted = client.submit({"kind": "summary", "input": TEXT})
    assert status == 202
    consumer = _consumer(stage, "summary")
    with _stubbed_bedrock(consumer, stage) as stub:
        stub.add_response(
            "converse",
            _converse_answer("Solar panels turn sunlight into cheap power."),
            {
                "modelId": "us.amazon.nova-lite-v1:0",
                "system": [{"text": stub_any()}],
                "messages": [{"role": "user", "content": [{"text": TEXT}]}],
                "inferenceConfig": stub_any(),
            },
        )
        outcome = _mapping(stage, "summary", consumer).poll_once()
        stub.assert_no_pending_responses()
    assert outcome.failed_ids == []
    view = client.job(accepted["jobId"])
    assert view["status"] == "succeeded"
    assert view["model"] == "us.amazon.nova-lite-v1:0"
    assert "Solar panels turn sunlight" in json.dumps(view["result"])
    row = stage.job_by_id("alice", accepted["jobId"])
    assert row.provider == "bedrock"
    assert row.usage.get("inputTokens") == 42


def test_a_bedrock_throttle_is_retried_and_then_succeeds(stage: Stage, client: Client) -> None:
    _status, accepted = client.submit({"kind": "summary", "input": TEXT})
    consumer = _consumer(stage, "summary")
    with _stubbed_bedrock(consumer, stage) as stub:
        stub.add_client_error("converse", "ThrottlingException", "Too many requests", 429)
        stub.add_response("converse", _converse_answer("Short."))
        mapping = _mapping(stage, "summary", consumer)
        first = mapping.poll_once()
        assert len(first.failed_ids) == 1
        row = stage.job_by_id("alice", accepted["jobId"])
        assert (row.status, row.last_error_class) == (JobStatus.FAILED_RETRYABLE, "throttled")
        # THROTTLE_DELAY_SECONDS is 0 in these tests: the message is back at once.
        stage.clock.advance(1)
        assert mapping.poll_once().failed_ids == []
    assert client.job(accepted["jobId"])["status"] == "succeeded"


def test_a_model_outside_the_kinds_allow_list_is_refused_at_submit(stage: Stage, client: Client) -> None:
    status, body = client.submit({"kind": "summary", "input": TEXT, "model": "anthropic.claude-v2"})
    assert (status, body["code"]) == (422, "model_not_allowed")
    assert body["details"]["models"] == ["us.amazon.nova-lite-v1:0", "us.amazon.nova-pro-v1:0"]
    status, accepted = client.submit({"kind": "summary", "input": TEXT, "model": "us.amazon.nova-pro-v1:0"})
    assert status == 202
    consumer = _consumer(stage, "summary")
    with _stubbed_bedrock(consumer, stage) as stub:
        stub.add_response(
            "converse", _converse_answer("Pro answer."), {"modelId": "us.amazon.nova-pro-v1:0", **_rest()}
        )
        _mapping(stage, "summary", consumer).poll_once()
    assert client.job(accepted["jobId"])["model"] == "us.amazon.nova-pro-v1:0"


def test_an_openai_kind_reads_its_key_from_secrets_manager(
    stage: Stage, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    boto3.client("secretsmanager").create_secret(Name="aijobs/openai", SecretString=SECRET)
    with ScriptedServer() as server:
        env = {**stage.resources.consumer_env("embedding"), "OPENAI_BASE_URL": server.base_url}
        consumer = runtime.build_consumer(ConsumerSettings.from_env(env), clock=stage.clock)
        assert isinstance(consumer.provider, OpenAIProvider)
        server.reply(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
                "model": "text-embedding-3-small",
                "usage": {"prompt_tokens": 5, "total_tokens": 5},
            }
        )
        _status, accepted = client.submit({"kind": "embedding", "input": "hello world"})
        outcome = _mapping(stage, "embedding", consumer).poll_once()
        assert outcome.failed_ids == []
        (sent,) = server.requests
    assert sent.path == "/v1/embeddings"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.json["model"] == "text-embedding-3-small"
    view = client.job(accepted["jobId"])
    assert view["status"] == "succeeded"
    assert SECRET not in json.dumps(view)


def stub_any() -> Any:
    from botocore.stub import ANY

    return ANY


def _rest() -> dict[str, Any]:
    return {"system": stub_any(), "messages": stub_any(), "inferenceConfig": stub_any()}
