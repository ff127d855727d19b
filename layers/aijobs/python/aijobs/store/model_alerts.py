"""Model alert markers in the meta table: an unavailable or ageing model alerts once, not per job.

One item per model and state (`MODEL#<model id>` / `ALERT#<state>`): `failing` when a consumer saw
jobs of the model fail with `model_unavailable`; `legacy`, `end_of_life` or `not_found` when the
weekly check (aijobs.scheduled.models) found it so. Marking is a conditional write: of the containers and runs
that see the same model in the same state at once, exactly one marks it and alerts. A marker whose
alert could not be sent is withdrawn, so the next sighting alerts again.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aijobs.store.keys import PK, SK, iso, model_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

# The states a marker records.
FAILING = "failing"
LEGACY = "legacy"
END_OF_LIFE = "end_of_life"
NOT_FOUND = "not_found"


def _lost_race(error: ClientError) -> bool:
    return error.response["Error"]["Code"] == "ConditionalCheckFailedException"


class ModelAlerts:
    def __init__(self, meta: Table) -> None:
        self._meta = meta

    @staticmethod
    def _key(model: str, state: str) -> dict[str, str]:
        return {PK: model_pk(model), SK: f"ALERT#{state}"}

    def mark(self, model: str, state: str, now: datetime) -> bool:
        """True for the one caller that records `model` in `state` first (it alerts)."""
        try:
            self._meta.update_item(
                Key=self._key(model, state),
                UpdateExpression="SET alerted_at = :now",
                ConditionExpression="attribute_not_exists(alerted_at)",
                ExpressionAttributeValues={":now": iso(now)},
            )
        except ClientError as error:
            if _lost_race(error):
                return False
            raise
        return True

    def withdraw(self, model: str, state: str, now: datetime) -> None:
        """Undo this caller's marker (its alert could not be sent), so the next sighting alerts."""
        try:
            self._meta.update_item(
                Key=self._key(model, state),
                UpdateExpression="REMOVE alerted_at",
                ConditionExpression="alerted_at = :now",
                ExpressionAttributeValues={":now": iso(now)},
            )
        except ClientError as error:
            if not _lost_race(error):
                raise
