"""An asynchronous provider task that ends `Failed` with a retryable cause is started again.

The real consumer on moto, with the real Bedrock and Polly adapters on stubbed clients (botocore's
Stubber checks every call's exact parameters, in order): the attempt that finds the task dead
fails retryably and forgets its handle, and the retry starts a new task (for Bedrock, with a new
client request token) instead of polling the dead one until the attempts run out.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs.domain import Job, JobStatus
from aijobs.providers.base import Call
from aijobs.providers.bedrock import BedrockProvider, client_request_token
from aijobs.providers.polly import MAX_SYNC_CHARS, PollyProvider
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

VIDEO_MODEL = "luma.ray-v2:0"
FIRST = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/aaaaaaaaaaaa"
SECOND = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/bbbbbbbbbbbb"
LONG = "Queues decouple accepting work from doing it. " * (MAX_SYNC_CHARS // 40)


@pytest.fixture
def bedrock() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub


@pytest.fixture
def polly() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("polly", region_name="us-east-1")
    with Stubber(client) as stub:
        yield client, stub


def _start(stage: Stage, job_id: str, token: str) -> dict[str, Any]:
    return {
        "modelId": VIDEO_MODEL,
        "modelInput": {
            "prompt": "waves at dusk",
            "aspect_ratio": "16:9",
            "loop": False,
            "duration": "5s",
            "resolution": "720p",
        },
        "outputDataConfig": {
            "s3OutputDataConfig": {"s3Uri": f"s3://{stage.resources.bucket}/results/{job_id}/main/"}
        },
        "clientRequestToken": token,
    }


def _invocation(stage: Stage, job_id: str, arn: str, status: str, **extra: Any) -> dict[str, Any]:
    """A GetAsyncInvoke answer as botocore's model documents it."""
    return {
        "invocationArn": arn,
        "modelArn": f"arn:aws:bedrock:us-east-1::foundation-model/{VIDEO_MODEL}",
        "clientRequestToken": "aijobs-token",
        "status": status,
        "submitTime": datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        "outputDataConfig": {
            "s3OutputDataConfig": {
                "s3Uri": f"s3://{stage.resources.bucket}/results/{job_id}/main/{arn.rsplit('/', 1)[1]}"
            }
        },
        **extra,
    }


def _first_task_fails(stage: Stage, bedrock: tuple[Any, Stubber], failure: str) -> tuple[Job, str]:
    """A video job on the stubbed Bedrock whose first task starts, then ends `Failed` with
    `failure`; returns the job and the token a new task must be started with."""
    client, stub = bedrock
    stage.consumer("video-generate").provider = BedrockProvider(bucket=stage.resources.bucket, client=client)
    job = stage.submit("alice", "video-generate", "waves at dusk", model=VIDEO_MODEL)
    first_token = client_request_token(Call(job_id=job.job_id, model=VIDEO_MODEL))
    second_token = client_request_token(Call(job_id=job.job_id, model=VIDEO_MODEL, tasks=1))
    assert first_token != second_token
    stub.add_response("start_async_invoke", {"invocationArn": FIRST}, _start(stage, job.job_id, first_token))
    stub.add_response(
        "get_async_invoke",
        _invocation(stage, job.job_id, FIRST, "Failed", failureMessage=failure),
        {"invocationArn": FIRST},
    )
    return job, second_token


def test_a_failed_video_task_is_started_again_with_a_new_token(
    stage: Stage, bedrock: tuple[Any, Stubber]
) -> None:
    _client, stub = bedrock
    job, second_token = _first_task_fails(stage, bedrock, "Internal server error")
    # The retry: a new task under a new token (the old token would answer with the dead task)...
    stub.add_response(
        "start_async_invoke", {"invocationArn": SECOND}, _start(stage, job.job_id, second_token)
    )
    # ...which is the one checked from then on.
    stub.add_response(
        "get_async_invoke", _invocation(stage, job.job_id, SECOND, "Completed"), {"invocationArn": SECOND}
    )

    list(stage.drain("video-generate"))

    stub.assert_no_pending_responses()
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED, row.last_error_message
    assert row.attempts == 2
    assert row.provider_tasks == 1
    assert row.result["output"]["video"] == f"results/{job.job_id}/main/bbbbbbbbbbbb/output.mp4"
    assert [entry.get("e") for entry in row.attempt_log] == ["transient", None]


def test_a_lost_start_answer_after_a_failed_task_keeps_the_new_token(
    stage: Stage, bedrock: tuple[Any, Stubber]
) -> None:
    _client, stub = bedrock
    job, second_token = _first_task_fails(stage, bedrock, "ThrottlingException: rate exceeded")
    # The new task's start answer is lost (a 503 after the request may have been accepted)...
    stub.add_client_error(
        "start_async_invoke", "ServiceUnavailableException", "try again", 503,
        expected_params=_start(stage, job.job_id, second_token),
    )  # fmt: skip
    # ...so its retry sends the same new token, and Bedrock answers with the task it started.
    stub.add_response(
        "start_async_invoke", {"invocationArn": SECOND}, _start(stage, job.job_id, second_token)
    )
    stub.add_response(
        "get_async_invoke", _invocation(stage, job.job_id, SECOND, "Completed"), {"invocationArn": SECOND}
    )

    list(stage.drain("video-generate"))

    stub.assert_no_pending_responses()
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED, row.last_error_message
    assert (row.attempts, row.provider_tasks) == (3, 1)


def _task(stage: Stage, job_id: str, task_id: str, status: str, **extra: Any) -> dict[str, Any]:
    """A SynthesisTask as StartSpeechSynthesisTask / GetSpeechSynthesisTask document it."""
    return {
        "SynthesisTask": {
            "Engine": "neural",
            "TaskId": task_id,
            "TaskStatus": status,
            "OutputUri": f"https://s3.us-east-1.amazonaws.com/{stage.resources.bucket}/results/{job_id}/main/.{task_id}.mp3",
            "CreationTime": datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
            "RequestCharacters": len(LONG),
            "OutputFormat": "mp3",
            "TextType": "text",
            "VoiceId": "Joanna",
            **extra,
        }
    }


def test_a_failed_polly_task_is_started_again(stage: Stage, polly: tuple[Any, Stubber]) -> None:
    client, stub = polly
    stage.consumer("tts-generate").provider = PollyProvider(bucket=stage.resources.bucket, client=client)
    job = stage.submit("alice", "tts-generate", LONG)
    start = {
        "Text": LONG,
        "VoiceId": "Joanna",
        "Engine": "neural",
        "OutputFormat": "mp3",
        "TextType": "text",
        "OutputS3BucketName": stage.resources.bucket,
        "OutputS3KeyPrefix": f"results/{job.job_id}/main/",
    }
    first, second = "11111111-57ce-4715-a247-cae8729dcce9", "22222222-57ce-4715-a247-cae8729dcce9"
    stub.add_response("start_speech_synthesis_task", _task(stage, job.job_id, first, "scheduled"), start)
    stub.add_response(
        "get_speech_synthesis_task",
        _task(stage, job.job_id, first, "failed", TaskStatusReason="Internal error"),
        {"TaskId": first},
    )
    stub.add_response("start_speech_synthesis_task", _task(stage, job.job_id, second, "scheduled"), start)
    stub.add_response(
        "get_speech_synthesis_task", _task(stage, job.job_id, second, "completed"), {"TaskId": second}
    )

    list(stage.drain("tts-generate"))

    stub.assert_no_pending_responses()
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED, row.last_error_message
    assert (row.attempts, row.provider_tasks) == (2, 1)
    assert row.result["output"]["audio"] == f"results/{job.job_id}/main/.{second}.mp3"


def test_a_throttled_check_keeps_checking_the_same_task(stage: Stage, polly: tuple[Any, Stubber]) -> None:
    # A failed *check* says nothing about the task: the retry checks it again, never starts another.
    client, stub = polly
    stage.consumer("tts-generate").provider = PollyProvider(bucket=stage.resources.bucket, client=client)
    job = stage.submit("alice", "tts-generate", LONG)
    task_id = "33333333-57ce-4715-a247-cae8729dcce9"
    stub.add_response("start_speech_synthesis_task", _task(stage, job.job_id, task_id, "scheduled"))
    stub.add_client_error("get_speech_synthesis_task", "ThrottlingException", "slow down", 400)
    stub.add_response(
        "get_speech_synthesis_task", _task(stage, job.job_id, task_id, "completed"), {"TaskId": task_id}
    )

    list(stage.drain("tts-generate"))

    stub.assert_no_pending_responses()
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED, row.last_error_message
    assert (row.attempts, row.provider_tasks) == (2, 0)
