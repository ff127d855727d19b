"""The meta table's user directory: which tenant shard holds a user's data, and API keys."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.bounds import SPEND_CAP_USD, TENANT_MAX_RUNNING, stored
from aijobs.domain import utcnow
from aijobs.errors import AijobsError
from aijobs.ids import new_api_key
from aijobs.store.jobs import JobStore
from aijobs.store.keys import (
    API_KEY_SK,
    PK,
    PROFILE_SK,
    SHARD_PK,
    SK,
    IndexBuckets,
    api_key_pk,
    iso,
    user_pk,
)
from aijobs.store.retention import RETENTION_KEY, RetentionReader

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb.service_resource import Table


# How long a container trusts a valid API key it looked up (see Directory.authenticate).
API_KEY_CACHE_SECONDS = 60
# Key roles: `operator` runs the stage (the admin routes, the console); `admin` is its old name.
USER_ROLE, OPERATOR_ROLE = "user", "operator"
OPERATOR_ROLES = frozenset({OPERATOR_ROLE, "admin"})

# How long a container trusts a user's profile (its per-tenant limits) once read.
PROFILE_CACHE_SECONDS = 60


class OrphanedShardError(AijobsError):
    """The shard registry lists a shard that holds tenants but is not configured any more."""


@dataclass(frozen=True)
class Principal:
    """Who a request is: resolved from an API key, never from anything the client claims."""

    user_id: str
    role: str = "user"

    @property
    def is_operator(self) -> bool:
        """May use the operator routes (`/admin/...`, the console). `admin` is the role's old name:
        keys issued with it before keep working."""
        return self.role in OPERATOR_ROLES

    @property
    def is_admin(self) -> bool:
        return self.is_operator


@dataclass(frozen=True)
class TenantProfile:
    """A user's `PROFILE` item: its shard, and the limits an operator set for it alone."""

    shard: int
    # Jobs of this tenant running at once, per kind; None: the stage's TENANT_MAX_RUNNING.
    max_running: int | None = None
    # Its own daily model-spend cap in USD (aijobs.spend); None: none.
    spend_cap_usd: Decimal | None = None

    def running_cap(self, stage_default: int) -> int:
        """The cap that applies (0: none)."""
        return self.max_running if self.max_running is not None else stage_default


def hash_api_key(key: str) -> str:
    # Keys are 256-bit random tokens, so a fast hash is enough (no dictionary attack applies).
    return hashlib.sha256(key.encode()).hexdigest()


class Directory:
    """Users -> shard index, API keys, and the shard registry, in the meta table.

    The user -> shard lookup is cached per container: a consumer has no request context and
    re-opens the user's shard from `userId` on every message.
    """

    def __init__(self, meta: Table, shard_tables: tuple[Table, ...], *, buckets: IndexBuckets) -> None:
        self.meta = meta
        self.shard_tables = shard_tables
        # The stage's INDEX_BUCKETS: every JobStore opened on these tables uses them.
        self.buckets = buckets
        self._shard_of: dict[str, int] = {}
        self._registered: set[int] = set()
        self._keys: dict[str, tuple[Principal, float]] = {}  # key hash -> (principal, valid until)
        self._profiles: dict[str, tuple[TenantProfile, float]] = {}  # user -> (profile, valid until)
        self._monotonic = time.monotonic
        # How long finished jobs and credit transactions are kept, read on first use and cached.
        self.retention = RetentionReader(meta)

    def job_store(self, table: Table, clock: Callable[[], datetime] = utcnow) -> JobStore:
        """A JobStore on one of this stage's shard tables: its index buckets, and the retention
        its final transitions and credit transactions stamp as their rows' TTL."""
        return JobStore(
            table,
            clock,
            buckets=self.buckets,
            task_retention=self.retention.tasks,
            transaction_retention=self.retention.transactions,
        )

    def _lookup(self, key: dict[str, str]) -> dict[str, Any] | None:
        """One meta item (eventually consistent, like every cached lookup here). While this
        container's retention is due (its first lookup, then every RETENTION_CACHE_SECONDS), the
        retention item rides in the same request (BatchGetItem), so a cold producer or consumer
        makes no call of its own for it. A key DynamoDB leaves unprocessed (throttling) is read
        alone, or for the retention, left due."""
        if not self.retention.due():
            return self.meta.get_item(Key=key).get("Item")
        table = self.meta.name
        # The resource's client takes and gives plain Python values (its stubs say otherwise).
        response: Any = self.meta.meta.client.batch_get_item(
            RequestItems={table: {"Keys": [key, RETENTION_KEY]}}
        )
        found = {(item[PK], item[SK]): item for item in response.get("Responses", {}).get(table, [])}
        unprocessed = response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        if RETENTION_KEY not in unprocessed:
            self.retention.accept(found.get((RETENTION_KEY[PK], RETENTION_KEY[SK])))
        if key in unprocessed:
            return self.meta.get_item(Key=key).get("Item")
        item: dict[str, Any] | None = found.get((key[PK], key[SK]))
        return item

    def profile(self, user_id: str) -> TenantProfile | None:
        """The user's profile (None for an unknown user), cached for PROFILE_CACHE_SECONDS: a limit
        an operator changes takes effect in every container within that time."""
        cached = self._profiles.get(user_id)
        if cached is not None and self._monotonic() < cached[1]:
            return cached[0]
        item = self._lookup({PK: user_pk(user_id), SK: PROFILE_SK})
        if item is None:
            self._profiles.pop(user_id, None)
            return None
        # A limit written around the writers is read as absent (aijobs.bounds.stored logs it):
        # the stage's TENANT_MAX_RUNNING, no own spend cap (the stage's cap still brakes).
        where = f"{user_id}/{PROFILE_SK}"
        raw_cap = stored(
            TENANT_MAX_RUNNING, item.get("max_running"), where=f"{where}.max_running",
            fallback="TENANT_MAX_RUNNING",
        )  # fmt: skip
        profile = TenantProfile(
            shard=int(item["shard"]),
            max_running=None if raw_cap is None else int(raw_cap),
            spend_cap_usd=stored(
                SPEND_CAP_USD,
                item.get("spend_cap_usd"),
                where=f"{where}.spend_cap_usd",
                fallback="no own cap",
            ),
        )
        self._shard_of.setdefault(user_id, profile.shard)
        self._profiles[user_id] = (profile, self._monotonic() + PROFILE_CACHE_SECONDS)
        return profile

    def set_max_running(self, user_id: str, cap: int | None) -> None:
        """Give a user its own running cap per kind (`None`: back to the stage's default).
        Raises `KeyError` for an unknown user: a limit never creates a tenant; BoundError (a
        ValueError) for a cap outside aijobs.bounds, and nothing is written."""
        if cap is not None:
            cap = TENANT_MAX_RUNNING.whole(cap)
        request: dict[str, Any] = {
            "Key": {PK: user_pk(user_id), SK: PROFILE_SK},
            "ConditionExpression": "attribute_exists(pk)",
        }
        if cap is None:
            request["UpdateExpression"] = "REMOVE max_running"
        else:
            request |= {
                "UpdateExpression": "SET max_running = :cap",
                "ExpressionAttributeValues": {":cap": cap},
            }
        try:
            self.meta.update_item(**request)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise KeyError(user_id) from None
            raise
        self._profiles.pop(user_id, None)

    def shard_for(self, user_id: str) -> Table | None:
        """The user's shard table, or None for an unknown user."""
        index = self._shard_of.get(user_id)
        if index is None:
            profile = self.profile(user_id)
            if profile is None:
                return None
            index = profile.shard
        if index >= len(self.shard_tables):
            raise RuntimeError(
                f"user is mapped to shard {index}, but only {len(self.shard_tables)} shards exist"
            )
        return self.shard_tables[index]

    def authenticate(self, key: str) -> Principal | None:
        """The key's principal. A valid key is remembered for API_KEY_CACHE_SECONDS per container,
        so a warm producer makes no lookup: revoking a key takes effect within that time. Unknown
        and revoked keys are never cached (a new key works at once). The key item also carries
        its user's shard (written with the key), which spares the user -> shard lookup."""
        digest = hash_api_key(key)
        cached = self._keys.get(digest)
        if cached is not None and self._monotonic() < cached[1]:
            return cached[0]
        item = self._lookup({PK: api_key_pk(digest), SK: API_KEY_SK})
        if item is None or item.get("revoked"):
            self._keys.pop(digest, None)
            return None
        principal = Principal(user_id=str(item["userId"]), role=str(item.get("role", "user")))
        if "shard" in item:  # a user's shard never changes once assigned
            self._shard_of.setdefault(principal.user_id, int(item["shard"]))
        self._keys[digest] = (principal, self._monotonic() + API_KEY_CACHE_SECONDS)
        return principal

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
        index = int(item["shard"])  # type: ignore[arg-type]
        self.register_shard(index)
        return index

    def register_shard(self, index: int) -> None:
        """Record that shard `index` holds tenants (written once, on its first user; cached).

        The registry outlives configuration changes: if SHARD_COUNT is ever lowered below a shard
        that holds users, maintenance fails loudly instead of silently skipping their credits.
        """
        if index in self._registered:
            return
        try:
            self.meta.put_item(
                Item={PK: SHARD_PK, SK: str(index), "status": "active", "registered_at": iso(utcnow())},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        self._registered.add(index)

    def create_api_key(self, user_id: str, *, role: str = "user", label: str = "") -> str:
        """Issue a key for a user (creating the user); the plaintext is returned once, never stored."""
        if role == "admin":
            role = OPERATOR_ROLE  # the old name of the role
        if role not in (USER_ROLE, OPERATOR_ROLE):
            raise ValueError(f"role must be 'user' or 'operator', not {role!r}")
        shard = self.ensure_user(user_id)
        key = new_api_key()
        self.meta.put_item(
            Item={
                PK: api_key_pk(hash_api_key(key)),
                SK: API_KEY_SK,
                "userId": user_id,
                "shard": shard,
                "role": role,
                "label": label,
                "created_at": iso(utcnow()),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return key

    def active_shards(self) -> list[int]:
        """Every shard a user can be on, for the cron jobs to visit: all configured shard tables
        (users are hashed over all of them, so each may hold tenants at any moment).

        Raises `OrphanedShardError` when the registry lists a shard that holds tenants but is no
        longer configured: their credits would never expire, so the run must fail loudly.
        """
        configured = list(range(len(self.shard_tables)))
        orphaned = sorted(set(self.registered_shards()) - set(configured))
        if orphaned:
            raise OrphanedShardError(
                f"shards {orphaned} hold tenants but SHARD_COUNT is {len(self.shard_tables)}: "
                "restore SHARD_COUNT (shards can be added, never removed)"
            )
        return configured

    def registered_shards(self) -> list[int]:
        """Shard indexes the registry records as holding tenants."""
        query: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": SHARD_PK},
            "ConsistentRead": True,
        }
        indexes: list[int] = []
        while True:
            response = self.meta.query(**query)
            indexes.extend(int(str(item[SK])) for item in response["Items"])
            if "LastEvaluatedKey" not in response:
                return sorted(indexes)
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
