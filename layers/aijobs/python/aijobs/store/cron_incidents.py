"""Cron incidents in the meta table: a cron that keeps failing alerts once, not on every run.

The first failed run of an expression opens its incident; later failures are only counted, and
the next successful run closes it (and says so). One item per expression, in the partition of its
run records (`CRONRUN#<expression>`, sort key `INCIDENT`), so the dispatcher's write grant on
those keys covers it. Opening and closing are conditional writes: of two runs that fail (or
recover) at the same moment, exactly one opens (or closes) the incident and alerts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.store.keys import PK, SK, cron_run_pk, iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

INCIDENT_SK = "INCIDENT"
OPEN, CLOSED = "open", "closed"
# Error text kept on the item (the alert carries the same): enough to recognise the failure.
ERROR_TEXT_MAX = 500


@dataclass(frozen=True)
class Incident:
    """A closed incident, as the recovery notice reports it."""

    expression: str
    opened_at: str
    closed_at: str
    failures: int
    last_error: str


def _lost_race(error: ClientError) -> bool:
    return error.response["Error"]["Code"] == "ConditionalCheckFailedException"


class CronIncidents:
    def __init__(self, meta: Table) -> None:
        self._meta = meta

    @staticmethod
    def _key(expression: str) -> dict[str, str]:
        return {PK: cron_run_pk(expression), SK: INCIDENT_SK}

    def record_failure(self, expression: str, *, error: str, now: datetime) -> bool:
        """Count a failed run of `expression`. True when this run opened the incident (the caller
        alerts); False when one was open already."""
        values: dict[str, Any] = {
            ":open": OPEN,
            ":now": iso(now),
            ":error": error[:ERROR_TEXT_MAX],
            ":one": 1,
        }
        # Two rounds: a success may close the incident between our open attempt and our count.
        for _ in range(2):
            try:
                self._meta.update_item(
                    Key=self._key(expression),
                    UpdateExpression="SET #state = :open, opened_at = :now, last_failure_at = :now, "
                    "last_error = :error, failures = :one REMOVE closed_at",
                    ConditionExpression="attribute_not_exists(#pk) OR #state <> :open",
                    ExpressionAttributeNames={"#state": "state", "#pk": PK},
                    ExpressionAttributeValues=values,
                )
                return True
            except ClientError as failure:
                if not _lost_race(failure):
                    raise
            try:
                self._meta.update_item(
                    Key=self._key(expression),
                    UpdateExpression="SET last_failure_at = :now, last_error = :error ADD failures :one",
                    ConditionExpression="#state = :open",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues=values,
                )
                return False
            except ClientError as failure:
                if not _lost_race(failure):
                    raise
        # Still racing after two rounds: alerting twice beats alerting never.
        return True

    def record_success(self, expression: str, *, now: datetime) -> Incident | None:
        """Close the open incident of `expression`; the closed incident, or None when none was open
        (the common case: one conditional write that fails its condition)."""
        try:
            response = self._meta.update_item(
                Key=self._key(expression),
                UpdateExpression="SET #state = :closed, closed_at = :now",
                ConditionExpression="#state = :open",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":open": OPEN, ":closed": CLOSED, ":now": iso(now)},
                ReturnValues="ALL_NEW",
            )
        except ClientError as failure:
            if _lost_race(failure):
                return None
            raise
        item = response["Attributes"]
        return Incident(
            expression=expression,
            opened_at=str(item.get("opened_at", "")),
            closed_at=str(item.get("closed_at", "")),
            failures=int(str(item.get("failures", 0))),
            last_error=str(item.get("last_error", "")),
        )

    def withdraw(self, expression: str) -> None:
        """Undo an opening whose alert could not be sent, so the next failure alerts again."""
        try:
            self._meta.update_item(
                Key=self._key(expression),
                UpdateExpression="SET #state = :closed",
                ConditionExpression="#state = :open",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":open": OPEN, ":closed": CLOSED},
            )
        except ClientError as failure:
            if not _lost_race(failure):
                raise
