"""DLQ consumer and operator re-runs, from a job that exhausts its retries to its re-run."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.errors import NotFoundError, TransitionConflict
from aijobs.operator import Operator
from aijobs.queues import JobQueues
from aijobs.store.dead_letter_records import list_dead_letters
from aijobs_cli.local.esm import LambdaContext, sqs_record
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration

TEXT = "A sentence to summarise. Another one follows it here."


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _operator(stage: Stage, sleeps: list[float] | None = None) -> Operator:
    return Operator(
        directory=stage.directory,
        queues=JobQueues(stage.sqs, stage.resources.queue_urls),
        clock=stage.clock,
        sleep=(sleeps.append if sleeps is not None else lambda _s: None),
    )


def _exhaust(stage: Stage, user: str = "alice", text: str = "#fail:503 " + TEXT) -> Any:
    job = stage.submit(user, "summary", text)
    list(stage.drain("summary"))
    return job


def test_exhausted_job_is_recorded_finalized_alerted_and_counted(
    stage: Stage, capfd: pytest.CaptureFixture[str]
) -> None:
    inbox = stage.subscribe_inbox()
    job = _exhaust(stage)
    capfd.readouterr()
    outcome = stage.dlq_mapping("summary").poll_once()
    assert (outcome.received, outcome.failed_ids) == (1, [])

    row = stage.job(job)
    assert (row.status, row.dead_lettered, row.last_error_class) == (
        JobStatus.FAILED_FINAL,
        True,
        "transient",
    )
    (entry,) = list_dead_letters(_meta(stage), "summary")
    assert (entry.job_id, entry.user_id, entry.attempts, entry.last_error_class) == (
        job.job_id,
        "alice",
        4,
        "transient",
    )
    (alert,) = stage.receive(inbox)
    detail = json.loads(json.loads(alert["Body"])["Message"])
    assert (detail["job_id"], detail["kind"]) == (job.job_id, "summary")
    emf = [json.loads(line) for line in capfd.readouterr().out.splitlines() if '"_aws"' in line]
    dead = [m for m in emf if "DeadLettered" in m]
    assert len(dead) == 1
    assert dead[0]["kind"] == "summary"
    assert dead[0]["DeadLettered"] in (1, 1.0, [1.0])
    # It never re-queues.
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    assert stage.receive(stage.resources.dlq_urls["summary"]) == []


def test_a_duplicate_dead_letter_delivery_alerts_once(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    job = _exhaust(stage)
    (message,) = stage.receive(stage.resources.dlq_urls["summary"])
    record = load_event("sqs-dlq-batch.json")["Records"][0]
    record |= {"body": message["Body"], "messageId": message["MessageId"]}
    record["eventSourceARN"] = stage.resources.dlq_arns["summary"]
    event = {"Records": [record]}
    consumer = stage.dead_letter_consumer()
    assert consumer.handle(event, LambdaContext("dlq")) == {"batchItemFailures": []}
    assert consumer.handle(event, LambdaContext("dlq")) == {"batchItemFailures": []}
    assert len(stage.receive(inbox)) == 1
    assert len(list_dead_letters(_meta(stage), "summary")) == 1
    assert stage.job(job).status is JobStatus.FAILED_FINAL


def test_a_late_copy_of_a_dead_letter_after_a_rerun_leaves_the_job_queued_and_pages_no_one(
    stage: Stage,
) -> None:
    inbox = stage.subscribe_inbox()
    job = _exhaust(stage)
    dlq_url = stage.resources.dlq_urls["summary"]
    (message,) = stage.sqs.receive_message(
        QueueUrl=dlq_url, AttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    event = {"Records": [sqs_record(message, stage.resources.dlq_arns["summary"])]}
    consumer = stage.dead_letter_consumer()
    assert consumer.handle(event, LambdaContext("dlq")) == {"batchItemFailures": []}
    (first,) = list_dead_letters(_meta(stage), "summary")
    _operator(stage).rerun("alice", job.job_id)

    # SQS delivers the same dead letter again (at-least-once), after the operator's re-run.
    assert consumer.handle(event, LambdaContext("dlq")) == {"batchItemFailures": []}
    row = stage.job(job)
    assert (row.status, row.attempts, row.dead_lettered) == (JobStatus.QUEUED, 0, False)
    # No new entry: the one dead letter, as the re-run left it (moved to the re-run part).
    (entry,) = list_dead_letters(_meta(stage), "summary")
    assert (entry.job_id, entry.message_id, entry.dead_lettered_at) == (
        first.job_id, first.message_id, first.dead_lettered_at,
    )  # fmt: skip
    assert entry.job_reruns == 1
    assert len(stage.receive(inbox)) == 1  # the first dead letter's alert only
    assert stage.depth(stage.resources.queue_urls["summary"]) == 1  # the re-run's message, no copy


def test_a_message_redriven_by_sqs_while_its_job_has_attempts_left_goes_back_to_its_queue(
    stage: Stage,
) -> None:
    inbox = stage.subscribe_inbox()
    job = stage.submit("alice", "summary", TEXT)
    stage.redrive("summary")  # its receives never reached the consumer (throttled, failed to start)
    outcome = stage.dlq_mapping("summary").poll_once()
    assert (outcome.received, outcome.failed_ids) == (1, [])

    row = stage.job(job)
    assert (row.status, row.attempts, row.dead_lettered) == (JobStatus.QUEUED, 0, False)
    assert list_dead_letters(_meta(stage), "summary") == []
    assert stage.receive(inbox) == []
    assert stage.depth(stage.resources.queue_urls["summary"]) == 1
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)


def test_a_message_redriven_by_sqs_after_the_budget_is_spent_finalizes_the_job(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    job = stage.submit("alice", "summary", TEXT)
    budget = stage.resources.config.queue_tuning("summary").max_attempts
    stage.set_attempts(job, budget)  # every attempt was spent (their consumers died)
    stage.redrive("summary")
    assert stage.dlq_mapping("summary").poll_once().failed_ids == []
    row = stage.job(job)
    assert (row.status, row.dead_lettered, row.last_error_class) == (
        JobStatus.FAILED_FINAL,
        True,
        "dead_lettered",
    )
    (entry,) = list_dead_letters(_meta(stage), "summary")
    assert (entry.job_id, entry.attempts) == (job.job_id, budget)
    assert len(stage.receive(inbox)) == 1
    assert stage.depth(stage.resources.queue_urls["summary"]) == 0


def test_an_unreadable_dead_letter_is_recorded_without_its_body(stage: Stage) -> None:
    stage.sqs.send_message(
        QueueUrl=stage.resources.dlq_urls["summary"], MessageBody="secret prompt, not json"
    )
    assert stage.dlq_mapping("summary").poll_once().failed_ids == []
    (entry,) = list_dead_letters(_meta(stage), "summary")
    assert entry.job_id.startswith("unreadable-")
    assert "secret" not in json.dumps(entry.model_dump())


def test_dlq_handler_entry_point_with_the_sample_event(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in stage.resources.dlq_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    from dlq_consumer import handler

    job = _exhaust(stage, user="user-demo")
    event = load_event("sqs-dlq-batch.json")
    event["Records"][0]["body"] = json.dumps({"jobId": job.job_id, "userId": "user-demo", "kind": "summary"})
    assert handler.handler(event, LambdaContext("aijobs-dev-dlq")) == {"batchItemFailures": []}
    assert stage.job(job).dead_lettered is True


def test_a_finished_job_is_never_run_again_without_an_operator(stage: Stage) -> None:
    job = _exhaust(stage)
    stage.dlq_mapping("summary").poll_once()
    calls = stage.provider.calls[job.job_id]
    stage.send(job)  # a stray copy of its message
    list(stage.drain("summary"))
    assert stage.provider.calls[job.job_id] == calls
    assert stage.job(job).status is JobStatus.FAILED_FINAL


def test_rerun_from_the_dlq_resets_the_budget_and_succeeds(stage: Stage) -> None:
    job = _exhaust(stage, text="#fail:503x4 " + TEXT)  # fails 4 times, would pass on a 5th attempt
    stage.dlq_mapping("summary").poll_once()
    queued = _operator(stage).rerun("alice", job.job_id)
    assert (queued.status, queued.attempts, queued.dead_lettered) == (JobStatus.QUEUED, 0, False)
    # Count without receiving: every receive spends one of the message's maxReceiveCount.
    attributes = stage.sqs.get_queue_attributes(
        QueueUrl=stage.resources.queue_urls["summary"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1"
    # `#fail:503x4` counts attempts, and the budget was reset: attempts 1-4 fail again, so the job
    # dead-letters again; a re-run is a fresh budget, not a bypass of the retry rules.
    list(stage.drain("summary"))
    assert stage.job(job).attempts == 4
    (again,) = stage.receive(stage.resources.dlq_urls["summary"])
    assert json.loads(again["Body"]) == {"jobId": job.job_id, "userId": "alice", "kind": "summary"}


def test_rerun_of_a_fixed_problem_succeeds(stage: Stage) -> None:
    job = _exhaust(stage, text="#fail:400 " + TEXT)
    assert stage.job(job).status is JobStatus.FAILED_FINAL
    store = stage.store_for("alice")
    fixed = stage.job(job).model_copy(update={"input": TEXT})
    store._table.update_item(  # the producer bug is fixed and the row's input corrected
        Key={"pk": "USER#alice", "sk": f"JOB#{job.job_id}"},
        UpdateExpression="SET input_json = :i",
        ExpressionAttributeValues={":i": json.dumps(fixed.input)},
    )
    _operator(stage).rerun("alice", job.job_id)
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)


def test_rerun_refuses_a_job_that_is_not_failed(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    with pytest.raises(TransitionConflict):
        _operator(stage).rerun("alice", job.job_id)
    with pytest.raises(NotFoundError):
        _operator(stage).rerun("alice", "01NOSUCHJOB")


def test_fail_final_stops_a_queued_job_from_running(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    finished = _operator(stage).fail_final("alice", job.job_id, "spam input")
    assert (finished.status, finished.last_error_class, finished.last_error_message) == (
        JobStatus.FAILED_FINAL, "operator", "spam input",
    )  # fmt: skip
    list(stage.drain("summary"))
    assert stage.provider.calls == {}


def test_batch_rerun_filters_counts_in_a_dry_run_and_is_rate_limited(stage: Stage) -> None:
    bad_input = [stage.submit(user, "summary", "#fail:400 " + TEXT) for user in ("alice", "bob", "carol")]
    too_large = stage.submit("alice", "summary", "#fail:413 " + TEXT)
    list(stage.drain("summary"))
    stage.clock.advance(3600)
    late = stage.submit("bob", "summary", "#fail:400 " + TEXT)
    list(stage.drain("summary"))
    window_end = stage.clock() - timedelta(minutes=30)
    sleeps: list[float] = []
    operator = _operator(stage, sleeps)

    dry = operator.rerun_batch("summary", error_class="invalid_input", until=window_end)
    assert (dry.matched, dry.rerun, dry.dry_run) == (3, [], True)
    assert stage.receive(stage.resources.queue_urls["summary"]) == []

    done = operator.rerun_batch(
        "summary", error_class="invalid_input", until=window_end, dry_run=False, rate_per_second=4
    )
    assert sorted(done.rerun) == sorted(job.job_id for job in bad_input)
    assert sleeps == [0.25, 0.25]
    assert stage.job(too_large).status is JobStatus.FAILED_FINAL
    assert stage.job(late).status is JobStatus.FAILED_FINAL
    assert all(stage.job(job).status is JobStatus.QUEUED for job in bad_input)
    assert len(stage.receive(stage.resources.queue_urls["summary"])) == 3


def test_a_batch_rerun_out_of_time_stops_and_names_what_it_did_not_reach(stage: Stage) -> None:
    """The API's function must answer before its timeout: a batch re-run stops with its margin
    left, leaves the rest as they were, and the same request takes them next time."""
    from aijobs.operator import RERUN_MARGIN_SECONDS

    bad = [stage.submit(user, "summary", "#fail:400 " + TEXT) for user in ("alice", "bob", "carol", "dave")]
    list(stage.drain("summary"))
    operator = _operator(stage, [])
    left = iter([60.0, 60.0, RERUN_MARGIN_SECONDS - 0.1])  # time for two re-runs, then none

    first = operator.rerun_batch(
        "summary", error_class="invalid_input", dry_run=False, seconds_left=lambda: next(left)
    )
    assert first.matched == 4
    assert len(first.rerun) == 2
    assert len(first.not_reached) == 2
    assert set(first.rerun) | set(first.not_reached) == {job.job_id for job in bad}
    by_id = {job.job_id: job for job in bad}
    assert all(stage.job(by_id[job_id]).status is JobStatus.QUEUED for job_id in first.rerun)
    assert all(stage.job(by_id[job_id]).status is JobStatus.FAILED_FINAL for job_id in first.not_reached)

    again = operator.rerun_batch(
        "summary", error_class="invalid_input", dry_run=False, seconds_left=lambda: 60.0
    )
    assert sorted(again.rerun) == sorted(first.not_reached)
    assert again.not_reached == []


def test_rerun_after_an_outage_succeeds(stage: Stage) -> None:
    job = _exhaust(stage, text="#outage " + TEXT)  # every attempt fails until an operator re-runs
    stage.dlq_mapping("summary").poll_once()
    assert stage.job(job).dead_lettered is True
    _operator(stage).rerun("alice", job.job_id)
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.attempts, row.reruns, row.dead_lettered) == (JobStatus.SUCCEEDED, 1, 1, False)


def test_an_entry_settled_from_a_stale_read_loses_to_a_newer_rerun(stage: Stage) -> None:
    """Two operators: one lists (reads the entry, then the row), the other re-runs meanwhile. The
    move made from the older read must not close an entry whose job runs again."""
    from aijobs.store.dead_letter_records import ListPart, mark_rerun, settle

    job = _exhaust(stage, text="#outage " + TEXT)
    stage.dlq_mapping("summary").poll_once()
    operator = _operator(stage)
    operator.rerun("alice", job.job_id)
    list(stage.drain("summary"))
    (stale,) = list_dead_letters(_meta(stage), "summary", parts=(ListPart.RERUN,))
    succeeded = stage.job(job)
    assert succeeded.status is JobStatus.SUCCEEDED
    # Another operator re-runs it again (as a workflow parent may be) before the move is written.
    mark_rerun(_meta(stage), succeeded.model_copy(update={"reruns": 2}), stage.clock())
    assert settle(_meta(stage), stale, succeeded, stage.clock()).resolution.value == "succeeded"
    assert list_dead_letters(_meta(stage), "summary", parts=(ListPart.RESOLVED,)) == []
    (entry,) = list_dead_letters(_meta(stage), "summary", parts=(ListPart.RERUN,))
    assert entry.job_reruns == 2
    # Read afresh, it settles; settled twice at once (two listings), it stays settled once.
    assert operator.open_dead_letters("summary") == 0
    settle(_meta(stage), entry, succeeded, stage.clock())
    (done,) = list_dead_letters(_meta(stage), "summary")
    assert (done.part, done.resolution) == (ListPart.RESOLVED, "succeeded")
    assert [s.resolution.value for s in operator.dead_letters(["summary"], include_resolved=True)] == [
        "succeeded"
    ]
    assert operator.dead_letters(["summary"]) == []
