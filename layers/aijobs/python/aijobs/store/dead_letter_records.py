"""The operator list of dead letters in the meta table (`DEADLETTER#<kind>`, see TABLES.md).

Written by the DLQ consumer (aijobs.dead_letters); read by operators: the CLI and the admin API,
which must not import the DLQ consumer's code.

One entry per job. What became of it is the job row's to say (`resolution_of`); the entry only
keeps its place in the list, as the partition of its `by_time` index key (`ListPart`):

- `open`: recorded by the DLQ consumer and not acted on. A dead-lettered row changes only through
  an operator re-run (or retention removes it), so these are counted without reading any row.
- `rerun`: an operator re-ran the job (`mark_rerun`), or a read found its row moved on: the row
  decides, read whenever the entry is listed or counted.
- `resolved`: the row said succeeded, failed by an operator, cancelled or gone when last read.

A new dead-lettering of the job rewrites the entry, which puts it back in `open`. Every move is
conditional on the entry being the one that was read (the same dead-lettering, the same re-run
count), so a DLQ redelivery, a re-run and two operators listing at once never leave it stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from aijobs.domain import Job, JobStatus
from aijobs.errors import CANCELLED, FAILED_BY_OPERATOR
from aijobs.store.keys import PK, SK, dead_letter_list_pk, dead_letter_pk, iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

__all__ = [
    "DeadLetter",
    "DeadLetterStatus",
    "ListPart",
    "Resolution",
    "count_dead_letters",
    "list_dead_letters",
    "mark_rerun",
    "resolution_of",
    "settle",
]


class ListPart(StrEnum):
    """Where an entry stands in the list (its index partition)."""

    OPEN = "open"
    RERUN = "rerun"
    RESOLVED = "resolved"


class Resolution(StrEnum):
    """What became of a dead letter, from its job's row."""

    OPEN = "open"  # dead-lettered, nobody has decided yet
    RERUNNING = "rerunning"  # re-run by an operator, and that run has not ended
    RERUN_FAILED = "rerun_failed"  # re-run, and failed for good again (not dead-lettered): decide again
    SUCCEEDED = "succeeded"  # re-run and succeeded (or it succeeded after all)
    FAILED_BY_OPERATOR = "failed_by_operator"  # given up for good by an operator
    CANCELLED = "cancelled"  # cancelled (by its owner, or with its workflow)
    GONE = "gone"  # the row is gone (retention): nothing is left to decide

    @property
    def is_open(self) -> bool:
        return self in (Resolution.OPEN, Resolution.RERUNNING, Resolution.RERUN_FAILED)


class DeadLetter(BaseModel):
    """One entry of the operator-visible dead-letter list."""

    # Built on first use (`defer_build`): the API imports it for its operator routes only.
    model_config = ConfigDict(defer_build=True)

    kind: str
    job_id: str
    user_id: str | None = None
    attempts: int
    last_error_class: str | None = None
    last_error_message: str | None = None
    dead_lettered_at: str
    message_id: str
    receive_count: int
    # The row's status when it was recorded (the list shows the row's status now).
    job_status: str | None = None
    # The row's finished_at: each dead-lettering of a job (a re-run may die again) is one entry.
    job_finished_at: str | None = None
    # A workflow child's parent: re-run the parent, which re-runs its failed children.
    parent_id: str | None = None
    # The row's re-run count when an operator last re-ran it (`mark_rerun`): a move made from an
    # older read of the entry loses to that re-run.
    job_reruns: int | None = None
    rerun_at: str | None = None
    # What became of it, as last settled (the list reads it from the row each time it shows it).
    resolution: str | None = None
    resolved_at: str | None = None
    # Read from the index key, never written as an attribute.
    part: ListPart = Field(default=ListPart.OPEN, exclude=True)

    @property
    def sort_key(self) -> str:
        return f"{self.dead_lettered_at}#{self.job_id}"


@dataclass(frozen=True)
class DeadLetterStatus:
    """An entry with its job's row as it is now (None: gone, or an unreadable letter)."""

    entry: DeadLetter
    job: Job | None
    resolution: Resolution


def resolution_of(entry: DeadLetter, job: Job | None) -> Resolution:
    """What became of the dead letter `entry`, given its job's row now."""
    if entry.user_id is None:
        return Resolution.OPEN  # an unreadable letter: no row to look at
    if job is None:
        return Resolution.GONE
    if job.status is JobStatus.SUCCEEDED:
        return Resolution.SUCCEEDED
    if job.status is not JobStatus.FAILED_FINAL:
        return Resolution.RERUNNING if job.reruns else Resolution.OPEN
    if job.last_error_class == FAILED_BY_OPERATOR:
        return Resolution.FAILED_BY_OPERATOR
    if job.last_error_class == CANCELLED:
        return Resolution.CANCELLED
    ended_again = job.finished_at is not None and iso(job.finished_at) != entry.job_finished_at
    if ended_again and not job.dead_lettered:
        return Resolution.RERUN_FAILED
    return Resolution.OPEN  # dead (again: the DLQ consumer records the new dead-lettering)


def _part_for(entry: DeadLetter, resolution: Resolution) -> ListPart:
    if not resolution.is_open:
        return ListPart.RESOLVED
    if resolution is Resolution.OPEN and entry.part is ListPart.OPEN:
        return ListPart.OPEN
    # Open again after an operator touched it: only the DLQ consumer's new record is `open`, so the
    # `open` part stays countable without reading rows.
    return ListPart.RERUN


def list_dead_letters(
    meta: Table, kind: str, *, limit: int = 50, parts: tuple[ListPart, ...] = tuple(ListPart)
) -> list[DeadLetter]:
    """One kind's entries in `parts` of the list (all of them by default), newest first."""
    fields = DeadLetter.model_fields
    entries: list[DeadLetter] = []
    for part in parts:
        response = meta.query(
            IndexName="by_time",
            KeyConditionExpression=Key("gsi1pk").eq(dead_letter_list_pk(kind, part)),
            ScanIndexForward=False,
            Limit=limit,
        )
        entries.extend(
            DeadLetter.model_validate({k: v for k, v in item.items() if k in fields} | {"part": part})
            for item in response["Items"]
        )
    entries.sort(key=lambda entry: entry.sort_key, reverse=True)
    return entries[:limit]


def count_dead_letters(meta: Table, kind: str, part: ListPart, *, cap: int) -> int:
    """How many entries one part of a kind's list holds, counted up to `cap` (an index count: no
    item is returned)."""
    query: dict[str, Any] = {
        "IndexName": "by_time",
        "KeyConditionExpression": Key("gsi1pk").eq(dead_letter_list_pk(kind, part)),
        "Select": "COUNT",
    }
    counted = 0
    while counted < cap:
        response = meta.query(**query, Limit=cap - counted)
        counted += int(response["Count"])
        if "LastEvaluatedKey" not in response:
            break
        query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
    return min(counted, cap)


def settle(meta: Table, entry: DeadLetter, job: Job | None, now: datetime) -> DeadLetterStatus:
    """The entry with what became of it; moves it to the part of the list its row puts it in, on
    condition that it is still the entry that was read (else it stays: the next read settles it)."""
    resolution = resolution_of(entry, job)
    target = _part_for(entry, resolution)
    status = DeadLetterStatus(entry=entry, job=job, resolution=resolution)
    if target is entry.part:
        return status
    values: dict[str, Any] = {
        ":to": dead_letter_list_pk(entry.kind, target),
        ":from": dead_letter_list_pk(entry.kind, entry.part),
        ":sk": entry.sort_key,
        ":resolution": resolution.value,
    }
    assignments = ["gsi1pk = :to", "resolution = :resolution"]
    removals = []
    if job is not None:
        assignments.append("job_status = :status")
        values[":status"] = job.status.value
    if target is ListPart.RESOLVED:
        assignments.append("resolved_at = :now")
        values[":now"] = iso(now)
    else:
        removals.append("resolved_at")
    condition = "gsi1pk = :from AND gsi1sk = :sk"
    if entry.job_reruns is None:
        condition += " AND attribute_not_exists(job_reruns)"
    else:
        condition += " AND job_reruns = :reruns"
        values[":reruns"] = entry.job_reruns
    update = "SET " + ", ".join(assignments) + (" REMOVE " + ", ".join(removals) if removals else "")
    try:
        meta.update_item(
            Key={PK: dead_letter_pk(entry.kind), SK: f"JOB#{entry.job_id}"},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
    return status


def mark_rerun(meta: Table, job: Job, now: datetime) -> bool:
    """An operator re-ran `job` (the row as the re-run left it): its entry, if it has one, goes
    to the `rerun` part, where its row is read to say what becomes of it. False: no entry."""
    try:
        meta.update_item(
            Key={PK: dead_letter_pk(job.kind), SK: f"JOB#{job.job_id}"},
            UpdateExpression="SET gsi1pk = :rerun, job_reruns = :reruns, rerun_at = :now, "
            "job_status = :status REMOVE resolution, resolved_at",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={
                ":rerun": dead_letter_list_pk(job.kind, ListPart.RERUN),
                ":reruns": job.reruns,
                ":now": iso(now),
                ":status": job.status.value,
            },
        )
    except ClientError as error:
        if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False
        raise
    return True
