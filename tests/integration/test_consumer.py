"""The partial-batch consumer against moto: every row of the retry table, duplicates, leases."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from aijobs.domain import JobStatus
from aijobs.errors import ProviderAuthError
from aijobs.kinds.registry import require
from aijobs.store.results import INLINE_RESULT_BYTES
from aijobs_cli.local.esm import LambdaContext, sqs_record
from tests.integration.harness import Stage, consumer_event, sqs_on

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer loads the row and calls the model."


def _event(stage: Stage, kind: str, messages: list[Any]) -> dict[str, Any]:
    return {"Records": [sqs_record(m, stage.resources.queue_arns[kind]) for m in messages]}


def test_emulated_records_have_the_shape_of_the_sample_event(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    (message,) = stage.receive(stage.resources.queue_urls["summary"])
    record = sqs_record(message, stage.resources.queue_arns["summary"])
    sample = consumer_event("summary")["Records"][0]
    assert set(record) == set(sample)
    assert set(record["attributes"]) == set(sample["attributes"])
    assert json.loads(record["body"]) == {"jobId": job.job_id, "userId": "alice", "kind": "summary"}


def _result_objects(stage: Stage, job_id: str) -> list[str]:
    listing = boto3.client("s3").list_objects_v2(Bucket=stage.resources.bucket, Prefix=f"results/{job_id}/")
    return sorted(obj["Key"] for obj in listing.get("Contents", []))


def _row_item(stage: Stage, user_id: str, job_id: str) -> dict[str, Any]:
    table = stage.store_for(user_id)._table
    item: dict[str, Any] = table.get_item(Key={"pk": f"USER#{user_id}", "sk": f"JOB#{job_id}"})["Item"]
    return item


def test_a_small_result_lives_on_its_row_only(stage: Stage) -> None:
    """A result document up to INLINE_RESULT_BYTES with no artifacts: no S3 object, no ref."""
    job = stage.submit("alice", "summary", TEXT)
    (outcome,) = stage.drain("summary")
    assert outcome.failed_ids == []
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.attempts == 1
    assert row.model == "local-text-1"
    assert row.result["output"]["summary"]
    assert row.result["artifacts"] == []
    assert len(json.dumps(row.result).encode()) <= INLINE_RESULT_BYTES
    assert row.result_ref is None
    assert _result_objects(stage, job.job_id) == []
    assert stage.receive(stage.resources.queue_urls["summary"]) == []


def test_a_large_result_is_stored_under_its_id(stage: Stage) -> None:
    """Above INLINE_RESULT_BYTES the document is `result.json` in S3 and the row keeps only its key."""
    job = stage.submit("alice", "embedding", "vector me", options={"dimensions": 256})
    (outcome,) = stage.drain("embedding")
    assert outcome.failed_ids == []
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.result_ref == f"results/{job.job_id}/main/result.json"
    assert row.result is None
    stored = boto3.client("s3").get_object(Bucket=stage.resources.bucket, Key=row.result_ref)
    body = stored["Body"].read()
    assert len(body) > INLINE_RESULT_BYTES
    assert json.loads(body)["output"]["dimensions"] == 256
    assert _result_objects(stage, job.job_id) == [row.result_ref]


def test_a_replayed_delivery_of_a_small_result_job_changes_nothing(stage: Stage) -> None:
    """At least once: the message again after the success finds the row final, writes nothing."""
    job = stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    before = _row_item(stage, "alice", job.job_id)
    stage.send(job)
    list(stage.drain("summary"))
    assert _row_item(stage, "alice", job.job_id) == before
    assert _result_objects(stage, job.job_id) == []
    assert stage.provider.calls == {job.job_id: 1}


def test_transient_failures_back_off_and_then_succeed(stage: Stage) -> None:
    job = stage.submit("alice", "summary", "#fail:503x2 " + TEXT)
    outcomes = list(stage.drain("summary"))
    assert [len(o.failed_ids) for o in outcomes] == [1, 1, 0]
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.attempts == 3
    assert row.last_error_class == "transient"


def test_a_failed_attempt_leaves_the_row_failed_retryable(stage: Stage) -> None:
    job = stage.submit("alice", "summary", "#fail:502x1 " + TEXT)
    outcome = stage.mapping("summary").poll_once()
    assert len(outcome.failed_ids) == 1
    row = stage.job(job)
    assert row.status is JobStatus.FAILED_RETRYABLE
    assert (row.attempts, row.last_error_class) == (1, "transient")
    assert row.lease_expires_at is None


def test_throttling_honours_retry_after(stage: Stage) -> None:
    # The local provider answers `#fail:429x1` with Retry-After: 1 s; the back-off setting is 0 here.
    # SQS on the test's clock: the message's hiding ends when the clock says, however slow the run.
    with sqs_on(stage.clock):
        job = stage.submit("alice", "summary", "#fail:429x1 " + TEXT)
        first = stage.mapping("summary").poll_once()
        assert len(first.failed_ids) == 1
        assert stage.job(job).last_error_class == "throttled"
        stage.clock.advance(0.5)  # the back-off (0 s) is over, Retry-After (1 s) is not
        assert stage.mapping("summary").poll_once().received == 0  # still hidden: Retry-After honoured
        stage.clock.advance(0.7)  # past Retry-After: for SQS and for the row's retry time alike
        assert stage.mapping("summary").poll_once().failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


@pytest.mark.parametrize(
    ("magic", "error_class"),
    [("#fail:413", "input_too_large"), ("#fail:400", "invalid_input")],
)
def test_permanent_failures_are_final_and_acknowledged(stage: Stage, magic: str, error_class: str) -> None:
    job = stage.submit("alice", "summary", f"{magic} {TEXT}")
    (outcome,) = stage.drain("summary")
    assert outcome.failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts, row.last_error_class) == (JobStatus.FAILED_FINAL, 1, error_class)
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    assert stage.receive(stage.resources.dlq_urls["summary"]) == []


def test_an_input_of_the_wrong_shape_is_final(stage: Stage) -> None:
    job = stage.submit("alice", "summary", {"prompt": "summary needs text"})
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.last_error_class) == (JobStatus.FAILED_FINAL, "invalid_input")


class RecordingControl:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []

    def set_enabled(self, function_name: str, queue_arn: str, *, enabled: bool) -> list[str]:
        self.calls.append((function_name, queue_arn, enabled))
        return ["esm-uuid"]


def test_provider_auth_failure_finalizes_the_job_pauses_the_consumer_and_alerts(stage: Stage) -> None:
    alerts_url = stage.subscribe_inbox()
    consumer = stage.consumer("summary")
    control = RecordingControl()
    consumer.control = control  # type: ignore[assignment]
    bad = stage.submit("alice", "summary", "#fail:401 " + TEXT)
    waiting = [stage.submit("alice", "summary", TEXT) for _ in range(2)]

    outcome = stage.mapping("summary").poll_once()

    assert stage.job(bad).status is JobStatus.FAILED_FINAL
    assert stage.job(bad).last_error_class == "provider_auth"
    assert control.calls == [("aijobs-dev-consumer-summary", stage.resources.queue_arns["summary"], False)]
    # The rest of the batch is not claimed and spends nothing: each is acknowledged and a fresh
    # copy waits in the queue for the resumed consumer (a returned record would spend a receive).
    assert outcome.failed_ids == []
    for job in waiting:
        assert (stage.job(job).status, stage.job(job).attempts) == (JobStatus.QUEUED, 0)
    # The copies are delayed past the time disabling the mapping takes to settle.
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    depth = stage.sqs.get_queue_attributes(
        QueueUrl=stage.resources.queue_urls["summary"], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert depth["ApproximateNumberOfMessagesDelayed"] == "2"
    (alert,) = stage.receive(alerts_url)
    detail = json.loads(json.loads(alert["Body"])["Message"])
    assert detail["kind"] == "summary"
    assert detail["mappingsDisabled"] == ["esm-uuid"]
    assert TEXT not in alert["Body"]


def test_unreadable_message_is_acknowledged_not_looped(stage: Stage) -> None:
    url = stage.resources.queue_urls["summary"]
    stage.sqs.send_message(QueueUrl=url, MessageBody="{not json")
    stage.sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps({"jobId": "x", "userId": "y", "prompt": "no"})
    )
    (outcome,) = stage.drain("summary")
    assert (outcome.received, outcome.failed_ids) == (2, [])
    assert stage.receive(url) == []


def test_missing_rows_and_finished_jobs_are_acknowledged(stage: Stage) -> None:
    done = stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    stage.send(done)  # a late duplicate of a finished job
    stage.sqs.send_message(
        QueueUrl=stage.resources.queue_urls["summary"],
        MessageBody=json.dumps({"jobId": "01NOSUCHJOB", "userId": "alice", "kind": "summary"}),
    )
    (outcome,) = stage.drain("summary")
    assert (outcome.received, outcome.failed_ids) == (2, [])
    assert stage.provider.calls[done.job_id] == 1


def test_partial_batch_response_lists_exactly_the_failed_messages(stage: Stage) -> None:
    jobs = [
        stage.submit("alice", "summary", TEXT),
        stage.submit("alice", "summary", "#fail:503x1 " + TEXT),
        stage.submit("bob", "summary", TEXT),
    ]
    messages = stage.receive(stage.resources.queue_urls["summary"])
    assert len(messages) == 3
    response = stage.consumer("summary").handle(_event(stage, "summary", messages), LambdaContext("fn"))
    failing = next(m["MessageId"] for m in messages if json.loads(m["Body"])["jobId"] == jobs[1].job_id)
    assert response == {"batchItemFailures": [{"itemIdentifier": failing}]}
    assert [stage.job(j).status for j in jobs] == [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED_RETRYABLE,
        JobStatus.SUCCEEDED,
    ]


def test_the_same_message_twice_in_one_batch_runs_the_provider_once(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    stage.send(job)
    outcome = stage.mapping("summary").poll_once()
    assert (outcome.received, outcome.failed_ids) == (2, [])
    assert stage.provider.calls == {job.job_id: 1}
    assert stage.job(job).attempts == 1


def test_two_concurrent_batches_with_one_job_run_the_provider_once(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    stage.send(job)
    first, second = stage.receive(stage.resources.queue_urls["summary"], count=1), []
    second = stage.receive(stage.resources.queue_urls["summary"], count=1)
    responses: list[Any] = []

    def deliver_second_batch_meanwhile(_request: Any) -> None:
        # While batch one holds the claim, batch two arrives on another consumer instance.
        other = stage.consumer("summary")
        responses.append(other.handle(_event(stage, "summary", second), LambdaContext("fn-2")))

    stage.provider.before_run = deliver_second_batch_meanwhile
    response = stage.consumer("summary").handle(_event(stage, "summary", first), LambdaContext("fn-1"))
    assert response == {"batchItemFailures": []}
    assert responses == [{"batchItemFailures": []}]
    assert stage.provider.calls == {job.job_id: 1}
    assert (stage.job(job).status, stage.job(job).attempts) == (JobStatus.SUCCEEDED, 1)


def test_a_crash_between_claim_and_finish_is_recovered_after_the_lease(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    consumer = stage.consumer("summary")
    # A consumer claims the job and dies (timeout, out of memory) before finishing it.
    crashed = stage.store_for("alice").claim(job, now=stage.clock(), lease=consumer.lease, max_attempts=4)
    assert crashed is not None
    assert stage.mapping("summary").poll_once().failed_ids == []  # live lease: acknowledged
    assert stage.job(job).status is JobStatus.RUNNING
    assert stage.provider.calls == {}

    stage.clock.advance(consumer.lease.total_seconds() + 1)
    stage.send(job)  # the dead consumer's message reappears after its visibility timeout
    assert stage.mapping("summary").poll_once().failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_the_attempt_cap_sends_the_message_to_the_dlq(stage: Stage) -> None:
    job = stage.submit("alice", "summary", "#fail:503 " + TEXT)  # fails on every attempt
    outcomes = list(stage.drain("summary"))
    assert [len(o.failed_ids) for o in outcomes] == [1, 1, 1, 0]  # the 4th attempt is acknowledged...
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.FAILED_RETRYABLE, 4)
    (dead,) = stage.receive(stage.resources.dlq_urls["summary"])  # ...and handed to the DLQ
    assert json.loads(dead["Body"]) == {"jobId": job.job_id, "userId": "alice", "kind": "summary"}
    # One call per attempt, and from the kind's patience on one more on its fallback model.
    patience = require("summary").patience
    assert stage.provider.calls[job.job_id] == 4 + (4 - patience + 1)


def test_a_provider_still_running_is_rechecked_without_spending_attempts(stage: Stage) -> None:
    job = stage.submit("alice", "video-generate", "#running:3 a cat surfing")
    outcomes = list(stage.drain("video-generate"))
    # Each check is a new delayed message received once: no receive count grows toward the DLQ.
    assert [(o.received, o.failed_ids) for o in outcomes] == [(1, [])] * 4
    row = stage.job(job)
    assert row.status is JobStatus.SUCCEEDED
    assert row.attempts == 1
    assert row.provider_checks == 3
    assert row.result["output"]["frames"] == 4
    assert len(row.result["artifacts"]) == 4


def test_while_awaiting_its_provider_a_job_stays_running_with_a_recheck_message(stage: Stage) -> None:
    job = stage.submit("alice", "tts-generate", "#running:1 " + TEXT)
    stage.mapping("tts-generate").poll_once()
    row = stage.job(job)
    assert (row.status, row.awaiting_provider, row.attempts) == (JobStatus.RUNNING, True, 1)
    (recheck,) = stage.receive(stage.resources.queue_urls["tts-generate"])
    body = json.loads(recheck["Body"])
    assert body == {"jobId": job.job_id, "userId": "alice", "kind": "tts-generate", "check": row.recheck_id}
    assert row.recheck_id
    assert recheck["Attributes"]["ApproximateReceiveCount"] == "1"


def test_records_from_an_unknown_queue_are_acknowledged(stage: Stage) -> None:
    event = consumer_event("summary")
    for record in event["Records"]:
        record["eventSourceARN"] = "arn:aws:sqs:us-east-1:123456789012:aijobs-dev-unknown-kind"
    response = stage.consumer("summary").handle(event, LambdaContext("fn"))
    assert response == {"batchItemFailures": []}
    assert stage.provider.calls == {}


def test_a_replayed_job_overwrites_the_same_result_keys(stage: Stage) -> None:
    job = stage.submit("alice", "image-generate", "a red barn at dusk")
    list(stage.drain("image-generate"))
    s3 = boto3.client("s3")
    listing = s3.list_objects_v2(Bucket=stage.resources.bucket, Prefix=f"results/{job.job_id}/")
    first = sorted(obj["Key"] for obj in listing["Contents"])
    assert first == [f"results/{job.job_id}/main/image.png", f"results/{job.job_id}/main/result.json"]
    store = stage.store_for("alice")
    store.requeue(stage.job(job), now=stage.clock(), allowed_from=[JobStatus.SUCCEEDED])
    stage.send(job)
    list(stage.drain("image-generate"))
    listing = s3.list_objects_v2(Bucket=stage.resources.bucket, Prefix=f"results/{job.job_id}/")
    assert sorted(obj["Key"] for obj in listing["Contents"]) == first
    assert stage.provider.calls[job.job_id] == 2


def test_every_kind_produces_its_result(stage: Stage) -> None:
    s3 = boto3.client("s3")
    image = stage.submit("alice", "image-generate", "a blue lake")
    list(stage.drain("image-generate"))
    png = s3.get_object(Bucket=stage.resources.bucket, Key=f"results/{image.job_id}/main/image.png")[
        "Body"
    ].read()
    s3.put_object(Bucket=stage.resources.bucket, Key="inputs/alice/lake.png", Body=png)
    jobs = {
        "summary": stage.submit("alice", "summary", TEXT),
        "embedding": stage.submit("alice", "embedding", "vector me"),
        "tts-generate": stage.submit("alice", "tts-generate", "hello there"),
        "image-caption": stage.submit("alice", "image-caption", None, input_ref="inputs/alice/lake.png"),
        "video-generate": stage.submit("alice", "video-generate", {"prompt": "waves"}),
    }
    for kind in jobs:
        list(stage.drain(kind))
    rows = {kind: stage.job(job) for kind, job in jobs.items()}
    assert all(row.status is JobStatus.SUCCEEDED for row in rows.values()), {
        k: (r.status, r.last_error_message) for k, r in rows.items()
    }
    assert rows["embedding"].result["output"]["dimensions"] == 64
    assert rows["tts-generate"].result["artifacts"] == [
        f"results/{jobs['tts-generate'].job_id}/main/speech.wav"
    ]
    assert "blue" in rows["image-caption"].result["output"]["caption"]


def test_consumer_control_disables_and_enables_the_mapping(stage: Stage) -> None:
    from aijobs.consumer.control import ConsumerControl

    iam = boto3.client("iam")
    role = iam.create_role(RoleName="consumer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    awslambda = boto3.client("lambda")
    awslambda.create_function(
        FunctionName="consumer-summary", Runtime="python3.12", Role=role, Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )  # fmt: skip
    other_queue = stage.resources.queue_arns["embedding"]
    for arn in (stage.resources.queue_arns["summary"], other_queue):
        awslambda.create_event_source_mapping(
            EventSourceArn=arn, FunctionName="consumer-summary", Enabled=False
        )
    control = ConsumerControl(awslambda)
    (uuid,) = control.set_enabled("consumer-summary", stage.resources.queue_arns["summary"], enabled=True)
    mappings = {m["UUID"]: m for m in awslambda.list_event_source_mappings()["EventSourceMappings"]}
    assert mappings[uuid]["State"] == "Enabled"
    assert [m["State"] for u, m in mappings.items() if u != uuid] == ["Disabled"]
    control.set_enabled("consumer-summary", stage.resources.queue_arns["summary"], enabled=False)
    assert awslambda.get_event_source_mapping(UUID=uuid)["State"] == "Disabled"


def test_auth_error_type_is_final() -> None:
    assert ProviderAuthError("x").retryable is False


def test_a_result_without_cost_model_or_output_is_stored(stage: Stage) -> None:
    # Found by the ledger property test: None fields must become REMOVEs, not unused names.
    job = stage.submit("alice", "summary", TEXT)
    store = stage.store_for("alice")
    claimed = store.claim(job, now=stage.clock(), lease=stage.consumer("summary").lease, max_attempts=4)
    assert claimed is not None
    done = store.succeed(
        claimed, now=stage.clock(), result=None, result_ref=None, model=None, usage={}, cost=None
    )
    assert (done.status, done.cost, done.result) == (JobStatus.SUCCEEDED, None, None)
