"""The record of scheduled runs in the meta table: one run per expression and scheduled time.

EventBridge Scheduler delivers at least once, so the same firing can arrive twice, even at the
same moment. Seed 001's limits (expire 20 grants, clean up 100 transactions) are per run: a
duplicate firing must not become a second run. A run is claimed with a conditional write before
its handler starts; a run that failed gives its claim back (so a retry of that firing may run),
and a claim whose holder died (a Lambda killed by its timeout) lapses after the longest a Lambda
can live.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, cron_run_pk, iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

# Lambda's maximum timeout: a run still marked `started` after this died without finishing.
RUN_LEASE = timedelta(minutes=15)
# How long finished runs are remembered (DynamoDB TTL removes them afterwards).
RUN_MEMORY = timedelta(days=3)
STARTED, SUCCEEDED, FAILED = "started", "succeeded", "failed"


class CronRuns:
    def __init__(self, meta: Table) -> None:
        self._meta = meta

    def begin(self, expression: str, scheduled_time: str, execution_id: str | None, now: datetime) -> bool:
        """Claim the run of `expression` scheduled at `scheduled_time`; False when another delivery
        of the same firing has it (running, or finished successfully)."""
        try:
            self._meta.put_item(
                Item={
                    PK: cron_run_pk(expression),
                    SK: scheduled_time,
                    "state": STARTED,
                    "execution_id": execution_id or "",
                    "started_at": iso(now),
                    "lease_expires_at": iso(now + RUN_LEASE),
                    TTL_ATTRIBUTE: int((now + RUN_MEMORY).timestamp()),
                },
                ConditionExpression="attribute_not_exists(pk) OR #state = :failed OR lease_expires_at < :now",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":failed": FAILED, ":now": iso(now)},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def finish(self, expression: str, scheduled_time: str, *, succeeded: bool, now: datetime) -> None:
        self._meta.update_item(
            Key={PK: cron_run_pk(expression), SK: scheduled_time},
            UpdateExpression="SET #state = :state, finished_at = :now",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":state": SUCCEEDED if succeeded else FAILED, ":now": iso(now)},
        )
