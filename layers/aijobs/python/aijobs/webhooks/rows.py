"""The webhook delivery's state on its job row: claim, release, finish. Each write is conditional.

The job's status and index keys are never touched here: only the `callback_*` attributes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus
from aijobs.store.job_items import job_from_item
from aijobs.store.keys import PK, SK, IndexBuckets, iso, job_sk, kind_status_pk, user_pk
from aijobs.webhooks.messages import DELIVERED, FAILED, PENDING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

_ERROR_LIMIT = 300


@dataclass(frozen=True)
class Claim:
    """A delivery attempt this caller holds until `lease_expires_at`."""

    job: Job
    token: str


class CallbackRows:
    def __init__(self, table: Table) -> None:
        self._table = table

    def claim(self, job: Job, *, now: datetime, lease: timedelta) -> Claim | None:
        """Take the pending delivery for one attempt (attempts + 1); None when it is not pending
        any more, or another attempt holds it under a live lease (a duplicate message)."""
        token = uuid.uuid4().hex
        try:
            self._table.update_item(
                Key=_key(job),
                UpdateExpression="SET callback_lease = :lease, callback_claim = :token, "
                "callback_attempts = if_not_exists(callback_attempts, :zero) + :one",
                ConditionExpression="callback_state = :pending AND #status = :status AND "
                "(attribute_not_exists(callback_lease) OR callback_lease < :now)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":lease": iso(now + lease),
                    ":token": token,
                    ":zero": 0,
                    ":one": 1,
                    ":pending": PENDING,
                    ":status": job.status.value,
                    ":now": iso(now),
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise
        return Claim(job.model_copy(update={"callback_attempts": job.callback_attempts + 1}), token)

    def delivered(self, claim: Claim, *, now: datetime, status: int) -> bool:
        return self._settle(claim, now=now, state=DELIVERED, status=status, error=None)

    def failed(self, claim: Claim, *, now: datetime, status: int | None, error: str) -> bool:
        """Given up: no more attempts (a 4xx, a refused address, or the attempt cap)."""
        return self._settle(claim, now=now, state=FAILED, status=status, error=error)

    def retry_later(self, claim: Claim, *, now: datetime, status: int | None, error: str) -> bool:
        """Still pending: the attempt's outcome is recorded and its lease given back."""
        return self._settle(claim, now=now, state=PENDING, status=status, error=error)

    def _settle(
        self, claim: Claim, *, now: datetime, state: str, status: int | None, error: str | None
    ) -> bool:
        sets = ["callback_state = :state", "callback_at = :now"]
        removes = ["callback_lease", "callback_claim"]
        values: dict[str, Any] = {":state": state, ":now": iso(now), ":token": claim.token}
        if status is not None:
            sets.append("callback_status = :code")
            values[":code"] = status
        else:
            removes.append("callback_status")
        if error is not None:
            sets.append("callback_error = :error")
            values[":error"] = error[:_ERROR_LIMIT]
        else:
            removes.append("callback_error")
        try:
            self._table.update_item(
                Key=_key(claim.job),
                UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                ConditionExpression="callback_claim = :token",
                ExpressionAttributeValues=values,
            )
        except ClientError as failure:
            if failure.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False  # the lease ran out and another attempt took over: its outcome counts
            raise
        return True

    def lost(
        self, kind: str, *, now: datetime, window: timedelta, grace: timedelta, buckets: IndexBuckets
    ) -> list[Job]:
        """Finished jobs of `kind` (in the last `window`) whose delivery is pending and was never
        tried for longer than `grace`: their message was lost between the commit and the send.
        Reads every bucket of the kind's final statuses (and the legacy partition)."""
        found: list[Job] = []
        partitions = [
            partition
            for status in (JobStatus.SUCCEEDED, JobStatus.FAILED_FINAL)
            for partition in buckets.partitions(kind_status_pk(kind, status.value))
        ]
        for partition in partitions:
            query: dict[str, Any] = {
                "IndexName": "by_kind_status",
                "KeyConditionExpression": Key("gsi2pk").eq(partition)
                & Key("gsi2sk").between(iso(now - window), iso(now - grace)),
                "FilterExpression": Attr("callback_state").eq(PENDING)
                & Attr("callback_attempts").eq(0)
                & Attr("callback_at").lt(iso(now - grace)),
            }
            while True:
                response = self._table.query(**query)
                found.extend(job_from_item(item) for item in response["Items"])
                if "LastEvaluatedKey" not in response:
                    break
                query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return found


def _key(job: Job) -> dict[str, str]:
    return {PK: user_pk(job.user_id), SK: job_sk(job.job_id)}
