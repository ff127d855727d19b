"""A job row's transitions, each one conditional: claims (from a message, a provider re-check),
waiting on a provider, success, a retryable or final failure, an operator re-run, a cancel request,
a lapsed lease released, a hold, and the removal of a finished row past retention.

A transition that loses its race raises `TransitionConflict` (or returns None for a claim): at
least once delivery makes duplicates normal, and the row is the source of truth.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus
from aijobs.store.attempt_log import attempt_log_update, clip
from aijobs.store.job_finish import CALLBACK_ATTRIBUTES, JobFinish
from aijobs.store.job_items import (
    CHARGE_REFUNDED,
    CHARGE_RESERVED,
    CHARGE_SETTLED,
    JobKey,
    deserialize_item,
    job_from_item,
)
from aijobs.store.job_table import OWN_CLAIM, claim_values
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, iso, job_sk, user_pk

# A held job's own copy, back after the hold, may beat its mark by this much (clocks differ), or
# by half its hold when that is shorter: a duplicate arriving in between is still dropped.
_HOLD_TOLERANCE = timedelta(seconds=10)


# A finished row keeps no lease and no claim (checked by the finishing write itself, then dead
# weight on every later write of the row: webhook state, retention).
_FINISHED_REMOVES = ("lease_expires_at", "claim_id")


class JobTransitions(JobFinish):
    """The state transitions of a job row (a workflow's own are in aijobs.store.workflow_rows)."""

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
            condition=OWN_CLAIM,
            sets={
                "awaiting_provider": True,
                "provider_handle": handle,
                "provider_checks": ("if_not_exists(provider_checks, :zero) + :one", 1),
                "recheck_id": uuid.uuid4().hex,
                # If the re-check message is lost, the lease expiry lets the sweeper find the row.
                "lease_expires_at": iso(now + hold),
            },
            values=claim_values(job),
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
            job, JobStatus.SUCCEEDED, now, condition=OWN_CLAIM, sets=sets | log_sets,
            values=claim_values(job) | log_values,
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
            condition=f"{OWN_CLAIM} AND attribute_not_exists(cancel_requested_at)",
            sets={
                "last_error_class": error_class,
                "last_error_message": clip(message),
                "next_attempt_at": iso(retry_at) if retry_at is not None else None,
                **log_sets,
            },
            values=claim_values(job) | log_values,
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
            condition, values = OWN_CLAIM, claim_values(job)
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
            sets=rerun_sets(job) | {"awaiting_provider": False, "provider_checks": None},
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


def _on_the_house(job: Job) -> bool:
    """Whether a re-run of `job` runs on the house: its price was already refunded (or, for a
    workflow parent, settled) at its final transition, and a re-run never reserves again."""
    return job.charge_state in (CHARGE_REFUNDED, CHARGE_SETTLED)


def rerun_sets(job: Job) -> dict[str, Any]:
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
