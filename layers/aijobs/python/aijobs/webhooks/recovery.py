"""Re-sending webhook deliveries whose message was lost between the final commit and its send.

The final transition marks the delivery `pending` in the same write, so a process that died right
after it leaves a row that says so. The sweeper calls `resend_lost` on every run: a delivery still
pending and never tried LOST_GRACE after the job finished is queued again (a copy that was only
slow is a duplicate, which the consumer acknowledges without a second POST).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aijobs.observability import logger
from aijobs.queues import JobQueues
from aijobs.store.keys import PK, SK, IndexBuckets, iso, job_sk, user_pk
from aijobs.webhooks.messages import PENDING, queue_callback
from aijobs.webhooks.rows import CallbackRows

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

LOST_GRACE = timedelta(minutes=1)
# How far back the sweeper looks (jobs finished in this window): it runs every five minutes.
LOST_WINDOW = timedelta(hours=1)


def resend_lost(
    table: Table, queues: JobQueues, kinds: tuple[str, ...], now: datetime, *, buckets: IndexBuckets
) -> int:
    """Queue the lost deliveries of one shard again; returns how many were re-sent."""
    resent = 0
    for kind in kinds:
        lost = CallbackRows(table).lost(kind, now=now, window=LOST_WINDOW, grace=LOST_GRACE, buckets=buckets)
        for job in lost:
            # One sweeper run wins each re-send (two overlapping runs send once).
            try:
                table.update_item(
                    Key={PK: user_pk(job.user_id), SK: job_sk(job.job_id)},
                    UpdateExpression="SET callback_at = :now",
                    ConditionExpression="callback_state = :pending AND callback_at = :seen",
                    ExpressionAttributeValues={
                        ":now": iso(now),
                        ":pending": PENDING,
                        ":seen": iso(job.callback_at or now),
                    },
                )
            except ClientError as error:
                if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    continue
                raise
            if queue_callback(queues, job):
                resent += 1
                logger.info("lost webhook delivery re-sent", extra={"jobId": job.job_id, "kind": kind})
    return resent
