"""A synthetic load through the real store code on moto, with every write's partitions recorded.

Used by `tests/integration/test_partition_load.py` (no partition key shared by tenants takes more
than its bucket's share) and by `scripts/benchmark.py --write-trace`, which writes the partition
trace `aijobs capacity` reads for the index partitions every tenant shares
(`cli/aijobs_cli/sizing/partition_trace.json`).

Each successful write is counted where DynamoDB bills it: the table partition of the item, and
each index partition whose entry it puts or deletes (a changed index key is a delete in the old
partition and a put in the new one; an unchanged key still rewrites the entry: every index
projects all attributes). Every write is also counted under the step of the job's (or grant's,
or transaction's) life that made it, so a model can weigh each step by how often it runs.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import boto3
from botocore.config import Config
from moto import mock_aws

from aijobs.domain import Job, JobStatus
from aijobs.ids import new_job_id
from aijobs.store.jobs import JobStore
from aijobs.store.keys import SHARD_INDEXES, IndexBuckets
from aijobs_cli.local.resources import _create_table
from aijobs_cli.sizing.call_profile import key_template
from aijobs_cli.sizing.partition_trace import STEPS, PartitionTrace, StepWrites, shape
from tests.integration.harness import Clock

BUCKETS = 8
RETENTION = timedelta(days=30)
#: Jobs one simulation drives: the committed trace is measured over this many.
JOBS = 400
TENANTS = 40
KINDS = ("summary", "embedding", "image-generate", "tts-generate")
TABLE = "shard"
#: A write-sharded index partition: `<base>#<bucket>`.
BUCKETED = re.compile(r"^(?P<base>KIND#[^#]+#STATUS#[a-z_]+|GRANT|TX)#(?P<bucket>\d+)$")
ABOUT = (
    "Writes per run of each step of a job's, grant's and transaction's life, by table or index and "
    "partition-key shape (tenant, kind and bucket as {}), from tests/partition_sim.py: the real store "
    "code on moto. aijobs capacity weighs each step by how often its workload runs it.",
)


class PartitionRecorder:
    """Counts writes per (table or index, partition key), which tenants wrote each, and per step."""

    def __init__(self) -> None:
        self.writes: Counter[tuple[str, str]] = Counter()
        self.tenants: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        # Writes per item: an item's index entry always lands in the same bucket (its id's).
        self.items: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.step_runs: Counter[str] = Counter()
        self.step_writes: defaultdict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
        self._step = ""

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Count the writes made inside as one run of `name` (one of `partition_trace.STEPS`)."""
        assert name in STEPS, name
        self._step, self.step_runs[name] = name, self.step_runs[name] + 1
        try:
            yield
        finally:
            self._step = ""

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
        assert self._step, f"a write outside any step: {where} {partition} {item}"
        self.writes[(where, partition)] += 1
        self.tenants[(where, partition)].add(tenant)
        self.items[(where, partition)][item] += 1
        # A table write is kept with its item's shape too (`USER#{} CREDITS`): single items have walls.
        at = shape(partition) if where != "table" else f"{shape(partition)} {key_template(item)}"
        self.step_writes[self._step][(where, at)] += 1

    def trace(self, jobs: int) -> PartitionTrace:
        """Writes per run of each step, by (table or index, partition-key shape)."""
        steps = {}
        for name in STEPS:
            runs = self.step_runs[name]
            per_run: dict[str, dict[str, float]] = defaultdict(dict)
            for (where, partition), count in sorted(self.step_writes[name].items()):
                per_run[where][partition] = round(count / runs, 4)  # a step that never ran wrote nothing
            steps[name] = StepWrites(runs=runs, writes=dict(per_run))
        return PartitionTrace(
            about=ABOUT, jobs=jobs, tenants=TENANTS, kinds=KINDS, index_buckets=BUCKETS, steps=steps
        )


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


@contextmanager
def simulated_store() -> Iterator[tuple[JobStore, Clock, PartitionRecorder]]:
    """A JobStore on a fresh moto shard table (BUCKETS write buckets), its clock and its recorder."""
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
        # With retention configured, as a stage has it: rows carry their TTL, transactions are folded.
        store = JobStore(
            table, clock, buckets=IndexBuckets(write=BUCKETS),
            task_retention=lambda: RETENTION, transaction_retention=lambda: RETENTION,
        )  # fmt: skip
        yield store, clock, recorder


def drive(store: JobStore, clock: Clock, recorder: PartitionRecorder, jobs: int) -> None:
    """Grants, then `jobs` submits over TENANTS (skewed: tenant i weighs 1/(i+1)) and KINDS, each
    claimed and finished (80% succeed, 10% retry once then succeed, 10% fail and are refunded),
    with the */10 maintenance's expiry and transaction clean-up running along."""
    rng = random.Random(15)
    ledger = store.ledger
    tenants = [f"tenant-{i:02d}" for i in range(TENANTS)]
    for tenant in tenants:
        with recorder.step("grant"):
            ledger.grant(tenant, 10_000, clock() + timedelta(days=30))
        for hours in (1, 2):  # small grants that expire during the run
            with recorder.step("grant"):
                ledger.grant(tenant, 1, clock() + timedelta(hours=hours, seconds=rng.random()))
    weights = [1 / (i + 1) for i in range(TENANTS)]
    lease = timedelta(minutes=5)
    for number in range(jobs):
        clock.advance(25)  # 400 jobs over ~3 hours of simulated time
        now = clock()
        tenant = rng.choices(tenants, weights)[0]
        job = Job(
            job_id=new_job_id(int(now.timestamp() * 1000)), user_id=tenant, kind=rng.choice(KINDS),
            status=JobStatus.QUEUED, input="x", provider="local", created_at=now, updated_at=now, price=1,
        )  # fmt: skip
        with recorder.step("submit"):
            writes, allocation = ledger.reserve(tenant, job.job_id, 1)
            job = job.model_copy(update={"charge_state": "reserved", "charge_allocation": allocation})
            store.create(job, extra_writes=writes)
        with recorder.step("claim"):
            claimed = store.claim(job, now=clock(), lease=lease, max_attempts=3)
        assert claimed is not None
        outcome = rng.random()
        if outcome < 0.1:
            with recorder.step("fail_final"):
                store.fail_final(claimed, now=clock(), error_class="invalid_input", message="bad input")
            continue
        if outcome < 0.2:
            with recorder.step("fail_retryable"):
                store.fail_retryable(claimed, now=clock(), error_class="transient", message="blip")
            with recorder.step("claim"):
                claimed = store.claim(claimed, now=clock(), lease=lease, max_attempts=3)
            assert claimed is not None
        with recorder.step("succeed"):
            store.succeed(
                claimed, now=clock(), result={"ok": True}, result_ref=None, model=None, usage={}, cost=None
            )
        if number % 24 == 23:  # a */10 maintenance run: one step per grant expired, per transaction removed
            for grant in ledger.due_grants(clock(), limit=20):
                with recorder.step("expire"):
                    ledger.expire(grant)
            for item in ledger.old_transactions(clock() - timedelta(hours=1), limit=100):
                with recorder.step("archive"):
                    ledger.archive(item)


def measure(jobs: int) -> tuple[PartitionRecorder, PartitionTrace]:
    """Run the simulation over `jobs` jobs: its recorder and its trace."""
    with simulated_store() as (store, clock, recorder):
        drive(store, clock, recorder, jobs)
        return recorder, recorder.trace(jobs)
