"""Property: over any sequence of grants, jobs, workflow parents and their children, outcomes,
clock moves and cron runs, the ledger balances, never goes negative, every debit of a
`failed_final` job is refunded exactly once, and a parent is charged exactly its own price (if it
merged) plus its child price per child that succeeded before it ended."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from aijobs.domain import Job, JobStatus
from aijobs.errors import PaymentRequiredError, TransitionConflict
from aijobs.ids import new_job_id
from aijobs.store.credits import TX_TYPES
from aijobs.store.jobs import JobStore
from aijobs.store.keys import SHARD_INDEXES, IndexBuckets, child_job_id
from aijobs_cli.local.resources import _create_table
from tests.integration.harness import Clock

pytestmark = pytest.mark.integration

USER = "u1"
LEASE = timedelta(minutes=2)

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(1, 30), st.integers(1, 72)),
        st.tuples(st.just("submit"), st.integers(1, 12), st.just(0)),
        st.tuples(st.just("succeed"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("fail"), st.integers(0, 30), st.booleans()),
        st.tuples(st.just("advance"), st.integers(1, 48), st.just(0)),
        st.tuples(st.just("cron"), st.just(0), st.just(0)),
        # A workflow parent: (estimated parts, base price * 10 + child price).
        st.tuples(st.just("parent"), st.integers(1, 6), st.integers(0, 34)),
        # Its split: the true number of parts, settled against the estimate.
        st.tuples(st.just("split"), st.integers(0, 30), st.integers(1, 8)),
        # A child finishes: succeeded (True) or failed_final.
        st.tuples(st.just("child"), st.integers(0, 60), st.booleans()),
        # The parent ends: merged (0), failed (1) or cancelled by its owner (2).
        st.tuples(st.just("finish"), st.integers(0, 30), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=30,
)


class Parents:
    """The workflow parents of a run: their claimed rows, children, and what each must cost."""

    def __init__(self) -> None:
        self.claimed: list[Job] = []
        self.children: list[Job] = []
        self.expected: dict[str, int] = {}


def _sums(store: JobStore) -> dict[str, int]:
    account = store.ledger.account(USER)
    sums = dict(account.archived)
    for tx in store.ledger.transactions(USER):
        if not tx.folded:  # a folded row's amount is in the archived totals already
            sums[tx.type] += tx.amount
    return sums


def _check(store: JobStore) -> dict[str, int]:
    sums = _sums(store)
    balance = store.ledger.account(USER).balance
    assert balance == sums["grant"] - sums["debit"] + sums["refund"] - sums["expire"]
    assert balance >= 0
    return sums


def _apply_workflow(store: JobStore, clock: Clock, parents: Parents, op: tuple[str, int, Any]) -> None:
    name, number, extra = op
    now = clock()
    if name == "parent":
        base, each = divmod(extra, 10)
        job = _submit(
            store, now, base + each * number, kind="report", phase="split", base_price=base, child_price=each
        )
        if job is None:
            return
        claimed = store.claim(job, now=now, lease=LEASE, max_attempts=10)
        assert claimed is not None
        parents.claimed.append(claimed)
    elif name == "split" and parents.claimed:
        parent = parents.claimed[number % len(parents.claimed)]
        row = store.get(USER, parent.job_id)
        if row is None or row.status.is_terminal or row.children_total is not None:
            return
        try:
            store.fix_children(parent, total=extra, failures_allowed=extra, now=now, lease=LEASE)
        except PaymentRequiredError:  # the true size is more than the balance can pay
            store.fail_final(parent, now=now, error_class="insufficient_credits", message="x")
            parents.expected[parent.job_id] = 0
            return
        kids = [
            Job(
                job_id=child_job_id(parent.job_id, index),
                user_id=USER,
                kind="summary",
                status=JobStatus.QUEUED,
                input="x",
                provider="local",
                created_at=now,
                updated_at=now,
                parent_id=parent.job_id,
                part=index,
            )
            for index in range(extra)
        ]
        store.create_children(kids)
        parents.children.extend(kids)
    elif name == "child":
        open_children = [kid for kid in parents.children if not _finished(store, kid)]
        if not open_children:
            return
        kid = open_children[number % len(open_children)]
        claimed = store.claim(kid, now=now, lease=LEASE, max_attempts=10)
        assert claimed is not None
        if extra:
            store.succeed(claimed, now=now, result=None, result_ref=None, model=None, usage={}, cost=None)
        else:
            store.fail_final(claimed, now=now, error_class="invalid_input", message="x")
    elif name == "finish" and parents.claimed:
        parent = parents.claimed[number % len(parents.claimed)]
        if _finished(store, parent):
            return
        if extra == 0:
            store.succeed(parent, now=now, result=None, result_ref=None, model=None, usage={}, cost=None)
        elif extra == 1:
            store.fail_final(parent, now=now, error_class="children_failed", message="x")
        else:
            store.fail_final(parent, now=now, error_class="cancelled", message="x", own_claim=False)
        row = store.get(USER, parent.job_id)
        assert row is not None
        merged = parent.base_price if extra == 0 else 0
        parents.expected[parent.job_id] = merged + parent.child_price * row.children_succeeded


def _submit(store: JobStore, now: datetime, price: int, *, kind: str, **fields: Any) -> Job | None:
    """Reserve `price` and write a queued row with it, as the producer does; None if unaffordable."""
    job_id = new_job_id(int(now.timestamp() * 1000))
    try:
        writes, allocation = store.ledger.reserve(USER, job_id, price)
    except PaymentRequiredError:
        return None
    job = Job(
        job_id=job_id, user_id=USER, kind=kind, status=JobStatus.QUEUED, input="x", provider="local",
        created_at=now, updated_at=now, price=price, charge_state="reserved", charge_allocation=allocation,
        **fields,
    )  # fmt: skip
    store.create(job, extra_writes=writes)
    return job


def _finished(store: JobStore, job: Job) -> bool:
    row = store.get(USER, job.job_id)
    return row is None or row.status.is_terminal


def _net_charge(store: JobStore, job_id: str) -> int:
    amounts = {"debit": 1, "refund": -1}
    return sum(
        amounts.get(tx.type, 0) * tx.amount for tx in store.ledger.transactions(USER) if tx.job_id == job_id
    )


def _apply(store: JobStore, clock: Clock, jobs: list[Job], op: tuple[str, int, Any]) -> None:
    name, number, extra = op
    now = clock()
    if name == "grant":
        store.ledger.grant(USER, number, now + timedelta(hours=extra))
    elif name == "submit":
        job = _submit(store, now, number, kind="summary")
        if job is None:
            return
        jobs.append(job)
    elif name in ("succeed", "fail") and jobs:
        row = store.get(USER, jobs[number % len(jobs)].job_id)
        assert row is not None
        if row.status.is_terminal:
            return
        if name == "fail" and extra:  # an operator, the DLQ consumer or the sweeper finalizes it
            store.fail_final(row, now=now, error_class="operator", message="x", own_claim=False)
            return
        claimed = store.claim(row, now=now, lease=LEASE, max_attempts=10)
        if claimed is None:
            return
        if name == "succeed":
            store.succeed(claimed, now=now, result=None, result_ref=None, model=None, usage={}, cost=None)
        else:
            store.fail_final(claimed, now=now, error_class="invalid_input", message="x")
    elif name == "advance":
        clock.advance(number * 3600)
    elif name == "cron":
        store.ledger.expire_due(now, limit=20)
        store.ledger.cleanup_transactions(now - timedelta(days=1), limit=100)


def _rows_removed(store: JobStore) -> bool:
    """Whether retention removed any transaction row (the archived totals hold more than the
    folded rows still present)."""
    folded: dict[str, int] = dict.fromkeys(TX_TYPES, 0)
    for tx in store.ledger.transactions(USER):
        if tx.folded:
            folded[tx.type] += tx.amount
    return any(total > folded[kind] for kind, total in store.ledger.account(USER).archived.items())


# Both ways a transaction leaves: archived by the */10 run (no retention known when written), or
# folded into the totals as written and removed by its TTL (moto keeps expired rows, like DynamoDB
# for up to two days).
@pytest.mark.parametrize("retention", [None, timedelta(days=1)], ids=["archived", "folded"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_ledger_invariant_holds_for_any_sequence(
    retention: timedelta | None, operations: list[tuple[str, int, Any]]
) -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _create_table(client, "shard", SHARD_INDEXES, set())
        clock = Clock()
        table = boto3.resource("dynamodb", region_name="us-east-1").Table("shard")
        store = JobStore(table, clock, buckets=IndexBuckets(write=4), transaction_retention=lambda: retention)
        jobs: list[Job] = []
        parents = Parents()
        # Credit to spend first, so that jobs and parents get submitted in most examples.
        for operation in [("grant", 30, 72), *operations]:
            if operation[0] in ("parent", "split", "child", "finish"):
                _apply_workflow(store, clock, parents, operation)
            else:
                _apply(store, clock, jobs, operation)
            _check(store)

        # Workflow parents: charged exactly what they used, settled once.
        # (Retention may have archived a parent's debit: then only the row's kept allocation tells.)
        archived = _rows_removed(store)
        if retention is not None:
            assert not archived  # folded rows leave by TTL only
            assert all(tx.folded for tx in store.ledger.transactions(USER))
        for job_id, expected in parents.expected.items():
            row = store.get(USER, job_id)
            assert row is not None
            assert sum(row.charge_allocation.values()) == expected
            assert archived or _net_charge(store, job_id) == expected
            with pytest.raises(TransitionConflict):
                store.fail_final(row, now=clock(), error_class="again", message="x", own_claim=False)
            assert archived or _net_charge(store, job_id) == expected

        rows = [store.get(USER, job.job_id) for job in jobs]
        failed = [row for row in rows if row is not None and row.status is JobStatus.FAILED_FINAL]
        assert all(row.charge_state == "refunded" for row in failed)
        for row in failed:  # finalizing again never refunds again
            with pytest.raises(TransitionConflict):
                store.fail_final(row, now=clock(), error_class="again", message="x", own_claim=False)
        # Debits minus refunds (archived ones included) are exactly what is still held: each plain
        # job's price unless it failed, each ended parent's use, each open parent's reservation.
        held = sum(job.price for job, row in zip(jobs, rows, strict=True) if row not in failed)
        for parent in parents.claimed:
            row = store.get(USER, parent.job_id)
            assert row is not None
            held += parents.expected[parent.job_id] if row.status.is_terminal else row.price
        sums = _check(store)
        assert sums["debit"] - sums["refund"] == held
