"""The job rows' table and its one way of changing a row: a conditional UpdateItem that moves the
status and keeps the index keys in step (`_transition`), the consistent read of one row, and the
base every part of `JobStore` (aijobs.store.jobs) builds on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus, utcnow
from aijobs.errors import TransitionConflict
from aijobs.store.credits import CreditLedger
from aijobs.store.job_items import JobKey, gsi1pk, job_from_item
from aijobs.store.keys import PK, SK, IndexBuckets, iso, job_sk, kind_status_pk, user_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

# The condition of a write only the claim holder may make.
OWN_CLAIM = "#status = :running AND claim_id = :claim_id"


class JobTable:
    """The shard table the job rows live in, and the conditional update every transition uses."""

    def __init__(
        self,
        table: Table,
        clock: Callable[[], datetime] = utcnow,
        *,
        buckets: IndexBuckets,
        task_retention: Callable[[], timedelta | None] | None = None,
        transaction_retention: Callable[[], timedelta | None] | None = None,
    ) -> None:
        self._table = table
        # The stage's INDEX_BUCKETS: where `by_kind_status` keys are written and read.
        self._buckets = buckets
        # How long a finished row is kept (aijobs.store.retention): each final transition stamps
        # the row's TTL from it, so DynamoDB removes it; None (or no reader): no TTL.
        self._task_retention = task_retention
        # Credits live in the same shard table: refunds ride in the job's own transactions.
        self.ledger = CreditLedger(table, clock, buckets=buckets, retention=transaction_retention)

    @property
    def table_name(self) -> str:
        return self._table.name

    def get(self, user_id: str, job_id: str) -> Job | None:
        item = self._table.get_item(Key={PK: user_pk(user_id), SK: job_sk(job_id)}, ConsistentRead=True).get(
            "Item"
        )
        return job_from_item(item) if item else None

    def _with_update(self, request: dict[str, Any], writes: Sequence[dict[str, Any]]) -> list[Any]:
        """A transaction's items: the row's update (from `_update_request`) first, then `writes`."""
        return [{"Update": {"TableName": self.table_name, **request}}, *writes]

    def _apply(self, job: Job, request: dict[str, Any]) -> Job:
        """A prepared update of the row; TransitionConflict if its condition fails."""
        response = self._send(request, return_row=True, conflict=f"job {job.job_id}: update lost its race")
        assert response is not None
        return job_from_item(response["Attributes"])

    def _send(
        self, request: dict[str, Any], *, return_row: bool, conflict: str | None
    ) -> dict[str, Any] | None:
        """UpdateItem; on a failed condition, TransitionConflict(`conflict`), or None without one."""
        try:
            response = self._table.update_item(**request, ReturnValues="ALL_NEW" if return_row else "NONE")
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            if conflict is None:
                return None
            raise TransitionConflict(conflict) from error
        return dict(response)

    def _transition(
        self,
        job: Job,
        status: JobStatus,
        now: datetime,
        *,
        condition: str,
        sets: dict[str, Any],
        values: dict[str, Any],
        remove: Sequence[str] = (),
        lost_race_returns_none: bool = False,
    ) -> Job | None:
        """The conditional status change, returning the new row (None: lost race, if asked)."""
        request = self._update_request(
            job, status, now, condition=condition, sets=sets, values=values, remove=remove
        )
        conflict = _lost_race(job, status, lost_race_returns_none)
        response = self._send(request, return_row=True, conflict=conflict)
        return None if response is None else job_from_item(response["Attributes"])

    def _transition_quietly(
        self,
        job: Job,
        status: JobStatus,
        now: datetime,
        *,
        condition: str,
        sets: dict[str, Any],
        values: dict[str, Any],
        remove: Sequence[str] = (),
        lost_race_returns_none: bool = False,
    ) -> bool:
        """`_transition` for callers that do not read the new row: DynamoDB returns nothing.
        False when it lost its race (if `lost_race_returns_none`)."""
        request = self._update_request(
            job, status, now, condition=condition, sets=sets, values=values, remove=remove
        )
        conflict = _lost_race(job, status, lost_race_returns_none)
        return self._send(request, return_row=False, conflict=conflict) is not None

    def _update_request(
        self,
        job: Job | JobKey,
        status: JobStatus,
        now: datetime,
        *,
        condition: str,
        sets: dict[str, Any],
        values: dict[str, Any],
        remove: Sequence[str] = (),
    ) -> dict[str, Any]:
        """One status change as UpdateItem parameters; the index keys always follow the status."""
        assignments = [
            "#status = :status",
            "updated_at = :now_ts",
            "gsi1pk = :gsi1pk",
            "gsi2pk = :gsi2pk",
            "gsi2sk = :gsi2sk",
        ]
        expression_values: dict[str, Any] = {
            ":status": status.value,
            ":now_ts": iso(now),
            ":gsi1pk": gsi1pk(job, status),
            ":gsi2pk": self._buckets.partition(kind_status_pk(job.kind, status.value), job.job_id),
            ":gsi2sk": f"{iso(now)}#{job.job_id}",
            **values,
        }
        # Every attribute goes through a placeholder: DynamoDB reserves hundreds of plain words.
        names = {"#status": "status"}
        to_remove = list(remove)
        for index, (name, value) in enumerate(sets.items()):
            if value is None:  # setting None means removing the attribute
                to_remove.append(name)
                continue
            names[f"#a{index}"] = name
            if isinstance(value, tuple):  # (expression, operand): an arithmetic update
                expression, operand = value
                assignments.append(f"#a{index} = {expression.replace(name, f'#a{index}')}")
                if operand is not None:  # None: the expression's operands are in `values`
                    expression_values[":one"] = operand
                if ":zero" in expression:
                    expression_values[":zero"] = 0
            else:
                assignments.append(f"#a{index} = :v{index}")
                expression_values[f":v{index}"] = value
        removals = []
        for index, name in enumerate(to_remove):
            names[f"#r{index}"] = name
            removals.append(f"#r{index}")
        update = "SET " + ", ".join(assignments)
        if removals:
            update += " REMOVE " + ", ".join(removals)
        return {
            "Key": {PK: user_pk(job.user_id), SK: job_sk(job.job_id)},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": expression_values,
        }


def claim_values(job: Job) -> dict[str, Any]:
    return {":running": JobStatus.RUNNING.value, ":claim_id": job.claim_id}


def _lost_race(job: Job, status: JobStatus, returns_none: bool) -> str | None:
    """The TransitionConflict message of a status change, or None where losing returns None."""
    return None if returns_none else f"job {job.job_id}: {job.status.value} -> {status.value} lost its race"
