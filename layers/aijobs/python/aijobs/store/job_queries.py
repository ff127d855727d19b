"""Reading job rows in bulk: a user's jobs page by page (with the opaque cursor that continues a
page), the jobs of a kind and status across index buckets, and the per-tenant running count.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aijobs.domain import Job, JobStatus
from aijobs.errors import MalformedRequestError
from aijobs.store.job_items import job_from_item
from aijobs.store.job_table import JobTable
from aijobs.store.keys import PK, SK, iso, kind_status_pk, query_buckets, user_pk, user_status_pk


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    cursor: str | None


class JobQueries(JobTable):
    """The queries over job rows: by user (and status, kind), by kind and status."""

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
            query["ExclusiveStartKey"] = decode_cursor(cursor, user_id, query)
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
        return Page(jobs=jobs[:limit], cursor=encode_cursor(last_key) if last_key else None)

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


def position(job: Job) -> str:
    """Where a job sits in its kind-and-status listing (`newest_of_kind_status(below=...)`)."""
    return f"{iso(job.updated_at)}#{job.job_id}"


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


def encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, user_id: str, query: dict[str, Any]) -> dict[str, Any]:
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
