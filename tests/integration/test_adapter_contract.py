"""One contract, every adapter: the same scenarios through the real consumer on moto.

success; throttle then success; a final error; still running then success. Each adapter is
scripted the way its real service would answer (magic inputs for `local`, botocore's Stubber for
Bedrock and Polly, a real HTTP server on 127.0.0.1 for the OpenAI-compatible adapter), and the
job row must end the same way whatever the adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs.domain import JobStatus
from aijobs.providers.base import Provider
from aijobs.providers.bedrock import BedrockProvider
from aijobs.providers.bedrock import client_config as bedrock_config
from aijobs.providers.local import LocalProvider
from aijobs.providers.openai import OpenAIProvider
from aijobs.providers.polly import PollyProvider
from aijobs.providers.polly import client_config as polly_config
from tests.integration.harness import Stage
from tests.unit.openai_server import ScriptedServer
from tests.unit.test_bedrock import async_status, converse_answer
from tests.unit.test_polly import LONG, task

pytestmark = pytest.mark.integration

TEXT = "Solar panels convert sunlight into electricity. They lower bills and need little maintenance."
SCENARIOS = ("success", "throttle_then_success", "final_error", "running_then_success")


@dataclass
class Script:
    """What one adapter needs for one scenario: the kind, the job input, the provider to use."""

    kind: str
    input: Any
    provider: Provider
    finish: Callable[[], None] = lambda: None
    # The model the stage's plan gives the kind on this provider (None: the local stage's own).
    model: str | None = None


def _local(scenario: str, stage: Stage) -> Iterator[Script]:
    provider = LocalProvider(throttle_retry_after=0, sleep=lambda _s: None)
    magic = {
        "success": "",
        "throttle_then_success": "#fail:429x1 ",
        "final_error": "#fail:400 ",
        "running_then_success": "#running:1 ",
    }[scenario]
    # Text answers at once; speech and video are the local provider's asynchronous capabilities.
    yield Script("tts-generate" if scenario == "running_then_success" else "summary", magic + TEXT, provider)


def _bedrock(scenario: str, stage: Stage) -> Iterator[Script]:
    client = boto3.client("bedrock-runtime", region_name="us-east-1", config=bedrock_config())
    provider = BedrockProvider(bucket=stage.resources.bucket, client=client)
    with Stubber(client) as stub:
        if scenario == "running_then_success":
            arn = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/abcdef012345"
            stub.add_response("start_async_invoke", {"invocationArn": arn})
            stub.add_response("get_async_invoke", {**async_status("InProgress"), "invocationArn": arn})
            stub.add_response("get_async_invoke", {**async_status("Completed"), "invocationArn": arn})
            yield Script(
                "video-generate",
                "a cat surfing at sunset",
                provider,
                stub.assert_no_pending_responses,
                model="luma.ray-v2:0",
            )
            return
        if scenario == "throttle_then_success":
            stub.add_client_error("converse", "ThrottlingException", "slow down", 429)
        if scenario == "final_error":
            stub.add_client_error("converse", "ValidationException", "Malformed input request", 400)
        else:
            stub.add_response("converse", converse_answer("Solar power is cheap."))
        yield Script(
            "summary", TEXT, provider, stub.assert_no_pending_responses, model="us.amazon.nova-lite-v1:0"
        )


def _polly(scenario: str, stage: Stage) -> Iterator[Script]:
    client = boto3.client("polly", region_name="us-east-1", config=polly_config())
    provider = PollyProvider(bucket=stage.resources.bucket, client=client)
    with Stubber(client) as stub:
        audio = {"AudioStream": _stream(b"ID3fake"), "ContentType": "audio/mpeg", "RequestCharacters": 10}
        if scenario == "running_then_success":
            key = f"{stage.resources.bucket}/results/x/main/task.mp3"
            stub.add_response("start_speech_synthesis_task", task("scheduled"))
            stub.add_response("get_speech_synthesis_task", task("inProgress"))
            done = task("completed")
            done["SynthesisTask"]["OutputUri"] = f"https://s3.us-east-1.amazonaws.com/{key}"
            stub.add_response("get_speech_synthesis_task", done)
            yield Script("tts-generate", LONG, provider, stub.assert_no_pending_responses, model="")
            return
        if scenario == "throttle_then_success":
            stub.add_client_error("synthesize_speech", "ThrottlingException", "Rate exceeded", 400)
        if scenario == "final_error":
            stub.add_client_error("synthesize_speech", "TextLengthExceededException", "too long", 400)
        else:
            stub.add_response("synthesize_speech", audio)
        yield Script(
            "tts-generate",
            "Hello from the jobs backbone.",
            provider,
            stub.assert_no_pending_responses,
            model="",
        )


def _openai(scenario: str, stage: Stage) -> Iterator[Script]:
    if scenario == "running_then_success":
        pytest.skip("OpenAI-compatible endpoints have no asynchronous jobs: every answer is final")
    with ScriptedServer() as server:
        provider = OpenAIProvider(api_key=lambda: "sk-test", base_url=server.base_url)
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4o-mini",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Sun."}}
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
        }
        if scenario == "throttle_then_success":
            server.reply(
                {"error": {"message": "Rate limit", "type": "requests"}},
                status=429,
                headers={"Retry-After": "0"},
            )
        if scenario == "final_error":
            server.reply(
                {"error": {"message": "Invalid value for 'messages'", "type": "invalid_request_error"}},
                status=400,
            )
        else:
            server.reply(answer)
        yield Script("summary", TEXT, provider, model="gpt-4o-mini")


def _stream(data: bytes) -> Any:
    import io

    from botocore.response import StreamingBody

    return StreamingBody(io.BytesIO(data), len(data))


ADAPTERS: dict[str, Callable[[str, Stage], Iterator[Script]]] = {
    "local": _local,
    "bedrock": _bedrock,
    "polly": _polly,
    "openai": _openai,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_every_adapter_keeps_the_contract(stage: Stage, adapter: str, scenario: str) -> None:
    with contextmanager(ADAPTERS[adapter])(scenario, stage) as script:
        consumer = stage.consumer(script.kind)
        consumer.provider = script.provider
        if script.model is not None:
            consumer.model = script.model or None  # "": the plan of a provider without models
        job = stage.submit("alice", script.kind, script.input)
        for _ in range(6):
            row = stage.job(job)
            if row.status.is_terminal:
                break
            stage.clock.advance(2)  # past any Retry-After of 0-1 s on the row
            stage.mapping(script.kind).poll_once()
        script.finish()
    row = stage.job(job)
    if scenario == "final_error":
        assert (row.status, row.attempts) == (JobStatus.FAILED_FINAL, 1)
        assert row.last_error_class in ("invalid_input", "input_too_large")
        return
    assert row.status is JobStatus.SUCCEEDED, (row.last_error_class, row.last_error_message)
    if scenario == "throttle_then_success":
        assert (row.attempts, row.last_error_class) == (2, "throttled")
    elif scenario == "running_then_success":
        assert (row.attempts, row.provider_checks) == (1, 2 if adapter != "local" else 1)
    else:
        assert row.attempts == 1
    assert row.result is not None or row.result_ref is not None
