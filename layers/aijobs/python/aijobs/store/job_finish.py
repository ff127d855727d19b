"""A job's final transition, with what must happen exactly once alongside it in the same
transaction: the credit refund or a workflow parent's settlement, a child's count on its parent,
the webhook owed, the row's retention TTL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from aijobs.domain import Job, JobStatus
from aijobs.errors import TransitionConflict
from aijobs.store.job_items import CHARGE_REFUNDED, CHARGE_RESERVED, CHARGE_SETTLED
from aijobs.store.job_table import JobTable
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, iso, job_sk, user_pk

# A parent's settlement reads its children's counters; a child finishing meanwhile moves them.
_SETTLE_ATTEMPTS = 8


class JobFinish(JobTable):
    """The final transitions' one write path (`_finish`)."""

    def _finish(
        self,
        job: Job,
        status: JobStatus,
        now: datetime,
        *,
        condition: str,
        sets: dict[str, Any],
        values: dict[str, Any],
        remove: Sequence[str],
        extra_writes: Sequence[dict[str, Any]] = (),
    ) -> Job:
        """A final transition, with what must happen exactly once alongside it, in one transaction:
        the credit refund (all of it for a failed job; what its children did not use for a parent)
        and, for a workflow child, its count on the parent row."""
        client = self._table.meta.client
        count_on_parent = job.parent_id is not None
        retention = self._task_retention() if self._task_retention is not None else None
        if retention is not None:
            sets = {**sets, TTL_ATTRIBUTE: int((now + retention).timestamp())}
        if job.callback_url is not None:
            # The webhook is owed from this very write on: a delivery message lost before it was
            # sent is found again by its `pending` state (aijobs.webhooks).
            sets = {**sets, **_callback_pending(now)}
        for attempt in range(_SETTLE_ATTEMPTS):
            writes: list[dict[str, Any]] = []
            row_condition, row_sets, row_values = condition, dict(sets), dict(values)
            if job.charge_state == CHARGE_RESERVED and job.is_parent:
                # Settle on the counters as they are now, and only if they are still so.
                current = self.get(job.user_id, job.job_id)
                if current is None or current.status.is_terminal or current.charge_state != CHARGE_RESERVED:
                    raise TransitionConflict(f"job {job.job_id}: -> {status.value} lost its race")
                used = current.child_price * current.children_succeeded
                if status is JobStatus.SUCCEEDED:
                    used += current.base_price
                kept, back = split_allocation(current.charge_allocation, used)
                row_condition = f"({condition}) AND charge_state = :reserved AND children_succeeded = :seen"
                row_values |= {":reserved": CHARGE_RESERVED, ":seen": current.children_succeeded}
                row_sets |= {
                    "charge_state": CHARGE_SETTLED if used else CHARGE_REFUNDED,
                    "charge_json": json.dumps(kept, sort_keys=True),
                }
                if back:
                    writes = self.ledger.refund(job.user_id, job.job_id, back)
            elif job.charge_state == CHARGE_RESERVED and status is JobStatus.FAILED_FINAL:
                row_condition = f"({condition}) AND charge_state = :reserved"
                row_values[":reserved"] = CHARGE_RESERVED
                row_sets["charge_state"] = CHARGE_REFUNDED
                writes = self.ledger.refund(job.user_id, job.job_id, job.charge_allocation)
            writes = [*writes, *extra_writes]  # before the parent's count, which must stay last
            if count_on_parent:
                writes.append(self._count_on_parent(job, status))
            request = self._update_request(
                job, status, now, condition=row_condition, sets=row_sets, values=row_values, remove=remove
            )
            if not writes:
                updated = self._transition(
                    job, status, now, condition=row_condition, sets=row_sets, values=row_values, remove=remove
                )
                assert updated is not None
                return updated
            try:
                client.transact_write_items(TransactItems=self._with_update(request, writes))
                break
            except client.exceptions.TransactionCanceledException as error:
                codes = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
                if codes and codes[0] == "ConditionalCheckFailed" and not job.is_parent:
                    raise TransitionConflict(f"job {job.job_id}: -> {status.value} lost its race") from error
                if count_on_parent and codes and codes[-1] == "ConditionalCheckFailed":
                    count_on_parent = False  # the parent row is gone (retention): finish the child alone
                if attempt == _SETTLE_ATTEMPTS - 1:
                    if codes and codes[0] == "ConditionalCheckFailed":
                        raise TransitionConflict(
                            f"job {job.job_id}: -> {status.value} lost its race"
                        ) from error
                    raise  # a grant kept changing under the refund: let the caller retry later
        finished = self.get(job.user_id, job.job_id)
        assert finished is not None
        return finished

    def _count_on_parent(self, child: Job, status: JobStatus) -> dict[str, Any]:
        """The parent's counters, as a write of the child's final transaction."""
        assert child.parent_id is not None
        counter = "children_succeeded" if status is JobStatus.SUCCEEDED else "children_failed"
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {PK: user_pk(child.user_id), SK: job_sk(child.parent_id)},
                "UpdateExpression": f"ADD children_done :one, {counter} :one",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": {":one": 1},
            }
        }


def split_allocation(allocation: dict[str, int], keep: int) -> tuple[dict[str, int], dict[str, int]]:
    """Split a reservation into (`keep` credits that stay charged, the rest to give back)."""
    kept: dict[str, int] = {}
    back: dict[str, int] = {}
    for grant_id, amount in sorted(allocation.items()):
        take = min(amount, keep)
        keep -= take
        if take:
            kept[grant_id] = take
        if amount - take:
            back[grant_id] = amount - take
    return kept, back


# A webhook delivery's state on the row (aijobs.webhooks); `callbackUrl` itself never changes.
CALLBACK_ATTRIBUTES = (
    "callback_state",
    "callback_attempts",
    "callback_status",
    "callback_error",
    "callback_at",
    "callback_lease",
    "callback_claim",
)


def _callback_pending(now: datetime) -> dict[str, Any]:
    """A final transition's webhook writes: the delivery is owed, not tried yet."""
    return {
        "callback_state": "pending",
        "callback_attempts": 0,
        "callback_at": iso(now),
        "callback_status": None,
        "callback_error": None,
        "callback_lease": None,
        "callback_claim": None,
    }
