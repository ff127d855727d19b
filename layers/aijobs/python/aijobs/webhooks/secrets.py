"""Each tenant's webhook signing secret, in the meta table (`WEBHOOK#<userId>` / `SECRET`).

The secret is returned once, when created or rotated; afterwards only whether one exists and when
it was made. A rotation keeps the previous secret valid for ROTATION_OVERLAP, so receivers can
switch without dropping deliveries. Nothing here logs a secret or puts one in a message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aijobs.domain import utcnow
from aijobs.errors import ConflictError
from aijobs.store.keys import PK, SK, WEBHOOK_SECRET_SK, iso, parse_iso, webhook_secret_pk
from aijobs.webhooks.signing import new_secret

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

ROTATION_OVERLAP = timedelta(hours=24)
_ROTATE_ATTEMPTS = 3


@dataclass(frozen=True)
class SecretStatus:
    """What may be shown about a tenant's secret: never the secret itself."""

    exists: bool
    created_at: datetime | None = None
    # Until when the secret replaced by the last rotation still signs (None: no such secret).
    previous_expires_at: datetime | None = None


@dataclass(frozen=True)
class IssuedSecret:
    """A secret just created: the only time it is handed out."""

    secret: str = field(repr=False)
    created_at: datetime
    previous_expires_at: datetime | None = None


class WebhookSecrets:
    def __init__(self, meta: Table, clock: Callable[[], datetime] = utcnow) -> None:
        self._meta = meta
        self._clock = clock

    def rotate(self, user_id: str) -> IssuedSecret:
        """Create the tenant's secret, or replace it (the old one signs for ROTATION_OVERLAP more).
        Two rotations at once: one wins, the other is a ConflictError (retry it)."""
        for _attempt in range(_ROTATE_ATTEMPTS):
            current = self._item(user_id)
            now = self._clock()
            secret = new_secret()
            item: dict[str, str] = {
                PK: webhook_secret_pk(user_id),
                SK: WEBHOOK_SECRET_SK,
                "secret": secret,
                "created_at": iso(now),
            }
            previous_expires = None
            if current is not None:
                previous_expires = now + ROTATION_OVERLAP
                item |= {"previous_secret": current["secret"], "previous_expires_at": iso(previous_expires)}
            try:
                if current is None:
                    self._meta.put_item(Item=item, ConditionExpression="attribute_not_exists(pk)")
                else:
                    self._meta.put_item(
                        Item=item,
                        ConditionExpression="created_at = :seen",
                        ExpressionAttributeValues={":seen": current["created_at"]},
                    )
            except ClientError as error:
                if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                continue  # rotated by someone else meanwhile: rotate that one
            return IssuedSecret(secret, now, previous_expires)
        raise ConflictError("the webhook secret is being rotated concurrently; retry", code="secret_busy")

    def status(self, user_id: str) -> SecretStatus:
        item = self._item(user_id)
        if item is None:
            return SecretStatus(exists=False)
        previous = _moment(item.get("previous_expires_at"))
        return SecretStatus(
            exists=True,
            created_at=_moment(item.get("created_at")),
            previous_expires_at=previous if previous is not None and previous > self._clock() else None,
        )

    def signing_secrets(self, user_id: str) -> list[str]:
        """The secrets a delivery is signed with now: the current one, then the previous one
        while its overlap lasts. Empty when the tenant has none."""
        item = self._item(user_id)
        if item is None:
            return []
        found = [str(item["secret"])]
        previous_until = _moment(item.get("previous_expires_at"))
        if item.get("previous_secret") and previous_until is not None and previous_until > self._clock():
            found.append(str(item["previous_secret"]))
        return found

    def _item(self, user_id: str) -> dict[str, str] | None:
        response = self._meta.get_item(
            Key={PK: webhook_secret_pk(user_id), SK: WEBHOOK_SECRET_SK}, ConsistentRead=True
        )
        item = response.get("Item")
        return {name: str(value) for name, value in item.items()} if item is not None else None


def _moment(value: object) -> datetime | None:
    return parse_iso(str(value)) if value else None
