"""Write-sharded index partitions (docs/operations/scale.md): every reader sees what one partition would
have shown, in the same order and within the same limits, across buckets, legacy rows and a
change of the bucket count."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from aijobs.domain import Job, JobStatus
from aijobs.ids import new_job_id
from aijobs.store.jobs import JobStore
from aijobs.store.keys import SHARD_INDEXES, IndexBuckets, kind_status_pk
from aijobs_cdk.stage_config import ConfigError, parse_stage_config
from aijobs_cli.local.resources import _create_table
from tests.integration.harness import Clock

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def table() -> Iterator[Any]:
    with mock_aws():
        _create_table(boto3.client("dynamodb", region_name="us-east-1"), "shard", SHARD_INDEXES, set())
        yield boto3.resource("dynamodb", region_name="us-east-1").Table("shard")


def _job(user: str, kind: str, at: datetime, status: JobStatus = JobStatus.FAILED_FINAL) -> Job:
    return Job(
        job_id=new_job_id(int(at.timestamp() * 1000)), user_id=user, kind=kind, status=status,
        input="x", provider="local", created_at=at, updated_at=at,
    )  # fmt: skip


def _write_jobs(store: JobStore, count: int, kind: str = "summary") -> list[Job]:
    jobs = [_job(f"user-{i % 7}", kind, START + timedelta(seconds=i)) for i in range(count)]
    for job in jobs:
        store.create(job)
    return jobs


def _legacy(table: Any, job: Job) -> None:
    """A row as written before write sharding: the unsuffixed `by_kind_status` partition."""
    table.update_item(
        Key={"pk": f"USER#{job.user_id}", "sk": f"JOB#{job.job_id}"},
        UpdateExpression="SET gsi2pk = :pk",
        ExpressionAttributeValues={":pk": kind_status_pk(job.kind, job.status.value)},
    )


def test_rows_spread_over_the_buckets_and_readers_keep_order_and_limit(table: Any) -> None:
    store = JobStore(table, Clock(), buckets=IndexBuckets(write=8))
    jobs = _write_jobs(store, 40)
    partitions = {table.get_item(Key={"pk": f"USER#{j.user_id}", "sk": f"JOB#{j.job_id}"})["Item"]["gsi2pk"]
                  for j in jobs}  # fmt: skip
    assert len(partitions) > 4  # spread, not one partition
    assert all(p.startswith("KIND#summary#STATUS#failed_final#") for p in partitions)
    expected = [j.job_id for j in jobs]  # created one second apart: oldest first
    found = store.query_kind_status("summary", JobStatus.FAILED_FINAL)
    assert [j.job_id for j in found] == expected
    for limit in (1, 7, 39, 40, 100):
        limited = store.query_kind_status("summary", JobStatus.FAILED_FINAL, limit=limit)
        assert [j.job_id for j in limited] == expected[:limit]
    after, before = START + timedelta(seconds=10), START + timedelta(seconds=20)
    window = store.query_kind_status("summary", JobStatus.FAILED_FINAL, after=after, before=before, limit=5)
    assert [j.job_id for j in window] == expected[10:15]
    assert store.query_kind_status("summary", JobStatus.FAILED_FINAL, limit=0) == []


def test_legacy_rows_and_a_changed_bucket_count_stay_visible(table: Any) -> None:
    wide = JobStore(table, Clock(), buckets=IndexBuckets(write=16))
    jobs = _write_jobs(wide, 30)
    for job in jobs[::5]:  # some rows from before write sharding
        _legacy(table, job)
    expected = [j.job_id for j in jobs]
    # Lowering 16 -> 4: writers use 4 buckets, readers keep covering the 16 old ones.
    lowering = JobStore(table, Clock(), buckets=IndexBuckets(write=4, read=16))
    assert [j.job_id for j in lowering.query_kind_status("summary", JobStatus.FAILED_FINAL)] == expected
    assert [j.job_id for j in lowering.query_kind_status("summary", JobStatus.FAILED_FINAL, limit=9)] == (
        expected[:9]
    )
    # Reading only the new count too early would lose rows: why INDEX_BUCKETS_READ exists.
    too_early = JobStore(table, Clock(), buckets=IndexBuckets(write=4))
    assert len(too_early.query_kind_status("summary", JobStatus.FAILED_FINAL)) < len(expected)
    # A status change moves a row (legacy or not) into a bucket of the current count.
    moved = lowering.requeue(jobs[0], now=START + timedelta(hours=1), allowed_from=(JobStatus.FAILED_FINAL,))
    item = table.get_item(Key={"pk": f"USER#{moved.user_id}", "sk": f"JOB#{moved.job_id}"})["Item"]
    assert item["gsi2pk"] == IndexBuckets(write=4).partition(
        kind_status_pk("summary", "queued"), moved.job_id
    )


def test_expiry_and_transaction_clean_up_take_the_earliest_across_buckets(table: Any) -> None:
    clock = Clock()
    ledger = JobStore(table, clock, buckets=IndexBuckets(write=8)).ledger
    # 30 grants of 9 users, expiring 1..30 hours from now in a shuffled order.
    expiries = [clock() + timedelta(hours=1 + (i * 7) % 30) for i in range(30)]
    grants = {ledger.grant(f"user-{i % 9}", 5, at): at for i, at in enumerate(expiries)}
    by_expiry = sorted(grants, key=lambda grant_id: grants[grant_id])
    clock.advance(86_400 * 2)
    now = clock()
    assert [g.grant_id for g in ledger.due_grants(now, 20)] == by_expiry[:20]
    assert ledger.expire_due(now, limit=20) == 20
    assert [g.grant_id for g in ledger.due_grants(now, 20)] == by_expiry[20:]
    assert ledger.expire_due(now, limit=20) == 10
    assert ledger.expire_due(now, limit=20) == 0
    # 30 grant and 30 expire transactions: the oldest go first, `limit` per run.
    everything = table.scan(FilterExpression="begins_with(sk, :tx)", ExpressionAttributeValues={":tx": "TX#"})
    oldest_first = sorted(str(item["gsi3sk"]) for item in everything["Items"])
    assert len(oldest_first) == 60
    later = now + timedelta(seconds=1)
    assert [str(item["gsi3sk"]) for item in ledger.old_transactions(later, 25)] == oldest_first[:25]
    assert ledger.cleanup_transactions(later, limit=25) == 25
    assert [str(item["gsi3sk"]) for item in ledger.old_transactions(later, 100)] == oldest_first[25:]
    assert ledger.cleanup_transactions(later, limit=100) == 35


def test_bucket_counts_are_checked() -> None:
    assert IndexBuckets(write=8).partitions("TX") == ("TX", *(f"TX#{b}" for b in range(8)))
    assert IndexBuckets(write=2, read=4).partitions("GRANT") == (
        "GRANT",
        "GRANT#0",
        "GRANT#1",
        "GRANT#2",
        "GRANT#3",
    )
    assert IndexBuckets(write=8).bucket("01J0000000000000000000000X") == IndexBuckets(write=8).bucket(
        "01J0000000000000000000000X"
    )
    with pytest.raises(ValueError, match="INDEX_BUCKETS=0"):
        IndexBuckets(write=0)
    with pytest.raises(ValueError, match="INDEX_BUCKETS_READ=4"):
        IndexBuckets(write=8, read=4)
    base = {"QUEUE_NAMES": "summary", "PROVIDER": "local"}
    assert parse_stage_config("dev", base).table_settings_env() == {
        "INDEX_BUCKETS": "8",
        "INDEX_BUCKETS_READ": "8",
    }
    lowering = parse_stage_config("dev", {**base, "INDEX_BUCKETS": "4", "INDEX_BUCKETS_READ": "16"})
    assert lowering.table_settings_env() == {"INDEX_BUCKETS": "4", "INDEX_BUCKETS_READ": "16"}
    with pytest.raises(ConfigError, match="INDEX_BUCKETS_READ=4 must be at least INDEX_BUCKETS=8"):
        parse_stage_config("dev", {**base, "INDEX_BUCKETS_READ": "4"})
    with pytest.raises(ConfigError, match="INDEX_BUCKETS=65 is outside 1-64"):
        parse_stage_config("dev", {**base, "INDEX_BUCKETS": "65"})
