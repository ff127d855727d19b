"""The meta table's user directory: which tenant shard holds a user's data, and API keys."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aijobs.domain import utcnow
from aijobs.ids import new_api_key
from aijobs.store.keys import API_KEY_SK, PK, PROFILE_SK, SHARD_PK, SK, api_key_pk, iso, user_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table


@dataclass(frozen=True)
class Principal:
    """Who a request is: resolved from an API key, never from anything the client claims."""

    user_id: str
    role: str = "user"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_api_key(key: str) -> str:
    # Keys are 256-bit random tokens, so a fast hash is enough (no dictionary attack applies).
    return hashlib.sha256(key.encode()).hexdigest()


class Directory:
    """Users -> shard index, API keys, and the shard registry, in the meta table.

    The user -> shard lookup is cached per container: a consumer has no request context and
    re-opens the user's shard from `userId` on every message.
    """

    def __init__(self, meta: Table, shard_tables: tuple[Table, ...]) -> None:
        self.meta = meta
        self.shard_tables = shard_tables
        self._shard_of: dict[str, int] = {}

    def shard_for(self, user_id: str) -> Table | None:
        """The user's shard table, or None for an unknown user."""
        index = self._shard_of.get(user_id)
        if index is None:
            item = self.meta.get_item(Key={PK: user_pk(user_id), SK: PROFILE_SK}).get("Item")
            if item is None:
                return None
            index = int(item["shard"])  # type: ignore[arg-type]
            self._shard_of[user_id] = index
        if index >= len(self.shard_tables):
            raise RuntimeError(
                f"user is mapped to shard {index}, but only {len(self.shard_tables)} shards exist"
            )
        return self.shard_tables[index]

    def authenticate(self, key: str) -> Principal | None:
        item = self.meta.get_item(Key={PK: api_key_pk(hash_api_key(key)), SK: API_KEY_SK}).get("Item")
        if item is None or item.get("revoked"):
            return None
        return Principal(user_id=str(item["userId"]), role=str(item.get("role", "user")))

    def ensure_user(self, user_id: str) -> int:
        """Create the user's profile on a shard (stable by hash) unless it exists; returns the shard."""
        shard = int(hashlib.sha256(user_id.encode()).hexdigest(), 16) % len(self.shard_tables)
        self.meta.update_item(
            Key={PK: user_pk(user_id), SK: PROFILE_SK},
            UpdateExpression="SET #shard = if_not_exists(#shard, :shard), "
            "created_at = if_not_exists(created_at, :now)",
            ExpressionAttributeNames={"#shard": "shard"},
            ExpressionAttributeValues={":shard": shard, ":now": iso(utcnow())},
        )
        item = self.meta.get_item(Key={PK: user_pk(user_id), SK: PROFILE_SK}, ConsistentRead=True)["Item"]
        return int(item["shard"])  # type: ignore[arg-type]

    def create_api_key(self, user_id: str, *, role: str = "user", label: str = "") -> str:
        """Issue a key for a user (creating the user); the plaintext is returned once, never stored."""
        if role not in ("user", "admin"):
            raise ValueError(f"role must be 'user' or 'admin', not {role!r}")
        self.ensure_user(user_id)
        key = new_api_key()
        self.meta.put_item(
            Item={
                PK: api_key_pk(hash_api_key(key)),
                SK: API_KEY_SK,
                "userId": user_id,
                "role": role,
                "label": label,
                "created_at": iso(utcnow()),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return key

    def active_shards(self) -> list[int]:
        """Shard indexes marked active in the registry; every configured shard when none is listed."""
        items: list[dict[str, Any]] = self.meta.query(
            KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": SHARD_PK}
        )["Items"]
        if not items:
            return list(range(len(self.shard_tables)))
        return sorted(int(str(i[SK])) for i in items if i.get("status") == "active")
