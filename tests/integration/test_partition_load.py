"""A synthetic load through the real store code on moto, with every write's partitions recorded:
no partition key that several tenants write to takes more than its bucket's share (issue 15).

Each successful write is counted where DynamoDB bills it: the table partition of the item, and
each index partition whose entry it puts or deletes (a changed index key is a delete in the old
partition and a put in the new one; an unchanged key still rewrites the entry). The counts per
1,000 jobs are written as JSON (`AIJOBS_PARTITION_TRACE`, else the test's temporary directory)
for the capacity model.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws

from aijobs.domain import Job, JobStatus
from aijobs.ids import new_job_id
from aijobs.store.jobs import JobStore
from aijobs.store.keys import SHARD_INDEXES, IndexBuckets
from aijobs_cli.resources import _create_table
from tests.integration.harness import Clock

pytestmark = pytest.mark.integration

BUCKETS = 8
JOBS = int(os.environ.get("SIM_JOBS", "400"))
TENANTS = 40
KINDS = ("summary", "embedding", "image-generate", "tts-generate")
TABLE = "shard"
_BUCKETED = re.compile(r"^(?P<base>KIND#[^#]+#STATUS#[a-z_]+|GRANT|TX)#(?P<bucket>\d+)$")


class PartitionRecorder:
    """Counts writes per (table or index, partition key), and which tenants wrote each."""

    def __init__(self) -> None:
        self.writes: Counter[tuple[str, str]] = Counter()
        self.tenants: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        # Writes per item: an item's index entry always lands in the same bucket (its id's).
        self.items: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call.dynamodb", self._before)
        client.meta.events.register("after-call.dynamodb", self._after)

    @staticmethod
    def _keys(operation: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        if operation == "TransactWriteItems":
            found = []
            for entry in body["TransactItems"]:
                ((kind, item),) = entry.items()
                if kind != "ConditionCheck":
                    key = item["Item"] if kind == "Put" else item["Key"]
                    found.append({"pk": key["pk"], "sk": key["sk"]})
            return found
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            key = body["Item"] if operation == "PutItem" else body["Key"]
            return [{"pk": key["pk"], "sk": key["sk"]}]
        return []  # reads

    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        body = json.loads(params["body"] or b"{}")
        keys = self._keys(model.name, body)
        context["partition_recorder"] = [(key, _stored(key)) for key in keys]

    def _after(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        if http_response.status_code >= 300:
            return  # refused: nothing written (a failed condition still bills the table; not counted)
        for key, old in context.get("partition_recorder", []):
            new = _stored(key)
            if old == new:
                continue
            tenant, item = str(key["pk"]["S"]).removeprefix("USER#"), str(key["sk"]["S"])
            self._count("table", str(key["pk"]["S"]), tenant, item)
            for index, (pk_attr, sk_attr) in SHARD_INDEXES.items():
                before, after = _index_key(old, pk_attr, sk_attr), _index_key(new, pk_attr, sk_attr)
                if before is not None and before != after:
                    self._count(index, before, tenant, item)  # the old entry is deleted
                if after is not None:
                    self._count(index, after, tenant, item)  # the new or changed entry is written

    def _count(self, where: str, partition: str, tenant: str, item: str) -> None:
        self.writes[(where, partition)] += 1
        self.tenants[(where, partition)].add(tenant)
        self.items[(where, partition)][item] += 1


def _stored(key: dict[str, Any]) -> dict[str, Any] | None:
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType

    table = dynamodb_backends["123456789012"]["us-east-1"].tables[TABLE]
    item = table.get_item(DynamoType(key["pk"]), DynamoType(key["sk"]))
    return None if item is None else dict(item.to_json()["Attributes"])


def _index_key(item: dict[str, Any] | None, pk_attr: str, sk_attr: str) -> str | None:
    """The item's partition in an index, or None when it is not in the index (sparse)."""
    if item is None or pk_attr not in item or sk_attr not in item:
        return None
    return str(item[pk_attr]["S"])


@pytest.fixture
def store() -> Iterator[tuple[JobStore, Clock, PartitionRecorder]]:
    with mock_aws():
        _create_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE, SHARD_INDEXES, set())
        # The store's own code on a client that skips request validation (a third of its time here).
        resource = boto3.resource(
            "dynamodb", region_name="us-east-1", config=Config(parameter_validation=False)
        )
        table = resource.Table(TABLE)
        recorder = PartitionRecorder()
        recorder.attach(table.meta.client)
        clock = Clock()
        yield JobStore(table, clock, buckets=IndexBuckets(write=BUCKETS)), clock, recorder


def _drive(store: JobStore, clock: Clock) -> None:
    """Grants, then JOBS submits over TENANTS (skewed: tenant i weighs 1/(i+1)) and KINDS, each
    claimed and finished (80% succeed, 10% retry once then succeed, 10% fail and are refunded),
    with the */10 maintenance's expiry and transaction clean-up running along."""
    rng = random.Random(15)
    ledger = store.ledger
    tenants = [f"tenant-{i:02d}" for i in range(TENANTS)]
    for tenant in tenants:
        ledger.grant(tenant, 10_000, clock() + timedelta(days=30))
        for hours in (1, 2):  # small grants that expire during the run
            ledger.grant(tenant, 1, clock() + timedelta(hours=hours, seconds=rng.random()))
    weights = [1 / (i + 1) for i in range(TENANTS)]
    lease = timedelta(minutes=5)
    for number in range(JOBS):
        clock.advance(25)  # 400 jobs over ~3 hours of simulated time
        now = clock()
        tenant = rng.choices(tenants, weights)[0]
        job = Job(
            job_id=new_job_id(int(now.timestamp() * 1000)), user_id=tenant, kind=rng.choice(KINDS),
            status=JobStatus.QUEUED, input="x", provider="local", created_at=now, updated_at=now, price=1,
        )  # fmt: skip
        writes, allocation = ledger.reserve(tenant, job.job_id, 1)
        job = job.model_copy(update={"charge_state": "reserved", "charge_allocation": allocation})
        store.create(job, extra_writes=writes)
        claimed = store.claim(job, now=clock(), lease=lease, max_attempts=3)
        assert claimed is not None
        outcome = rng.random()
        if outcome < 0.1:
            store.fail_final(claimed, now=clock(), error_class="invalid_input", message="bad input")
            continue
        if outcome < 0.2:
            store.fail_retryable(claimed, now=clock(), error_class="transient", message="blip")
            claimed = store.claim(claimed, now=clock(), lease=lease, max_attempts=3)
            assert claimed is not None
        store.succeed(
            claimed, now=clock(), result={"ok": True}, result_ref=None, model=None, usage={}, cost=None
        )
        if number % 24 == 23:  # a */10 maintenance run
            ledger.expire_due(clock(), limit=20)
            ledger.cleanup_transactions(clock() - timedelta(hours=1), limit=100)


def test_no_partition_shared_by_tenants_takes_more_than_its_bucket_share(
    store: tuple[JobStore, Clock, PartitionRecorder], tmp_path: Path
) -> None:
    job_store, clock, recorder = store
    _drive(job_store, clock)

    groups: defaultdict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    squares: Counter[tuple[str, str]] = Counter()  # per group: the sum of each item's writes squared
    for (where, partition), count in recorder.writes.items():
        tenants = recorder.tenants[(where, partition)]
        if partition.startswith("USER#"):  # a tenant's own partition: bounded per tenant (README "Scale")
            assert tenants == {partition.split("#")[1]}, f"{where} {partition} written by {tenants}"
            continue
        bucketed = _BUCKETED.match(partition)
        assert where in ("by_kind_status", "by_due"), f"{where} {partition} is shared by tenants"
        assert bucketed, f"{where} {partition} is shared by tenants and not write-sharded"
        assert int(bucketed["bucket"]) < BUCKETS
        groups[(where, bucketed["base"])][int(bucketed["bucket"])] += count
        squares[(where, bucketed["base"])] += sum(w * w for w in recorder.items[(where, partition)].values())
    assert {base for _, base in groups} >= {"GRANT", "TX", "KIND#summary#STATUS#succeeded"}

    # The unit that is hashed is an item (a job, a grant, a transaction): item i, written w_i
    # times in a group of n writes, lands all of them in one bucket with p = 1/BUCKETS (crc32 of
    # random ids). A bucket's count has mean n*p and variance p*(1-p)*sum(w_i^2); six standard
    # deviations above the mean is crossed by chance about once in 10^9 per bucket. A job writes a
    # kind/status key once or twice (w_i <= 2), so those bounds are tight: the busiest of 8 buckets
    # within about 6 * sqrt(n / 4) of n / 8. A grant is rewritten on every debit of its tenant, so
    # the GRANT buckets follow the (skewed) tenants and get the wider bound their weights imply.
    checked = 0
    p = 1 / BUCKETS
    for (where, base), buckets in groups.items():
        n = sum(buckets.values())
        if n < 100:
            continue
        checked += 1
        ceiling = n * p + 6 * math.sqrt(p * (1 - p) * squares[(where, base)])
        assert max(buckets.values()) <= ceiling, f"{where} {base}: {dict(buckets)} over {ceiling:.0f} of {n}"
    assert checked >= 10

    trace = _trace(recorder)
    target = Path(os.environ.get("AIJOBS_PARTITION_TRACE") or tmp_path / "partition-trace.json")
    target.write_text(json.dumps(trace, indent=2, sort_keys=True) + "\n")
    assert trace["max_writes_per_1000_jobs"]["by_due"]["TX#<b>"] > 0


def _template(partition: str) -> str:
    """A partition key with its tenant and bucket replaced: the shape a capacity model sizes."""
    partition = re.sub(r"^USER#[^#]+", "USER#<userId>", partition)
    return re.sub(r"#\d+$", "#<b>", partition) if _BUCKETED.match(partition) else partition


def _trace(recorder: PartitionRecorder) -> dict[str, Any]:
    """Writes per partition key per 1,000 jobs; per key shape (tenant and bucket left out): the
    total over its partitions, how many partitions and the busiest one."""
    scale = 1000 / JOBS
    per_partition: dict[str, dict[str, float]] = defaultdict(dict)
    busiest: dict[str, dict[str, float]] = defaultdict(dict)
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    partitions: dict[str, Counter[str]] = defaultdict(Counter)
    for (where, partition), count in sorted(recorder.writes.items()):
        per_1000 = round(count * scale, 3)
        per_partition[where][partition] = per_1000
        shape = _template(partition)
        busiest[where][shape] = max(busiest[where].get(shape, 0.0), per_1000)
        totals[where][shape] += count
        partitions[where][shape] += 1
    return {
        "jobs": JOBS,
        "tenants": TENANTS,
        "tenant_weights": "1/(i+1)",
        "kinds": list(KINDS),
        "index_buckets": BUCKETS,
        "unit": "item writes (table or index entry) per 1,000 jobs",
        "writes_per_1000_jobs": per_partition,
        "max_writes_per_1000_jobs": busiest,
        "total_writes_per_1000_jobs": {
            where: {shape: round(count * scale, 3) for shape, count in shapes.items()}
            for where, shapes in totals.items()
        },
        "partitions": {where: dict(shapes) for where, shapes in partitions.items()},
    }
