"""The operator list of dead letters in the meta table (`DEADLETTER#<kind>`, see TABLES.md).

Written by the DLQ consumer (aijobs.dead_letters); read by operators: the CLI and the admin API,
which must not import the DLQ consumer's code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from boto3.dynamodb.conditions import Key
from pydantic import BaseModel, ConfigDict

from aijobs.store.keys import dead_letter_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

__all__ = ["DeadLetter", "list_dead_letters"]


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
    job_status: str | None = None
    # The row's finished_at: each dead-lettering of a job (a re-run may die again) is one entry.
    job_finished_at: str | None = None
    # A workflow child's parent: re-run the parent, which re-runs its failed children.
    parent_id: str | None = None


def list_dead_letters(meta: Table, kind: str, *, limit: int = 50) -> list[DeadLetter]:
    """The operator list of one kind, newest first."""
    response = meta.query(
        IndexName="by_time",
        KeyConditionExpression=Key("gsi1pk").eq(dead_letter_pk(kind)),
        ScanIndexForward=False,
        Limit=limit,
    )
    fields = DeadLetter.model_fields
    return [
        DeadLetter.model_validate({k: v for k, v in item.items() if k in fields})
        for item in response["Items"]
    ]
