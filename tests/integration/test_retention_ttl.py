"""Finished jobs carry their own retention as a DynamoDB TTL (aijobs.store.retention): removal that
keeps up at any rate, where the */10 run's 100 rows per shard would fall behind past about 0.17
jobs per second (docs/operations/scale.md). The run's clean-up stays as the backstop."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest

from aijobs.domain import Job, JobStatus
from aijobs.operator import Operator
from aijobs.queues import JobQueues
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, job_sk, user_pk
from aijobs.store.retention import RETENTION_CACHE_SECONDS, RetentionReader, write_retention
from aijobs.store.tenants import API_KEY_CACHE_SECONDS, Directory, Principal
from tests.aws_calls import recording_calls
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _row(stage: Stage, job: Job) -> dict[str, Any]:
    table = stage.directory.shard_for(job.user_id)
    assert table is not None
    item: dict[str, Any] = table.get_item(Key={PK: user_pk(job.user_id), SK: job_sk(job.job_id)})["Item"]
    return item


def _expires(finished_at: datetime | None, days: int) -> int:
    assert finished_at is not None
    return int((finished_at + timedelta(days=days)).timestamp())


def _run(stage: Stage, job: Job) -> Job:
    list(stage.drain(job.kind))
    return stage.job(job)


def test_a_finished_job_expires_by_ttl_after_the_configured_retention(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=7)
    done = _run(stage, stage.submit("alice", "summary", "a short text to summarize"))
    assert done.status is JobStatus.SUCCEEDED
    assert int(_row(stage, done)[TTL_ATTRIBUTE]) == _expires(done.finished_at, 7)

    failed = _run(stage, stage.submit("alice", "summary", "#fail:400 refused input"))
    assert failed.status is JobStatus.FAILED_FINAL
    assert int(_row(stage, failed)[TTL_ATTRIBUTE]) == _expires(failed.finished_at, 7)


def test_a_rerun_job_loses_its_ttl_until_it_finishes_again(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=3)
    failed = _run(stage, stage.submit("alice", "summary", "#fail:400 refused input"))
    assert TTL_ATTRIBUTE in _row(stage, failed)

    operator = Operator(stage.directory, JobQueues(stage.sqs, stage.resources.queue_urls), stage.clock)
    requeued = operator.rerun("alice", failed.job_id)
    assert requeued.status is JobStatus.QUEUED
    assert TTL_ATTRIBUTE not in _row(stage, requeued)  # a queued job must never expire under a user

    stage.clock.advance(3600)
    again = _run(stage, requeued)
    assert again.status is JobStatus.FAILED_FINAL
    assert int(_row(stage, again)[TTL_ATTRIBUTE]) == _expires(again.finished_at, 3)


def test_without_retention_configured_a_job_still_finishes_and_waits_for_the_backstop(stage: Stage) -> None:
    done = _run(stage, stage.submit("alice", "summary", "a short text to summarize"))
    assert done.status is JobStatus.SUCCEEDED
    assert TTL_ATTRIBUTE not in _row(stage, done)


def test_a_container_reads_retention_once_per_cache_period(stage: Stage) -> None:
    meta = _meta(stage)
    now = [0.0]
    reads: list[str] = []
    meta.meta.client.meta.events.register("before-call.dynamodb.GetItem", lambda **_: reads.append("get"))
    retention = RetentionReader(meta, monotonic=lambda: now[0]).tasks

    assert retention() is None  # not configured: no TTL, and no read per job either
    write_retention(meta, credit_tx_retention_days=30, ai_task_retention_days=5)
    assert retention() is None
    assert len(reads) == 1

    now[0] += RETENTION_CACHE_SECONDS
    assert retention() == timedelta(days=5)
    write_retention(meta, credit_tx_retention_days=30, ai_task_retention_days=9)
    assert retention() == timedelta(days=5)
    assert len(reads) == 2
    now[0] += RETENTION_CACHE_SECONDS
    assert retention() == timedelta(days=9)


def _fresh_directory(stage: Stage, now: list[float]) -> Directory:
    """A new container's directory, its caches on the test's monotonic clock."""
    directory = Directory(_meta(stage), stage.directory.shard_tables, buckets=stage.directory.buckets)
    directory._monotonic = lambda: now[0]
    directory.retention = RetentionReader(directory.meta, monotonic=lambda: now[0])
    return directory


def test_a_containers_first_tenant_lookup_brings_the_retention_in_the_same_request(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=5)
    key = stage.directory.create_api_key("alice")
    stage.directory.ensure_user("bob")
    now = [0.0]
    with recording_calls() as log:
        directory = _fresh_directory(stage, now)  # its clients are recorded
        assert directory.authenticate(key) == Principal("alice")
        assert directory.retention.tasks() == timedelta(days=5)
        assert log.calls == [("dynamodb", "BatchGetItem")]

        log.clear()  # trusted for its cache time: lookups are single reads again
        assert directory.profile("bob") is not None
        assert log.calls == [("dynamodb", "GetItem")]

        # Then the next lookup refreshes it on the way.
        write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=9)
        now[0] += RETENTION_CACHE_SECONDS + API_KEY_CACHE_SECONDS
        log.clear()
        assert directory.profile("alice") is not None
        assert directory.retention.tasks() == timedelta(days=9)
        assert log.calls == [("dynamodb", "BatchGetItem")]


def test_keys_left_unprocessed_by_the_batch_are_read_alone_or_left_due(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BatchGetItem may return keys unprocessed (throttling): the tenant's item is then read with a
    GetItem, and the retention stays due for the next lookup instead of being taken as missing."""
    write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=5)
    key = stage.directory.create_api_key("alice")
    directory = _fresh_directory(stage, [0.0])
    table = directory.meta.name

    def throttled(RequestItems: dict[str, Any]) -> dict[str, Any]:
        return {"Responses": {table: []}, "UnprocessedKeys": RequestItems}

    monkeypatch.setattr(directory.meta.meta.client, "batch_get_item", throttled)
    assert directory.authenticate(key) == Principal("alice")
    assert directory.retention.due()
    monkeypatch.undo()
    assert directory.retention.tasks() == timedelta(days=5)
