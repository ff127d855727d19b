"""The job rows of one tenant shard: creation and every state transition, each one conditional.

A transition that loses its race raises `TransitionConflict` (or returns None for a claim): at
least once delivery makes duplicates normal, and the row is the source of truth.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus, utcnow
from aijobs.errors import MalformedRequestError, TransitionConflict
from aijobs.store.attempt_log import attempt_log_update, clip
from aijobs.store.credits import CreditLedger
from aijobs.store.job_items import (
    CHARGE_REFUNDED,
    CHARGE_RESERVED,
    CHARGE_SETTLED,
    PHASE_CHILDREN,
    PHASE_MERGE,
    JobKey,
    deserialize_item,
    gsi1pk,
    job_from_item,
    job_to_item,
)
from aijobs.store.keys import (
    PK,
    SK,
    TTL_ATTRIBUTE,
    IndexBuckets,
    children_sk_prefix,
    idempotency_sk,
    iso,
    job_sk,
    kind_status_pk,
    parent_status_pk,
    query_buckets,
    user_pk,
    user_status_pk,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

IDEMPOTENCY_TTL = timedelta(hours=24)
_REFUND_ATTEMPTS = 3
# A parent's settlement reads its children's counters; a child finishing meanwhile moves them.
_SETTLE_ATTEMPTS = 8
# DynamoDB's TransactWriteItems takes at most 100 actions.
CHILD_WRITE_BATCH = 100
_RUNNABLE = (JobStatus.QUEUED.value, JobStatus.FAILED_RETRYABLE.value)
# A held job's own copy, back after the hold, may beat its mark by this much (clocks differ), or
# by half its hold when that is shorter: a duplicate arriving in between is still dropped.
_HOLD_TOLERANCE = timedelta(seconds=10)


class IdempotencyKeyExists(Exception):
    """The user already sent this Idempotency-Key; carries what it was used for."""

    def __init__(self, job_id: str, request_hash: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id
        self.request_hash = request_hash


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    cursor: str | None


class JobStore:
    """Job rows of one shard table (`USER#<userId>` / `JOB#<jobId>`, see TABLES.md)."""

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

    # --- creation --------------------------------------------------------------------------

    def create(
        self,
        job: Job,
        *,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        extra_writes: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Write a new row (`queued`; or `running` under the writer's own claim), its idempotency
        record and any `extra_writes` in one transaction."""
        writes: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": job_to_item(job, self._buckets),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        ]
        if idempotency_key is not None:
            writes.append(
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": {
                            PK: user_pk(job.user_id),
                            SK: idempotency_sk(idempotency_key),
                            "jobId": job.job_id,
                            "request_hash": request_hash,
                            TTL_ATTRIBUTE: int((job.created_at + IDEMPOTENCY_TTL).timestamp()),
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        writes.extend(extra_writes)
        client = self._table.meta.client
        try:
            client.transact_write_items(TransactItems=writes)  # type: ignore[arg-type]
        except client.exceptions.TransactionCanceledException as error:
            reasons = error.response.get("CancellationReasons", [])
            if (
                idempotency_key is not None
                and len(reasons) > 1
                and reasons[1].get("Code") == "ConditionalCheckFailed"
            ):
                existing = self.get_idempotency(job.user_id, idempotency_key)
                if existing is not None:
                    raise IdempotencyKeyExists(*existing) from error
            raise

    def get_idempotency(self, user_id: str, key: str) -> tuple[str, str] | None:
        item = self._table.get_item(
            Key={PK: user_pk(user_id), SK: idempotency_sk(key)}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return str(item["jobId"]), str(item.get("request_hash", ""))

    def forget_idempotency(self, user_id: str, key: str, *, job_id: str | None = None) -> None:
        """Free an Idempotency-Key; with `job_id`, only while it still names that job (a request
        that took the key since keeps it)."""
        request: dict[str, Any] = {"Key": {PK: user_pk(user_id), SK: idempotency_sk(key)}}
        if job_id is not None:
            request |= {"ConditionExpression": "jobId = :job", "ExpressionAttributeValues": {":job": job_id}}
        try:
            self._table.delete_item(**request)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # --- reads -------------------------------------------------------------------------------

    def get(self, user_id: str, job_id: str) -> Job | None:
        item = self._table.get_item(Key={PK: user_pk(user_id), SK: job_sk(job_id)}, ConsistentRead=True).get(
            "Item"
        )
        return job_from_item(item) if item else None

    def list_jobs(
        self,
        user_id: str,
        *,
        status: JobStatus | None = None,
        kind: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page:
        """A user's jobs, newest first. `cursor` is the opaque value of the previous page."""
        query: dict[str, Any] = {"ScanIndexForward": False, "Limit": limit}
        if status is not None:
            query |= {
                "IndexName": "by_user_status",
                "KeyConditionExpression": "gsi1pk = :pk",
                "ExpressionAttributeValues": {":pk": user_status_pk(user_id, status.value)},
            }
        else:
            query |= {
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :job)",
                "ExpressionAttributeValues": {":pk": user_pk(user_id), ":job": "JOB#"},
            }
        if kind is not None:
            query["FilterExpression"] = "#kind = :kind"
            query["ExpressionAttributeNames"] = {"#kind": "kind"}
            query["ExpressionAttributeValues"][":kind"] = kind
        if cursor:
            query["ExclusiveStartKey"] = _decode_cursor(cursor, user_id, query)
        jobs: list[Job] = []
        # A filter can leave a page short: keep reading until it is full or the data ends.
        while True:
            response = self._table.query(**query)
            jobs.extend(job_from_item(item) for item in response["Items"])
            last_key = response.get("LastEvaluatedKey")
            if last_key is None or len(jobs) >= limit:
                break
            query["ExclusiveStartKey"] = last_key
            query["Limit"] = limit - len(jobs)
        return Page(jobs=jobs[:limit], cursor=_encode_cursor(last_key) if last_key else None)

    def query_kind_status(
        self,
        kind: str,
        status: JobStatus,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """Jobs of a kind and status whose last change lies in (after, before), oldest first, at most
        `limit` of them: operator re-runs, the sweeper, retention clean-up. Reads every bucket of
        the kind and status (and the legacy partition) and merges them in `gsi2sk` order."""
        condition, values = _changed_between(iso(after) if after else None, iso(before) if before else None)
        query: dict[str, Any] = {
            "IndexName": "by_kind_status",
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
        items = query_buckets(
            self._table,
            self._buckets.partitions(kind_status_pk(kind, status.value)),
            sort_key="gsi2sk",
            limit=limit,
            query=query,
        )
        return [job_from_item(item) for item in items]

    def newest_of_kind_status(
        self,
        kind: str,
        status: JobStatus,
        *,
        limit: int,
        below: str | None = None,
        after: datetime | None = None,
        user_id: str | None = None,
        error_class: str | None = None,
    ) -> list[Job]:
        """Up to `limit` jobs of a kind and status, newest change first, each older than the
        `position` `below` and changed after `after`; `user_id` and `error_class` filter on the
        server. The operator console's listing across tenants (aijobs.api.admin). Reads every
        bucket of the kind and status (and the legacy partition) and merges them newest first."""
        condition, values = _changed_between(iso(after) if after else None, below)
        query: dict[str, Any] = {
            "IndexName": "by_kind_status",
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
        }
        filters: list[str] = []
        if user_id is not None:
            filters.append("userId = :user")
            values[":user"] = user_id
        if error_class is not None:
            filters.append("last_error_class = :error_class")
            values[":error_class"] = error_class
        if filters:
            query["FilterExpression"] = " AND ".join(filters)
        items = query_buckets(
            self._table,
            self._buckets.partitions(kind_status_pk(kind, status.value)),
            sort_key="gsi2sk",
            limit=limit + 1,  # BETWEEN includes `below` itself: one more, then it is dropped
            query=query,
        )
        jobs = [job for job in map(job_from_item, items) if position(job) != below]
        return jobs[:limit]

    def count_running(self, user_id: str, kind: str, *, now: datetime) -> int:
        """How many of the user's jobs of `kind` are running now (a claim under a live lease, or a
        provider task being waited on): the per-tenant running cap's count. Rows whose lease has
        lapsed (a consumer that died) are not counted: the sweeper or a retry takes them back.

        One `Query` of the user's own `by_user_status` partition (never a partition shared by
        all tenants), counting only. Workflow children live under their parent's partition and
        are not counted (docs/concepts/flow-control.md#fairness-between-tenants).
        """
        query: dict[str, Any] = {
            "IndexName": "by_user_status",
            "KeyConditionExpression": "gsi1pk = :pk",
            "FilterExpression": "#kind = :kind AND #lease > :now",
            "ExpressionAttributeNames": {"#kind": "kind", "#lease": "lease_expires_at"},
            "ExpressionAttributeValues": {
                ":pk": user_status_pk(user_id, JobStatus.RUNNING.value),
                ":kind": kind,
                ":now": iso(now),
            },
            "Select": "COUNT",
        }
        count = 0
        while True:
            response = self._table.query(**query)
            count += response["Count"]
            if "LastEvaluatedKey" not in response:
                return count
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    # --- transitions -------------------------------------------------------------------------

    def claim(self, job: Job, *, now: datetime, lease: timedelta, max_attempts: int) -> Job | None:
        """`queued`/`failed_retryable` (or `running` whose lease expired) -> `running`, attempt + 1.

        One conditional update that returns the new row; None when the row is not runnable
        (finished, held under a live lease, awaiting its provider, or out of attempts).
        """
        return self._transition(
            job,
            JobStatus.RUNNING,
            now,
            condition="(#status IN (:queued, :retryable) OR (#status = :running AND lease_expires_at < :now "
            "AND awaiting_provider = :false)) AND attempts < :max_attempts",
            sets=_claim_sets(now, lease),
            values={
                ":queued": JobStatus.QUEUED.value,
                ":retryable": JobStatus.FAILED_RETRYABLE.value,
                ":running": JobStatus.RUNNING.value,
                ":now": iso(now),
                ":false": False,
                ":max_attempts": max_attempts,
            },
            lost_race_returns_none=True,
        )

    def claim_delivered(
        self,
        key: JobKey,
        *,
        now: datetime,
        lease: timedelta,
        max_attempts: int,
        due_tolerance: timedelta,
    ) -> tuple[Job | None, Job | None]:
        """Claim from a delivered message alone, without reading the row first: one conditional
        update that takes the row if it is runnable now (of this kind, queued, or retryable and its
        retry due within `due_tolerance`, or running under an expired lease; attempts left).

        Returns (the claimed row, None), or (None, the row as it was) when the condition failed,
        told by DynamoDB itself (`ReturnValuesOnConditionCheckFailure`), so the caller can say why
        without another read; (None, None) when there is no such row.
        """
        request = self._update_request(
            key,
            JobStatus.RUNNING,
            now,
            condition="attribute_exists(pk) AND #kind = :kind AND attempts < :max_attempts AND ("
            "#status = :queued OR "
            "(#status = :retryable AND "
            "(attribute_not_exists(next_attempt_at) OR next_attempt_at <= :due_by)) OR "
            "(#status = :running AND lease_expires_at < :now AND awaiting_provider = :false))",
            sets=_claim_sets(now, lease),
            values={
                ":kind": key.kind,
                ":queued": JobStatus.QUEUED.value,
                ":retryable": JobStatus.FAILED_RETRYABLE.value,
                ":running": JobStatus.RUNNING.value,
                ":now": iso(now),
                ":due_by": iso(now + due_tolerance),
                ":false": False,
                ":max_attempts": max_attempts,
            },
        )
        request["ExpressionAttributeNames"]["#kind"] = "kind"
        try:
            response = self._table.update_item(
                **request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
            return None, job_from_item(deserialize_item(old)) if old else None
        return job_from_item(response["Attributes"]), None

    def claim_recheck(
        self, job: Job, *, now: datetime, lease: timedelta, check: str, counts_as_attempt: bool = False
    ) -> Job | None:
        """Claim a job whose provider task is still running, *without* spending an attempt (unless
        `counts_as_attempt`: a workflow's merge step, the first attempt of its own budget).

        Only the re-check message that carries the row's current `recheck_id` wins, once: the id
        is removed by the claim, so a duplicate of that message (or of an older one) finds
        nothing to claim.
        """
        sets: dict[str, Any] = {
            "lease_expires_at": iso(now + lease),
            "claim_id": uuid.uuid4().hex,
            "awaiting_provider": False,
            "recheck_id": None,
        }
        if counts_as_attempt:
            sets |= {"attempts": ("attempts + :one", 1), "started_at": iso(now)}
        return self._transition(
            job,
            JobStatus.RUNNING,
            now,
            condition="#status = :running AND awaiting_provider = :true AND recheck_id = :check",
            sets=sets,
            values={":running": JobStatus.RUNNING.value, ":true": True, ":check": check},
            lost_race_returns_none=True,
        )

    def await_provider(self, job: Job, *, now: datetime, handle: str | None, hold: timedelta) -> Job:
        """The provider is still working: keep `running`, remember its handle, release the claim.

        The returned row's `recheck_id` is what the next re-check message must carry.
        """
        result = self._transition(
            job,
            JobStatus.RUNNING,
            now,
            condition=_OWN_CLAIM,
            sets={
                "awaiting_provider": True,
                "provider_handle": handle,
                "provider_checks": ("if_not_exists(provider_checks, :zero) + :one", 1),
                "recheck_id": uuid.uuid4().hex,
                # If the re-check message is lost, the lease expiry lets the sweeper find the row.
                "lease_expires_at": iso(now + hold),
            },
            values=_claim_values(job),
        )
        assert result is not None
        return result

    def succeed(
        self,
        job: Job,
        *,
        now: datetime,
        result: Any,
        result_ref: str | None,
        model: str | None,
        usage: dict[str, int],
        cost: float | None,
        extra_writes: Sequence[dict[str, Any]] = (),
    ) -> Job:
        """`running` -> `succeeded` by the claim holder; `extra_writes` (the day's spend counters,
        aijobs.spend) ride in the same transaction, so they happen exactly when the row changes."""
        sets: dict[str, Any] = {
            "finished_at": iso(now),
            "result_json": json.dumps(result) if result is not None else None,
            "result_ref": result_ref,
            "model": model or job.model,
            "usage_json": json.dumps(usage) if usage else None,
            "cost": str(cost) if cost is not None else None,
        }
        if job.charge_state == CHARGE_RESERVED and not job.is_parent:
            sets["charge_state"] = CHARGE_SETTLED
        log_sets, log_values = attempt_log_update(job, now, JobStatus.SUCCEEDED)
        return self._finish(
            job, JobStatus.SUCCEEDED, now, condition=_OWN_CLAIM, sets=sets | log_sets,
            values=_claim_values(job) | log_values,
            remove=_FINISHED_REMOVES, extra_writes=extra_writes,
        )  # fmt: skip

    def fail_retryable(
        self,
        job: Job,
        *,
        now: datetime,
        error_class: str,
        message: str,
        retry_at: datetime | None = None,
        task_ended: bool = False,
    ) -> None:
        """A failed attempt that may be retried, not before `retry_at` (back-off or Retry-After).
        TransitionConflict when the claim was lost or the owner cancelled the job meanwhile (the
        caller then ends it as cancelled: a cancelled job is never tried again).

        `task_ended`: the attempt found its asynchronous provider task ended `Failed`; the row
        forgets the task's handle (and its check count) and counts the task, so the retry starts
        a new task instead of checking the dead one again."""
        log_sets, log_values = attempt_log_update(job, now, JobStatus.FAILED_RETRYABLE, error_class, message)
        if task_ended:
            log_sets |= {
                "provider_handle": None,
                "provider_checks": None,
                "provider_tasks": ("if_not_exists(provider_tasks, :zero) + :one", 1),
            }
        self._transition_quietly(
            job,
            JobStatus.FAILED_RETRYABLE,
            now,
            condition=f"{_OWN_CLAIM} AND attribute_not_exists(cancel_requested_at)",
            sets={
                "last_error_class": error_class,
                "last_error_message": clip(message),
                "next_attempt_at": iso(retry_at) if retry_at is not None else None,
                **log_sets,
            },
            values=_claim_values(job) | log_values,
            remove=("lease_expires_at",),
        )

    def fail_final(
        self,
        job: Job,
        *,
        now: datetime,
        error_class: str,
        message: str,
        dead_lettered: bool = False,
        own_claim: bool = True,
        callback: bool = True,
        only_from: Sequence[JobStatus] = (),
    ) -> Job:
        """Finalize a job, refunding its reserved credits in the same transaction (exactly once).

        From the consumer (`own_claim`), only the claim holder may finalize; from the DLQ consumer,
        the sweeper, an operator or a cancel, any job that has not finished may. `callback=False`:
        no webhook for this outcome (a job whose submit was answered with an error). `only_from`:
        only while the row is still in one of these states (a cancel finalizes a job only if no
        consumer claimed it since it was read).
        """
        if own_claim:
            condition, values = _OWN_CLAIM, _claim_values(job)
        elif only_from:
            names = {f":from{index}": status.value for index, status in enumerate(only_from)}
            condition, values = f"attribute_exists(pk) AND #status IN ({', '.join(names)})", names
        else:
            condition = "attribute_exists(pk) AND NOT #status IN (:succeeded, :final)"
            values = {":succeeded": JobStatus.SUCCEEDED.value, ":final": JobStatus.FAILED_FINAL.value}
        sets: dict[str, Any] = {
            "finished_at": iso(now),
            "last_error_class": error_class,
            "last_error_message": clip(message),
            "dead_lettered": True if dead_lettered else None,  # absent means False: rows stay lean
            "awaiting_provider": False,
            "recheck_id": None,
            "next_attempt_at": None,
        }
        if not callback:
            sets["callbackUrl"] = None
            job = job.model_copy(update={"callback_url": None})
        log_sets, log_values = attempt_log_update(job, now, JobStatus.FAILED_FINAL, error_class, message)
        return self._finish(
            job, JobStatus.FAILED_FINAL, now, condition=condition, sets=sets | log_sets,
            values=values | log_values,
            remove=_FINISHED_REMOVES,
        )  # fmt: skip

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

    def requeue(self, job: Job, *, now: datetime, allowed_from: Sequence[JobStatus]) -> Job:
        """Operator re-run: reset the attempt budget and set `queued` (the caller re-sends).

        The tenant is not charged again: a job refunded at its final failure runs on the house,
        and the row says so (`charge_waived`); one still reserved (stranded between attempts) is
        settled or refunded as usual."""
        values = {f":from{i}": status.value for i, status in enumerate(allowed_from)}
        updated = self._transition(
            job,
            JobStatus.QUEUED,
            now,
            condition=f"#status IN ({', '.join(values)})",
            sets=_rerun_sets(job) | {"awaiting_provider": False, "provider_checks": None},
            values=values,
            remove=(
                "lease_expires_at",
                "finished_at",
                TTL_ATTRIBUTE,
                "provider_handle",
                "started_at",
                "recheck_id",
                "next_attempt_at",
                "cancel_requested_at",
                *CALLBACK_ATTRIBUTES,
            ),
        )
        assert updated is not None
        return updated

    def request_cancel(self, job: Job, *, now: datetime) -> Job | None:
        """Mark a `running` job cancelled by its owner (the first request's time is kept). The
        attempt under way cannot be recalled: it finishes, and then the job is never tried again.
        None when the row is no longer running (it finished, or its attempt failed meanwhile)."""
        try:
            response = self._table.update_item(
                Key={PK: user_pk(job.user_id), SK: job_sk(job.job_id)},
                UpdateExpression="SET cancel_requested_at = if_not_exists(cancel_requested_at, :now)",
                ConditionExpression="#status = :running",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":now": iso(now), ":running": JobStatus.RUNNING.value},
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return None
        return job_from_item(response["Attributes"])

    def release_expired_lease(self, job: Job, *, now: datetime, error_class: str) -> bool:
        """`running` whose lease expired (its consumer died) -> `failed_retryable`; False if it moved on."""
        return self._transition_quietly(
            job,
            JobStatus.FAILED_RETRYABLE,
            now,
            condition="#status = :running AND lease_expires_at = :seen AND lease_expires_at < :now",
            sets={
                "last_error_class": error_class,
                "last_error_message": "the consumer stopped before finishing",
            },
            values={
                ":running": JobStatus.RUNNING.value,
                ":seen": iso(job.lease_expires_at or now),
                ":now": iso(now),
            },
            remove=("lease_expires_at",),
            lost_race_returns_none=True,
        )

    def touch(self, job: Job, *, now: datetime, hold: timedelta | None = None) -> bool:
        """Claim the right to re-send a stale row's message: one caller wins per `updated_at`."""
        sets: dict[str, Any] = {}
        if hold is not None:
            sets["lease_expires_at"] = iso(now + hold)
        return self._transition_quietly(
            job,
            job.status,
            now,
            condition="#status = :seen_status AND updated_at = :seen_at",
            sets=sets,
            values={":seen_status": job.status.value, ":seen_at": iso(job.updated_at)},
            lost_race_returns_none=True,
        )

    def hold(self, key: JobKey, *, now: datetime, until: datetime) -> bool:
        """Mark a waiting row held until `until`, when its one copy (re-sent delayed by the caller)
        is due back, without reading it: the spend brake (aijobs.spend) and the tenant running cap.

        False when it is not `queued`/`failed_retryable`, or another copy of its message holds it
        already (its mark lies ahead): that copy is dropped, so duplicates do not pile up. Marking
        also moves `updated_at`, and the sweeper leaves a row alone while its hold is not overdue,
        so it does not re-send a held row as lost.
        """
        tolerance = min(_HOLD_TOLERANCE, (until - now) / 2)
        try:
            self._table.update_item(
                Key={PK: user_pk(key.user_id), SK: job_sk(key.job_id)},
                UpdateExpression="SET held_until = :until, updated_at = :now, gsi2sk = :gsi2sk",
                ConditionExpression="#status IN (:queued, :retryable) "
                "AND (attribute_not_exists(held_until) OR held_until <= :due)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":until": iso(until),
                    ":now": iso(now),
                    ":gsi2sk": f"{iso(now)}#{key.job_id}",
                    ":queued": JobStatus.QUEUED.value,
                    ":retryable": JobStatus.FAILED_RETRYABLE.value,
                    # A copy due back now may arrive a little early by this clock.
                    ":due": iso(now + tolerance),
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def delete_finished(self, job: Job) -> bool:
        """Remove a finished job past retention; False when it changed or is gone already."""
        try:
            self._table.delete_item(
                Key={PK: user_pk(job.user_id), SK: job_sk(job.job_id)},
                ConditionExpression="#status = :status AND updated_at = :seen_at",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":status": job.status.value, ":seen_at": iso(job.updated_at)},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    # --- workflows: a parent and its children (aijobs.workflows) -------------------------------

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
            condition=f"{_OWN_CLAIM} AND attribute_not_exists(children_total)",
            sets=sets, values=_claim_values(job),
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
            job, JobStatus.RUNNING, now, condition=_OWN_CLAIM,
            sets={"children_split": done, "lease_expires_at": iso(now + lease)}, values=_claim_values(job),
        )  # fmt: skip
        assert updated is not None
        return updated

    def stop_split(self, job: Job, *, done: int, now: datetime) -> Job:
        """Its owner cancelled the workflow during its split: the children written so far are all
        it will have (the parts not written are never made or charged)."""
        updated = self._transition(
            job, JobStatus.RUNNING, now, condition=_OWN_CLAIM,
            sets={"children_total": done, "children_split": done}, values=_claim_values(job),
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
            condition=_OWN_CLAIM,
            sets={
                "phase": PHASE_CHILDREN,
                "awaiting_provider": True,
                "recheck_id": uuid.uuid4().hex,
                "lease_expires_at": iso(now + hold),
                "claim_id": None,
            },
            values=_claim_values(job),
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
            query["ExclusiveStartKey"] = _decode_cursor(cursor, user_id, query)
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
        return Page(jobs=jobs, cursor=_encode_cursor(last_key) if last_key else None)

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
            sets=_rerun_sets(child) | {"awaiting_provider": False, "provider_checks": None},
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
            sets=_rerun_sets(job)
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


def position(job: Job) -> str:
    """Where a job sits in its kind-and-status listing (`newest_of_kind_status(below=...)`)."""
    return f"{iso(job.updated_at)}#{job.job_id}"


_OWN_CLAIM = "#status = :running AND claim_id = :claim_id"
# A finished row keeps no lease and no claim (checked by the finishing write itself, then dead
# weight on every later write of the row: webhook state, retention).
_FINISHED_REMOVES = ("lease_expires_at", "claim_id")


def _on_the_house(job: Job) -> bool:
    """Whether a re-run of `job` runs on the house: its price was already refunded (or, for a
    workflow parent, settled) at its final transition, and a re-run never reserves again."""
    return job.charge_state in (CHARGE_REFUNDED, CHARGE_SETTLED)


def _rerun_sets(job: Job) -> dict[str, Any]:
    """What every operator re-run writes: a fresh attempt budget; the error that ended the job
    kept as `previous_error_class` (the last error is the new run's, none yet: a row that still
    said `cancelled` while it runs again would lie); whether this run is on the house."""
    return {
        "attempts": 0,
        "dead_lettered": None,
        "reruns": ("if_not_exists(reruns, :zero) + :one", 1),
        "last_error_class": None,
        "last_error_message": None,
        "previous_error_class": job.last_error_class,
        "charge_waived": True if _on_the_house(job) else None,
    }


def _lost_race(job: Job, status: JobStatus, returns_none: bool) -> str | None:
    """The TransitionConflict message of a status change, or None where losing returns None."""
    return None if returns_none else f"job {job.job_id}: {job.status.value} -> {status.value} lost its race"


def _changed_between(after: str | None, before: str | None) -> tuple[str, dict[str, Any]]:
    """The `by_kind_status` key condition of a status partition (`:pk`, filled in per bucket) whose
    `gsi2sk` (`<updated_at>#<jobId>`) lies after `after` and before `before` (both inclusive when
    both are given: DynamoDB's BETWEEN), with its values."""
    if after is not None and before is not None:
        return "gsi2pk = :pk AND gsi2sk BETWEEN :after AND :before", {":after": after, ":before": before}
    if before is not None:
        return "gsi2pk = :pk AND gsi2sk < :before", {":before": before}
    if after is not None:
        return "gsi2pk = :pk AND gsi2sk > :after", {":after": after}
    return "gsi2pk = :pk", {}


def _claim_sets(now: datetime, lease: timedelta) -> dict[str, Any]:
    """A claim's writes: one more attempt, a fresh lease and claim id, no pending retry or hold."""
    return {
        "attempts": ("attempts + :one", 1),
        "started_at": iso(now),
        "lease_expires_at": iso(now + lease),
        "claim_id": uuid.uuid4().hex,
        "awaiting_provider": False,
        "next_attempt_at": None,
        "held_until": None,  # a hold (spend brake, tenant cap) ends when a copy claims the row
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


def _claim_values(job: Job) -> dict[str, Any]:
    return {":running": JobStatus.RUNNING.value, ":claim_id": job.claim_id}


def _encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, user_id: str, query: dict[str, Any]) -> dict[str, Any]:
    """Decode a cursor and check it is a key of the very query it continues, in the caller's rows:
    the same attributes (the table's, plus the index's for an index query), the same partition."""
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise MalformedRequestError("cursor is not valid", code="invalid_cursor") from None
    values = query["ExpressionAttributeValues"]
    on_index = "IndexName" in query
    wanted = {PK, SK, "gsi1pk", "gsi1sk"} if on_index else {PK, SK}
    valid = (
        isinstance(key, dict)
        and set(key) == wanted
        and all(isinstance(value, str) for value in key.values())
        and key[PK] == user_pk(user_id)
        and (
            key["gsi1pk"] == values[":pk"]
            if on_index
            else key[SK].startswith(str(values.get(":job") or values.get(":children")))
        )
    )
    if not valid:
        raise MalformedRequestError("cursor is not valid", code="invalid_cursor")
    return dict(key)
