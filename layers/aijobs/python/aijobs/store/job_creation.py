"""A new job row: written with its Idempotency-Key record (and whatever must happen with it) in one
transaction, and the key's record read back or freed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from aijobs.domain import Job
from aijobs.store.job_items import job_to_item
from aijobs.store.job_table import JobTable
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, idempotency_sk, user_pk

IDEMPOTENCY_TTL = timedelta(hours=24)


class IdempotencyKeyExists(Exception):
    """The user already sent this Idempotency-Key; carries what it was used for."""

    def __init__(self, job_id: str, request_hash: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id
        self.request_hash = request_hash


class JobCreation(JobTable):
    """Creating job rows, each at most once per Idempotency-Key."""

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
