"""Regression tests for the holes an adversarial review found (issue 8): each fails without its fix.

Re-check chains, Retry-After vs the sweeper, input errors that are final, receives that spend no
attempt, and a DLQ consumer that trusts the row.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from aijobs import runtime
from aijobs.domain import Job, JobStatus
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.dead_letter_records import list_dead_letters
from tests.integration.harness import CountingProvider, Stage

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer loads the row and calls the model."
SWEEP = CronRun("*/5 * * * *", "2026-11-29T09:10:00Z")


def _cron(stage: Stage) -> CronContext:
    return runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)


def _queued(stage: Stage, kind: str) -> list[dict[str, Any]]:
    """Receive (and so hide) what is visible on a kind's queue; bodies parsed."""
    return [json.loads(m["Body"]) for m in stage.receive(stage.resources.queue_urls[kind])]


def _dlq_depth(stage: Stage, kind: str) -> int:
    attributes = stage.sqs.get_queue_attributes(
        QueueUrl=stage.resources.dlq_urls[kind],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


# --- 1. one re-check chain per job -------------------------------------------------------------


def test_a_duplicated_recheck_message_does_not_start_a_second_polling_chain(stage: Stage) -> None:
    job = stage.submit("alice", "video-generate", "#running:3 a cat surfing")
    stage.mapping("video-generate").poll_once()  # attempt 1: provider still running
    (recheck,) = stage.receive(stage.resources.queue_urls["video-generate"])
    # At-least-once delivery: the same re-check arrives twice (sent back visible, plus a copy).
    for _ in range(2):
        stage.sqs.send_message(
            QueueUrl=stage.resources.queue_urls["video-generate"], MessageBody=recheck["Body"]
        )
    list(stage.drain("video-generate", rounds=30))
    row = stage.job(job)
    assert (row.status, row.attempts, row.provider_checks) == (JobStatus.SUCCEEDED, 1, 3)
    # First call plus three re-checks: a second chain would poll the provider again every round.
    assert stage.provider.calls[job.job_id] == 4
    assert _queued(stage, "video-generate") == []


def test_a_recheck_copy_arriving_after_the_next_wait_began_is_acknowledged(stage: Stage) -> None:
    job = stage.submit("alice", "video-generate", "#running:2 a slow storm")
    stage.mapping("video-generate").poll_once()
    (first,) = stage.receive(stage.resources.queue_urls["video-generate"])
    stage.sqs.change_message_visibility(
        QueueUrl=stage.resources.queue_urls["video-generate"],
        ReceiptHandle=first["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    stage.mapping("video-generate", batch_size=1).poll_once()  # check 1: still running, new wait
    waiting = stage.job(job)
    assert waiting.awaiting_provider
    assert waiting.recheck_id != json.loads(first["Body"])["check"]
    # A late copy of the first re-check finds another wait pending: it claims nothing.
    stage.sqs.send_message(QueueUrl=stage.resources.queue_urls["video-generate"], MessageBody=first["Body"])
    calls = stage.provider.calls[job.job_id]
    consumer = stage.consumer("video-generate")
    (late,) = [
        m for m in stage.receive(stage.resources.queue_urls["video-generate"]) if m["Body"] == first["Body"]
    ]
    from aijobs_cli.local.esm import LambdaContext, sqs_record

    response = consumer.handle(
        {"Records": [sqs_record(late, stage.resources.queue_arns["video-generate"])]}, LambdaContext("fn")
    )
    assert response == {"batchItemFailures": []}
    assert stage.provider.calls[job.job_id] == calls
    assert stage.job(job).recheck_id == waiting.recheck_id


def test_a_plain_duplicate_of_the_first_message_never_claims_a_job_awaiting_its_provider(
    stage: Stage,
) -> None:
    job = stage.submit("alice", "video-generate", "#running:1 waves")
    stage.mapping("video-generate").poll_once()
    stage.send(job)  # a late copy of the original (un-tagged) message
    calls = stage.provider.calls[job.job_id]
    list(stage.drain("video-generate"))
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert stage.provider.calls[job.job_id] == calls + 1  # only the tagged re-check ran


# --- 2. Retry-After is honoured by everyone ------------------------------------------------------


@pytest.fixture
def slow_throttle(stage: Stage) -> Stage:
    """A provider whose 429 asks for Retry-After: 1800 s (half an hour)."""
    stage.provider = CountingProvider(throttle_retry_after=1800)
    return stage


def test_the_sweeper_does_not_resend_a_retry_before_its_retry_after(slow_throttle: Stage) -> None:
    stage = slow_throttle
    job = stage.submit("alice", "summary", "#fail:429x1 " + TEXT)
    stage.mapping("summary").poll_once()
    row = stage.job(job)
    assert row.status is JobStatus.FAILED_RETRYABLE
    assert row.next_attempt_at is not None
    assert (row.next_attempt_at - stage.clock()).total_seconds() == 1800
    ctx = _cron(stage)
    stage.clock.advance(ctx.stuck_after.total_seconds() + 1)  # "stale" by age, but not due yet
    assert run_sweeper(SWEEP, ctx)["actions"] == {"summary:not_due": 1}
    stage.clock.advance(1800 - 2)  # past its retry time, but not yet `stuck_after` overdue
    assert run_sweeper(SWEEP, ctx)["actions"] == {"summary:not_due": 1}
    stage.clock.advance(ctx.stuck_after.total_seconds())  # overdue by stuck_after: now it is lost
    assert run_sweeper(SWEEP, ctx)["actions"] == {"summary:resent": 1}


def test_an_early_duplicate_waits_for_the_retry_time_without_spending_an_attempt(
    slow_throttle: Stage,
) -> None:
    stage = slow_throttle
    job = stage.submit("alice", "summary", "#fail:429x1 " + TEXT)
    stage.mapping("summary").poll_once()
    stage.send(job)  # a duplicate delivered long before the Retry-After
    outcome = stage.mapping("summary").poll_once()
    assert (outcome.received, outcome.failed_ids) == (1, [])
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.FAILED_RETRYABLE, 1)
    assert stage.provider.calls[job.job_id] == 1
    # It was put back with a delay (SQS allows 15 minutes at most): nothing visible now.
    assert _queued(stage, "summary") == []


# --- 6. input errors are final -----------------------------------------------------------------


def _put_input(stage: Stage, key: str, data: bytes) -> None:
    boto3.client("s3").put_object(Bucket=stage.resources.bucket, Key=key, Body=data)


def test_a_missing_input_object_fails_the_job_at_once(stage: Stage) -> None:
    job = stage.submit("alice", "image-caption", None, input_ref="inputs/alice/gone.png")
    (outcome,) = stage.drain("image-caption")
    assert outcome.failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts, row.last_error_class) == (JobStatus.FAILED_FINAL, 1, "invalid_input")
    assert "does not exist" in (row.last_error_message or "")
    assert _dlq_depth(stage, "image-caption") == 0


def test_text_by_reference_that_is_not_utf8_is_final(stage: Stage) -> None:
    _put_input(stage, "inputs/alice/latin1.txt", "Caf\xe9 au lait, tr\xe8s bien.".encode("latin-1"))
    job = stage.submit("alice", "summary", None, input_ref="inputs/alice/latin1.txt")
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.attempts, row.last_error_class) == (JobStatus.FAILED_FINAL, 1, "invalid_input")
    assert "not UTF-8" in (row.last_error_message or "")


def test_text_by_reference_is_summarised(stage: Stage) -> None:
    _put_input(stage, "inputs/alice/doc.txt", TEXT.encode())
    job = stage.submit("alice", "summary", None, input_ref="inputs/alice/doc.txt")
    list(stage.drain("summary"))
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.result["output"]["summary"]


def _raising(stage: Stage, error: Exception, times: int = 1) -> None:
    calls = {"n": 0}

    def hook(_request: Any) -> None:
        calls["n"] += 1
        if calls["n"] <= times:
            raise error

    stage.provider.before_run = hook


def test_a_bug_outside_the_provider_is_final_not_four_attempts_and_a_dead_letter(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    _raising(stage, KeyError("model_output"))
    (outcome,) = stage.drain("summary")
    assert outcome.failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts, row.last_error_class) == (JobStatus.FAILED_FINAL, 1, "internal_error")
    assert _dlq_depth(stage, "summary") == 0


def test_an_infrastructure_blip_outside_the_provider_is_retried(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    throttled = ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem"
    )
    _raising(stage, throttled)
    outcomes = list(stage.drain("summary"))
    assert [len(o.failed_ids) for o in outcomes] == [1, 0]
    row = stage.job(job)
    assert (row.status, row.attempts, row.last_error_class) == (JobStatus.SUCCEEDED, 2, "internal")


# --- 7. only attempts lead to the DLQ ---------------------------------------------------------------


def test_a_record_returned_many_times_without_an_attempt_is_not_dead_lettered(stage: Stage) -> None:
    """A job with one attempt left, whose deliveries fail before any attempt more often than SQS's
    maxReceiveCount allows, still gets its last attempt and succeeds."""
    job = stage.submit("alice", "summary", "#fail:503x3 " + TEXT)  # succeeds on attempt 4 of 4
    for _ in range(3):
        stage.mapping("summary").poll_once()
    assert stage.job(job).attempts == 3
    consumer = stage.consumer("summary")
    real = consumer.directory.shard_for
    failures = {"left": stage.resources.config.max_receive_count + 3}

    def flaky(user_id: str) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "rate"}}, "GetItem")
        return real(user_id)

    consumer.directory.shard_for = flaky  # type: ignore[method-assign]
    for _ in range(40):
        if stage.job(job).status is JobStatus.SUCCEEDED or stage.mapping("summary").poll_once().received == 0:
            break
    assert failures["left"] == 0
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 4)
    assert _dlq_depth(stage, "summary") == 0


def test_a_job_whose_last_attempt_died_is_handed_to_the_dlq_by_the_consumer(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    store = stage.store_for("alice")
    consumer = stage.consumer("summary")
    row = stage.job(job)
    for _ in range(consumer.max_attempts):  # every attempt claimed, none finished (killed)
        claimed = store.claim(
            row, now=stage.clock(), lease=consumer.lease, max_attempts=consumer.max_attempts
        )
        assert claimed is not None
        row = claimed
        stage.clock.advance(consumer.lease.total_seconds() + 1)
    (outcome,) = stage.drain("summary")
    assert outcome.failed_ids == []
    assert _dlq_depth(stage, "summary") == 1
    assert stage.provider.calls.get(job.job_id) is None


# --- 8. the DLQ consumer trusts the row --------------------------------------------------------------


def _to_dlq(stage: Stage, job: Job, kind: str = "summary") -> None:
    body = json.dumps({"jobId": job.job_id, "userId": job.user_id, "kind": kind})
    stage.sqs.send_message(QueueUrl=stage.resources.dlq_urls[kind], MessageBody=body)


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def test_a_stray_copy_of_a_succeeded_job_is_no_dead_letter(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    job = stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    _to_dlq(stage, job)
    (outcome,) = [stage.dlq_mapping().poll_once()]
    assert (outcome.received, outcome.failed_ids) == (1, [])
    assert list_dead_letters(_meta(stage), "summary") == []
    assert stage.receive(inbox) == []
    assert stage.job(job).status is JobStatus.SUCCEEDED


def test_a_copy_of_a_job_running_under_a_live_lease_is_no_dead_letter(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    consumer = stage.consumer("summary")
    stage.store_for("alice").claim(stage.job(job), now=stage.clock(), lease=consumer.lease, max_attempts=4)
    _to_dlq(stage, job)
    stage.dlq_mapping().poll_once()
    assert list_dead_letters(_meta(stage), "summary") == []
    assert stage.job(job).status is JobStatus.RUNNING


def test_copies_of_one_dead_letter_record_and_alert_once(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    job = stage.submit("alice", "summary", "#fail:503 " + TEXT)
    list(stage.drain("summary"))  # four attempts, handed to the DLQ by the consumer
    _to_dlq(stage, job)  # plus a stray copy of the same message
    while stage.dlq_mapping().poll_once().received:
        pass
    (entry,) = list_dead_letters(_meta(stage), "summary")
    assert (entry.job_id, entry.job_status) == (job.job_id, "failed_final")
    assert len(stage.receive(inbox)) == 1


def test_a_batch_of_texts_embeds_in_one_job(stage: Stage) -> None:
    job = stage.submit("alice", "embedding", {"texts": ["solar power", "wind power", "tidal power"]})
    list(stage.drain("embedding"))
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)
    # Three vectors are more than a row keeps (INLINE_RESULT_BYTES): the result is in S3.
    assert row.result is None
    assert row.result_ref is not None
    body = boto3.client("s3").get_object(Bucket=stage.resources.bucket, Key=row.result_ref)["Body"].read()
    output = json.loads(body)["output"]
    assert output["count"] == 3
    assert len(output["vectors"]) == 3
    assert output["vectors"][0] != output["vectors"][1]
    assert stage.provider.calls[job.job_id] == 1
