"""Property: over any sequence of grants, jobs, outcomes, clock moves and cron runs, the ledger
balances, never goes negative, and every debit of a `failed_final` job is refunded exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from aijobs.domain import Job, JobStatus
from aijobs.errors import PaymentRequiredError, TransitionConflict
from aijobs.ids import new_job_id
from aijobs.store.jobs import JobStore
from aijobs.store.keys import SHARD_INDEXES
from aijobs_cli.resources import _create_table
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
    ),
    min_size=1,
    max_size=30,
)


def _sums(store: JobStore) -> dict[str, int]:
    account = store.ledger.account(USER)
    sums = dict(account.archived)
    for tx in store.ledger.transactions(USER):
        sums[tx.type] += tx.amount
    return sums


def _check(store: JobStore) -> dict[str, int]:
    sums = _sums(store)
    balance = store.ledger.account(USER).balance
    assert balance == sums["grant"] - sums["debit"] + sums["refund"] - sums["expire"]
    assert balance >= 0
    return sums


def _apply(store: JobStore, clock: Clock, jobs: list[Job], op: tuple[str, int, Any]) -> None:
    name, number, extra = op
    now = clock()
    if name == "grant":
        store.ledger.grant(USER, number, now + timedelta(hours=extra))
    elif name == "submit":
        job_id = new_job_id(int(now.timestamp() * 1000))
        try:
            writes, allocation = store.ledger.reserve(USER, job_id, number)
        except PaymentRequiredError:
            return
        job = Job(
            job_id=job_id,
            user_id=USER,
            kind="summary",
            status=JobStatus.QUEUED,
            input="x",
            provider="local",
            created_at=now,
            updated_at=now,
            price=number,
            charge_state="reserved",
            charge_allocation=allocation,
        )
        store.create(job, extra_writes=writes)
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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_ledger_invariant_holds_for_any_sequence(operations: list[tuple[str, int, Any]]) -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _create_table(client, "shard", SHARD_INDEXES, set())
        clock = Clock()
        store = JobStore(boto3.resource("dynamodb", region_name="us-east-1").Table("shard"), clock)
        jobs: list[Job] = []
        for operation in operations:
            _apply(store, clock, jobs, operation)
            _check(store)

        rows = [store.get(USER, job.job_id) for job in jobs]
        failed = [row for row in rows if row is not None and row.status is JobStatus.FAILED_FINAL]
        sums = _check(store)
        assert sums["debit"] == sum(job.price for job in jobs)
        # Refunded exactly once: the refunds add up to the failed jobs' debits, no more, no less.
        assert sums["refund"] == sum(row.price for row in failed)
        assert all(row.charge_state == "refunded" for row in failed)
        for row in failed:  # finalizing again never refunds again
            with pytest.raises(TransitionConflict):
                store.fail_final(row, now=clock(), error_class="again", message="x", own_claim=False)
        assert _sums(store)["refund"] == sums["refund"]
