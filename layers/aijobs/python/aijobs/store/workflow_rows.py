"""A workflow's rows (aijobs.workflows): the parent's split written as child rows in batches, the
split's size fixed and its reservation settled to it, the parent parked until its last child ends
and moved to its merge, its children listed, and the operator re-runs of a child or a parent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus
from aijobs.errors import TransitionConflict
from aijobs.store.job_finish import split_allocation
from aijobs.store.job_items import CHARGE_RESERVED, PHASE_CHILDREN, PHASE_MERGE, job_from_item, job_to_item
from aijobs.store.job_queries import Page, decode_cursor, encode_cursor
from aijobs.store.job_table import OWN_CLAIM, JobTable, claim_values
from aijobs.store.job_transitions import rerun_sets
from aijobs.store.keys import (
    PK,
    SK,
    TTL_ATTRIBUTE,
    children_sk_prefix,
    iso,
    job_sk,
    parent_status_pk,
    user_pk,
)

# DynamoDB's TransactWriteItems takes at most 100 actions.
CHILD_WRITE_BATCH = 100


class WorkflowRows(JobTable):
    """A workflow parent's and its children's rows."""

    def create_children(self, children: Sequence[Job]) -> int:
        """Write child rows in transactions of up to 100, each row only if it is absent, so a
        replayed split creates no duplicates and loses none. Returns how many rows were new."""
        client = self._table.meta.client
        created = 0
        for start in range(0, len(children), CHILD_WRITE_BATCH):
            pending = list(children[start : start + CHILD_WRITE_BATCH])
            while pending:
                writes = [
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": job_to_item(child, self._buckets),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    }
                    for child in pending
                ]
                try:
                    client.transact_write_items(TransactItems=writes)  # type: ignore[arg-type]
                except client.exceptions.TransactionCanceledException as error:
                    reasons = error.response.get("CancellationReasons", [])
                    existing = {i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"}
                    if not existing:
                        raise
                    pending = [child for i, child in enumerate(pending) if i not in existing]
                    continue
                created += len(pending)
                pending = []
        return created

    def fix_children(
        self, job: Job, *, total: int, failures_allowed: int, now: datetime, lease: timedelta
    ) -> Job:
        """Record how many children the split makes, and settle the reservation to it: the parent
        was charged an estimate at submit; the difference is refunded, or debited, now, once."""
        if job.children_total is not None:
            if job.children_total != total:
                raise TransitionConflict(
                    f"job {job.job_id}: the split made {total} parts, {job.children_total} before"
                )
            return job
        sets: dict[str, Any] = {
            "children_total": total,
            "failures_allowed": failures_allowed,
            "lease_expires_at": iso(now + lease),
        }
        writes: list[dict[str, Any]] = []
        if job.charge_state == CHARGE_RESERVED:
            price = job.base_price + job.child_price * total
            allocation = dict(job.charge_allocation)
            if price < job.price:
                allocation, back = split_allocation(allocation, price)
                writes = self.ledger.refund(job.user_id, job.job_id, back)
            elif price > job.price:
                # Raises PaymentRequiredError when the balance cannot cover the true size.
                writes, extra = self.ledger.reserve(job.user_id, job.job_id, price - job.price)
                for grant_id, amount in extra.items():
                    allocation[grant_id] = allocation.get(grant_id, 0) + amount
            sets |= {"price": price, "charge_json": json.dumps(allocation, sort_keys=True)}
        request = self._update_request(
            job, JobStatus.RUNNING, now,
            condition=f"{OWN_CLAIM} AND attribute_not_exists(children_total)",
            sets=sets, values=claim_values(job),
        )  # fmt: skip
        if not writes:
            return self._apply(job, request)
        client = self._table.meta.client
        try:
            client.transact_write_items(TransactItems=self._with_update(request, writes))
        except client.exceptions.TransactionCanceledException as error:
            reasons = error.response.get("CancellationReasons", [])
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise TransitionConflict(f"job {job.job_id}: split lost its claim") from error
            raise
        fixed = self.get(job.user_id, job.job_id)
        assert fixed is not None
        return fixed

    def checkpoint_split(self, job: Job, *, done: int, now: datetime, lease: timedelta) -> Job:
        """Children [0, done) have rows and messages: a resumed split starts at `done`. Renews the lease."""
        updated = self._transition(
            job, JobStatus.RUNNING, now, condition=OWN_CLAIM,
            sets={"children_split": done, "lease_expires_at": iso(now + lease)}, values=claim_values(job),
        )  # fmt: skip
        assert updated is not None
        return updated

    def stop_split(self, job: Job, *, done: int, now: datetime) -> Job:
        """Its owner cancelled the workflow during its split: the children written so far are all
        it will have (the parts not written are never made or charged)."""
        updated = self._transition(
            job, JobStatus.RUNNING, now, condition=OWN_CLAIM,
            sets={"children_total": done, "children_split": done}, values=claim_values(job),
        )  # fmt: skip
        assert updated is not None
        return updated

    def park_parent(self, job: Job, *, now: datetime, hold: timedelta) -> Job:
        """The split is done: the parent waits for its children (`running`, no claim held). The
        last child moves it on; `hold` is when the sweeper looks at it again if nobody did."""
        updated = self._transition(
            job,
            JobStatus.RUNNING,
            now,
            condition=OWN_CLAIM,
            sets={
                "phase": PHASE_CHILDREN,
                "awaiting_provider": True,
                "recheck_id": uuid.uuid4().hex,
                "lease_expires_at": iso(now + hold),
                "claim_id": None,
            },
            values=claim_values(job),
        )
        assert updated is not None
        return updated

    def parent_ready(self, user_id: str, parent_id: str, *, now: datetime, hold: timedelta) -> Job | None:
        """Move a waiting parent to its merge step once its last child has finished. Never
        earlier, even when more children failed than its policy allows or its owner cancelled it:
        a child still running would then finish after the parent's credits were settled, and be
        free. Children not started yet are stopped instead (`parent_stopping`), so the wait is for
        the running ones. One conditional update: of any number of callers (the last two children
        finishing at once, a sweeper re-check), exactly one gets the row back and sends the merge
        message, which carries the row's new `recheck_id`."""
        try:
            response = self._table.update_item(
                Key={PK: user_pk(user_id), SK: job_sk(parent_id)},
                UpdateExpression="SET phase = :merge, awaiting_provider = :true, recheck_id = :check, "
                "lease_expires_at = :hold, attempts = :zero REMOVE claim_id",
                ConditionExpression="#status = :running AND phase = :children AND "
                "children_done >= children_total",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":merge": PHASE_MERGE,
                    ":children": PHASE_CHILDREN,
                    ":running": JobStatus.RUNNING.value,
                    ":true": True,
                    ":check": uuid.uuid4().hex,
                    ":hold": iso(now + hold),
                    ":zero": 0,
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise
        return job_from_item(response["Attributes"])

    def list_children(
        self,
        user_id: str,
        parent_id: str,
        *,
        status: JobStatus | None = None,
        limit: int | None = 50,
        cursor: str | None = None,
    ) -> Page:
        """A parent's children in index order (one status, or all); `limit=None` reads them all."""
        if status is not None:
            query: dict[str, Any] = {
                "IndexName": "by_user_status",
                "KeyConditionExpression": "gsi1pk = :pk",
                "ExpressionAttributeValues": {":pk": parent_status_pk(user_id, parent_id, status.value)},
            }
        else:
            query = {
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :children)",
                "ExpressionAttributeValues": {
                    ":pk": user_pk(user_id),
                    ":children": children_sk_prefix(parent_id),
                },
                "ConsistentRead": True,
            }
        if cursor:
            query["ExclusiveStartKey"] = decode_cursor(cursor, user_id, query)
        jobs: list[Job] = []
        while True:
            if limit is not None:
                query["Limit"] = limit - len(jobs)
            response = self._table.query(**query)
            jobs.extend(job_from_item(item) for item in response["Items"])
            last_key = response.get("LastEvaluatedKey")
            if last_key is None or (limit is not None and len(jobs) >= limit):
                break
            query["ExclusiveStartKey"] = last_key
        if status is not None:
            jobs.sort(key=lambda job: job.part or 0)
        return Page(jobs=jobs, cursor=encode_cursor(last_key) if last_key else None)

    def requeue_child(self, child: Job, *, now: datetime, parent_must_wait: bool) -> Job:
        """Operator re-run of a `failed_final` child: `queued` again, and no longer counted as
        failed on its parent (the same transaction), so its new outcome is counted once.

        `parent_must_wait`: only while the parent still waits for children (a single child re-run);
        a parent re-run reopens the parent itself afterwards.
        """
        assert child.parent_id is not None
        request = self._update_request(
            child, JobStatus.QUEUED, now,
            condition="#status = :final",
            sets=rerun_sets(child) | {"awaiting_provider": False, "provider_checks": None},
            values={":final": JobStatus.FAILED_FINAL.value},
            remove=("lease_expires_at", "finished_at", TTL_ATTRIBUTE, "provider_handle", "started_at",
                    "recheck_id", "next_attempt_at", "result_json", "result_ref"),
        )  # fmt: skip
        parent_condition = "attribute_exists(pk)"
        parent_values: dict[str, Any] = {":minus": -1}
        names: dict[str, str] = {}
        if parent_must_wait:
            parent_condition = "#status = :running AND phase = :children"
            parent_values |= {":running": JobStatus.RUNNING.value, ":children": PHASE_CHILDREN}
            names = {"#status": "status"}
        parent_update: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": {PK: user_pk(child.user_id), SK: job_sk(child.parent_id)},
            "UpdateExpression": "ADD children_done :minus, children_failed :minus",
            "ConditionExpression": parent_condition,
            "ExpressionAttributeValues": parent_values,
        }
        if names:
            parent_update["ExpressionAttributeNames"] = names
        client = self._table.meta.client
        try:
            client.transact_write_items(TransactItems=self._with_update(request, [{"Update": parent_update}]))
        except client.exceptions.TransactionCanceledException as error:
            codes = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
                raise TransitionConflict(
                    f"job {child.job_id}: its parent {child.parent_id} is not waiting for children; "
                    "re-run the parent (it re-runs its failed children)"
                ) from error
            raise TransitionConflict(f"job {child.job_id}: not failed_final any more") from error
        requeued = self.get(child.user_id, child.job_id)
        assert requeued is not None
        return requeued

    def reopen_parent(
        self, job: Job, *, now: datetime, phase: str, hold: timedelta, allowed_from: Sequence[JobStatus]
    ) -> Job:
        """Operator re-run of a parent: `running` again in `phase` (waiting for re-run children, or
        straight to its merge), with a fresh attempt budget. Credits are not charged again: children
        that succeed now are on the house once the parent has settled (`charge_waived`)."""
        values = {f":from{i}": status.value for i, status in enumerate(allowed_from)}
        updated = self._transition(
            job,
            JobStatus.RUNNING,
            now,
            condition=f"#status IN ({', '.join(values)})",
            sets=rerun_sets(job)
            | {
                "phase": phase,
                "awaiting_provider": True,
                "recheck_id": uuid.uuid4().hex,
                "lease_expires_at": iso(now + hold),
            },
            values=values,
            remove=("finished_at", TTL_ATTRIBUTE, "claim_id", "next_attempt_at"),
        )
        assert updated is not None
        return updated
