"""Production queues have names CloudFormation generates (so a retained queue never blocks its
replacement): the functions take their queues and kinds from their environment, never from a name."""

from __future__ import annotations

import json

import pytest

from aijobs import aws
from aijobs.domain import JobStatus
from aijobs.store.dead_letter_records import list_dead_letters
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

TEXT = "A sentence to summarise. Another one follows it here."


def _rename_summary_queues(stage: Stage) -> None:
    """Give `summary` a queue and DLQ named as CloudFormation would, in place of the readable ones."""
    resources = stage.resources
    dlq_url = stage.sqs.create_queue(QueueName="aijobs-prod-QueuesummaryDlq5E6F7A8B-Q9W8E7R6")["QueueUrl"]
    dlq_arn = stage.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(resources.config.max_receive_count)}
    url = stage.sqs.create_queue(
        QueueName="aijobs-prod-QueuesummaryQueue1A2B3C4D-X1Y2Z3",
        Attributes={"RedrivePolicy": json.dumps(redrive), "VisibilityTimeout": "0"},
    )["QueueUrl"]
    arn = stage.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    resources.queue_urls["summary"], resources.queue_arns["summary"] = url, arn
    resources.dlq_urls["summary"], resources.dlq_arns["summary"] = dlq_url, dlq_arn


def test_jobs_run_and_dead_letter_through_queues_with_generated_names(stage: Stage) -> None:
    _rename_summary_queues(stage)
    good = stage.submit("alice", "summary", TEXT)
    doomed = stage.submit("alice", "summary", "#fail:503 " + TEXT)
    list(stage.drain("summary"))
    assert stage.job(good).status is JobStatus.SUCCEEDED
    assert stage.provider.calls[good.job_id] == 1

    assert stage.dlq_mapping("summary").poll_once().received == 1
    (entry,) = list_dead_letters(aws.dynamodb().Table(stage.resources.meta_table), "summary")
    assert entry.job_id == doomed.job_id
    assert stage.job(doomed).status is JobStatus.FAILED_FINAL


def test_a_consumer_serves_only_the_queue_in_its_environment(stage: Stage) -> None:
    """Not a DLQ, nor another kind's queue, even one whose readable name says `summary`."""
    _rename_summary_queues(stage)
    job = stage.submit("alice", "summary", TEXT)
    (message,) = stage.receive(stage.resources.queue_urls["summary"])
    consumer = stage.consumer("summary")
    for foreign in (
        stage.resources.dlq_arns["summary"],
        "arn:aws:sqs:us-east-1:123456789012:aijobs-dev-summary",
        "arn:aws:sqs:us-east-1:123456789012:aijobs-dev-summary-dlq",
        stage.resources.queue_arns["embedding"],
    ):
        record = {
            "messageId": message["MessageId"], "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"], "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {}, "eventSource": "aws:sqs", "eventSourceARN": foreign,
            "awsRegion": "us-east-1", "md5OfBody": "",
        }  # fmt: skip
        assert consumer.handle({"Records": [record]}, None) == {"batchItemFailures": []}
    assert stage.provider.calls == {}
    assert stage.job(job).status is JobStatus.QUEUED
