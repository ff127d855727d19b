"""The consumer claims straight from the message: one conditional update that also says, when it
fails, why (the row as it was), so a delivery never reads the row first. Every guarantee of the
read-then-claim path holds; these tests pin the calls and each way the claim can fail."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs.domain import JobStatus
from aijobs.store.keys import iso
from aijobs.store.retention import write_retention
from aijobs_cli.local.esm import LambdaContext, sqs_record
from tests.aws_calls import recording_calls
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

TEXT = "A sentence to summarise. Another one follows it here."


def _deliver(
    stage: Stage, kind: str = "summary", *, cold: bool = False
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Receive the kind's messages and hand them to its consumer as one batch; (response, the
    consumer's AWS calls). `cold`: a container that knows nothing yet."""
    url, arn = stage.resources.queue_urls[kind], stage.resources.queue_arns[kind]
    sqs = stage.sqs
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    with recording_calls() as log:
        consumer = stage.consumer(kind)  # built inside, so its clients are recorded
        if not cold:
            consumer.directory.shard_for("alice")  # a warm container knows the user's shard
            consumer.directory.retention()  # and the retention (read once per container and 5 minutes)
        log.clear()
        response = consumer.handle({"Records": [sqs_record(m, arn) for m in messages]}, LambdaContext("fn"))
    return response, log.calls


def _set(stage: Stage, job: Any, **values: Any) -> None:
    names = {f"#n{i}": name for i, name in enumerate(values)}
    stage.store_for(job.user_id)._table.update_item(
        Key={"pk": f"USER#{job.user_id}", "sk": f"JOB#{job.job_id}"},
        UpdateExpression="SET " + ", ".join(f"#n{i} = :v{i}" for i in range(len(values))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues={f":v{i}": value for i, value in enumerate(values.values())},
    )


def test_a_successful_job_takes_a_claim_and_a_finish_and_no_read(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    response, calls = _deliver(stage)
    assert response == {"batchItemFailures": []}
    # A summary's result is small: it stays on the row, no S3 PUT.
    assert calls == [("dynamodb", "UpdateItem"), ("dynamodb", "UpdateItem")]
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)


def test_a_cold_container_reads_the_tenant_and_the_retention_in_one_request(stage: Stage) -> None:
    write_retention(
        boto3.resource("dynamodb").Table(stage.resources.meta_table),
        credit_tx_retention_days=30,
        ai_task_retention_days=7,
    )
    job = stage.submit("alice", "summary", TEXT)
    response, calls = _deliver(stage, cold=True)
    assert response == {"batchItemFailures": []}
    assert calls == [
        ("dynamodb", "BatchGetItem"),
        ("dynamodb", "UpdateItem"),
        ("dynamodb", "UpdateItem"),
    ]
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.finished_at is not None
    assert stage.store_for("alice")._table.get_item(Key={"pk": "USER#alice", "sk": f"JOB#{job.job_id}"})[
        "Item"
    ]["ttl"] == int((row.finished_at + timedelta(days=7)).timestamp())


def test_a_duplicate_of_a_job_under_a_live_lease_is_acknowledged_without_a_read(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    claimed = stage.store_for("alice").claim(
        job, now=stage.clock(), lease=timedelta(minutes=5), max_attempts=4
    )
    assert claimed is not None
    response, calls = _deliver(stage)
    assert response == {"batchItemFailures": []}
    assert ("dynamodb", "GetItem") not in calls
    assert stage.provider.calls == {}
    row = stage.job(job)
    assert (row.status, row.attempts, row.claim_id) == (JobStatus.RUNNING, 1, claimed.claim_id)


def test_a_row_of_another_kind_is_not_claimed(stage: Stage) -> None:
    job = stage.submit("alice", "embedding", "text to embed")
    stage.send(job, kind="summary")  # a message on the wrong queue
    response, calls = _deliver(stage)
    assert response == {"batchItemFailures": []}
    assert calls == [("dynamodb", "UpdateItem")]  # the failed claim told it all
    assert stage.job(job).status is JobStatus.QUEUED
    assert stage.provider.calls == {}


def test_a_missing_row_is_acknowledged_and_not_created(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    stage.store_for("alice")._table.delete_item(Key={"pk": "USER#alice", "sk": f"JOB#{job.job_id}"})
    response, _ = _deliver(stage)
    assert response == {"batchItemFailures": []}
    assert stage.store_for("alice").get("alice", job.job_id) is None  # the update did not create it


def test_a_retry_not_yet_due_waits_without_spending_an_attempt(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    due = stage.clock() + timedelta(seconds=90)
    _set(stage, job, status=JobStatus.FAILED_RETRYABLE.value, attempts=1, next_attempt_at=iso(due))
    response, calls = _deliver(stage)
    assert response == {"batchItemFailures": []}
    assert ("dynamodb", "GetItem") not in calls
    assert ("sqs", "SendMessage") in calls  # a delayed copy
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.FAILED_RETRYABLE, 1)


def test_a_retry_due_within_the_tolerance_runs(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    _set(stage, job, status=JobStatus.FAILED_RETRYABLE.value, attempts=1,
         next_attempt_at=iso(stage.clock() + timedelta(milliseconds=500)))  # fmt: skip
    _deliver(stage)
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_a_queued_row_runs_whatever_an_old_retry_time_says(stage: Stage) -> None:
    """Re-queued by an operator after a retry was scheduled: `queued` is always runnable."""
    job = stage.submit("alice", "summary", TEXT)
    _set(stage, job, next_attempt_at=iso(stage.clock() + timedelta(hours=1)))
    _deliver(stage)
    assert stage.job(job).status is JobStatus.SUCCEEDED


def test_a_row_out_of_attempts_is_dead_lettered_not_run(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    _set(stage, job, status=JobStatus.FAILED_RETRYABLE.value, attempts=4)
    response, calls = _deliver(stage)
    assert response == {"batchItemFailures": []}
    assert ("sqs", "SendMessage") in calls  # to the DLQ
    assert stage.provider.calls == {}
    assert len(stage.receive(stage.resources.dlq_urls["summary"])) == 1


def test_an_expired_lease_is_taken_over_in_one_call(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    store = stage.store_for("alice")
    store.claim(job, now=stage.clock(), lease=timedelta(seconds=10), max_attempts=4)
    stage.clock.advance(11)
    _, calls = _deliver(stage)
    assert calls[0] == ("dynamodb", "UpdateItem")
    assert ("dynamodb", "GetItem") not in calls
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_a_retryable_failure_asks_dynamodb_for_no_row_back(stage: Stage) -> None:
    """Nothing reads the row a retryable failure writes: its update returns nothing."""
    stage.submit("alice", "summary", "#fail:503 " + TEXT)
    url, arn = stage.resources.queue_urls["summary"], stage.resources.queue_arns["summary"]
    (message,) = stage.sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    params: list[tuple[str, str, dict[str, Any]]] = []
    with recording_calls() as log:
        consumer = stage.consumer("summary")
        consumer.directory.shard_for("alice")
        log.keep_params = params
        consumer.handle({"Records": [sqs_record(message, arn)]}, LambdaContext("fn"))
    updates = [p for service, op, p in params if op == "UpdateItem"]
    assert [u.get("ReturnValues") for u in updates] == ["ALL_NEW", "NONE"]  # the claim is read
    assert updates[1]["ExpressionAttributeValues"][":status"] == JobStatus.FAILED_RETRYABLE.value
