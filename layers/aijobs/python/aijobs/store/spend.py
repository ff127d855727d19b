"""Daily model-spend counters and brake state (the spend brake, aijobs.spend; see TABLES.md).

Meta table, one partition per day (`SPEND#<day>`, the day in SPEND_TIME_ZONE): the stage's spend
spread over STAGE_BUCKETS counter items (a job adds to the bucket of its id, so no single item
takes every finish) and one `STATE` item (the operator's cap for the day, the release, the alert
marker). A tenant's spend of the day is one item in its own shard partition. Every counter write
rides in the job's final transaction (`JobStore.succeed(extra_writes=...)`), so a finish that
loses its race counts nothing and a counted cost is never lost.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.bounds import SPEND_CAP_USD, stored
from aijobs.store.keys import PK, PROFILE_SK, SK, TTL_ATTRIBUTE, iso, user_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

SPEND_PREFIX = "SPEND#"
STAGE_BUCKETS = 8
STATE_SK = "STATE"
TENANT_RELEASE_PREFIX = "RELEASE#"
# Capped tenants are listed through the meta table's sparse `by_time` index (gsi1pk on PROFILE).
CAPPED_TENANTS_PK = "SPENDCAP"
# Day items expire after this (TTL): long enough for `aijobs spend --day` to look back a month.
SPEND_RETENTION = timedelta(days=35)


def day_pk(day: str) -> str:
    return f"{SPEND_PREFIX}{day}"


def bucket_of(job_id: str) -> int:
    return zlib.crc32(job_id.encode()) % STAGE_BUCKETS


def usd(value: float | Decimal | str) -> Decimal:
    """A dollar amount as DynamoDB stores it (exact decimal, never a float's binary noise)."""
    return value if isinstance(value, Decimal) else Decimal(str(value))


@dataclass(frozen=True)
class DayState:
    """The stage's spend brake for one day, from one Query of its partition."""

    day: str
    stage_usd: Decimal = Decimal(0)
    # The operator's cap for this day (`aijobs spend cap --usd N`); None: the configured one.
    cap_usd: Decimal | None = None
    released: bool = False
    # The cap whose crossing was alerted today (a raised cap, crossed again, alerts again).
    alerted_cap: Decimal | None = None
    released_tenants: frozenset[str] = field(default_factory=frozenset)


class SpendRecords:
    """The spend items of the meta table and of the tenants' shards."""

    def __init__(self, meta: Table) -> None:
        self._meta = meta

    @property
    def meta_name(self) -> str:
        return self._meta.name

    # --- counting (writes of the job's final transaction) ------------------------------------

    def count_writes(
        self, *, day: str, job_id: str, user_id: str, cost: Decimal, shard_name: str, expires: datetime
    ) -> list[dict[str, Any]]:
        """Add `cost` to the stage's bucket and to the tenant's counter of `day`."""
        values = {":usd": cost, ":ttl": int(expires.timestamp())}
        update = "ADD usd :usd SET #ttl = if_not_exists(#ttl, :ttl)"
        names = {"#ttl": TTL_ATTRIBUTE}
        return [
            {
                "Update": {
                    "TableName": self._meta.name,
                    "Key": {PK: day_pk(day), SK: f"STAGE#{bucket_of(job_id)}"},
                    "UpdateExpression": update,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            },
            {
                "Update": {
                    "TableName": shard_name,
                    "Key": {PK: user_pk(user_id), SK: day_pk(day)},
                    "UpdateExpression": update,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            },
        ]

    # --- reads ---------------------------------------------------------------------------------

    def day_state(self, day: str) -> DayState:
        """The day's stage spend (its buckets summed) and brake state: one Query of one partition."""
        query: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": day_pk(day)},
        }
        total = Decimal(0)
        state: dict[str, Any] = {}
        released: set[str] = set()
        while True:
            response = self._meta.query(**query)
            for item in response["Items"]:
                sort_key = str(item[SK])
                if sort_key.startswith("STAGE#"):
                    total += usd(item.get("usd", 0))  # type: ignore[arg-type]
                elif sort_key == STATE_SK:
                    state = dict(item)
                elif sort_key.startswith(TENANT_RELEASE_PREFIX):
                    released.add(sort_key.removeprefix(TENANT_RELEASE_PREFIX))
            if "LastEvaluatedKey" not in response:
                break
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return DayState(
            day=day,
            stage_usd=total,
            cap_usd=stored(
                SPEND_CAP_USD,
                state.get("cap_usd"),
                where=f"{day_pk(day)}/{STATE_SK}.cap_usd",
                fallback="SPEND_DAILY_CAP_USD",
            ),
            released=bool(state.get("released", False)),
            alerted_cap=usd(state["alerted_cap"]) if "alerted_cap" in state else None,
            released_tenants=frozenset(released),
        )

    @staticmethod
    def tenant_days(shard: Table, user_id: str, since: str) -> list[tuple[str, Decimal]]:
        """The tenant's counted spend per day from `since` on, oldest first: one Query of its own
        partition (the day counters sort together)."""
        response = shard.query(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":pk": user_pk(user_id), ":from": day_pk(since), ":to": day_pk("9999-12-31"),
            },
        )  # fmt: skip
        return [
            (str(item[SK]).removeprefix(SPEND_PREFIX), usd(item.get("usd", 0)))  # type: ignore[arg-type]
            for item in response["Items"]
        ]

    @staticmethod
    def tenant_spend(shard: Table, user_id: str, day: str) -> Decimal:
        item = shard.get_item(Key={PK: user_pk(user_id), SK: day_pk(day)}).get("Item")
        return usd(item["usd"]) if item and "usd" in item else Decimal(0)  # type: ignore[arg-type]

    def capped_tenants(self) -> dict[str, Decimal]:
        """Every tenant with its own spend cap (operator listing; the sparse index)."""
        query: dict[str, Any] = {
            "IndexName": "by_time",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": {":pk": CAPPED_TENANTS_PK},
        }
        caps: dict[str, Decimal] = {}
        while True:
            response = self._meta.query(**query)
            for item in response["Items"]:
                user_id = str(item["gsi1sk"])
                cap = stored(
                    SPEND_CAP_USD, item.get("spend_cap_usd"), where=f"{user_id}/{PROFILE_SK}.spend_cap_usd",
                    fallback="no own cap",
                )  # fmt: skip
                if cap is not None:
                    caps[user_id] = cap
            if "LastEvaluatedKey" not in response:
                return caps
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    # --- the alert marker ----------------------------------------------------------------------

    def mark_alerted(self, day: str, cap: Decimal, now: datetime) -> bool:
        """True for the one caller that records the crossing of `cap` today (it alerts)."""
        try:
            self._meta.update_item(
                Key={PK: day_pk(day), SK: STATE_SK},
                UpdateExpression="SET alerted_cap = :cap, alerted_at = :now, "
                "#ttl = if_not_exists(#ttl, :ttl)",
                ConditionExpression="attribute_not_exists(alerted_cap) OR alerted_cap <> :cap",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={":cap": cap, ":now": iso(now), ":ttl": _expiry(now)},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def withdraw_alert(self, day: str, cap: Decimal) -> None:
        """Undo a marker whose alert could not be sent, so the next check alerts again."""
        try:
            self._meta.update_item(
                Key={PK: day_pk(day), SK: STATE_SK},
                UpdateExpression="REMOVE alerted_cap",
                ConditionExpression="alerted_cap = :cap",
                ExpressionAttributeValues={":cap": cap},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    # --- operator writes (the CLI) -------------------------------------------------------------

    def set_day_cap(self, day: str, cap: Decimal | None, now: datetime) -> None:
        """The stage's cap for `day` (None: back to SPEND_DAILY_CAP_USD). A new cap ends a release.
        BoundError (a ValueError) for a cap outside aijobs.bounds, and nothing is written."""
        cap = _checked_cap(cap)
        if cap is None:
            update, values = "REMOVE cap_usd, released", {}
        else:
            update = "SET cap_usd = :cap, #ttl = if_not_exists(#ttl, :ttl) REMOVE released"
            values = {":cap": cap, ":ttl": _expiry(now)}
        request: dict[str, Any] = {"Key": {PK: day_pk(day), SK: STATE_SK}, "UpdateExpression": update}
        if values:
            request |= {
                "ExpressionAttributeValues": values,
                "ExpressionAttributeNames": {"#ttl": TTL_ATTRIBUTE},
            }
        self._meta.update_item(**request)

    def release(self, day: str, now: datetime, user_id: str | None = None) -> None:
        """Lift the brake for the rest of `day`: the stage's, or one tenant's."""
        if user_id is None:
            self._meta.update_item(
                Key={PK: day_pk(day), SK: STATE_SK},
                UpdateExpression="SET released = :true, released_at = :now, #ttl = if_not_exists(#ttl, :ttl)",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={":true": True, ":now": iso(now), ":ttl": _expiry(now)},
            )
            return
        self._meta.put_item(
            Item={
                PK: day_pk(day),
                SK: f"{TENANT_RELEASE_PREFIX}{user_id}",
                "released_at": iso(now),
                TTL_ATTRIBUTE: _expiry(now),
            }
        )

    def set_tenant_cap(self, user_id: str, cap: Decimal | None, day: str) -> None:
        """A tenant's own daily cap on its profile (None: none); a new cap ends its release of the
        day. Raises KeyError for an unknown user: a cap never creates a tenant; BoundError (a
        ValueError) for a cap outside aijobs.bounds, and nothing is written."""
        cap = _checked_cap(cap)
        if cap is None:
            request: dict[str, Any] = {"UpdateExpression": "REMOVE spend_cap_usd, gsi1pk, gsi1sk"}
        else:
            request = {
                "UpdateExpression": "SET spend_cap_usd = :cap, gsi1pk = :capped, gsi1sk = :user",
                "ExpressionAttributeValues": {":cap": cap, ":capped": CAPPED_TENANTS_PK, ":user": user_id},
            }
        try:
            self._meta.update_item(
                Key={PK: user_pk(user_id), SK: PROFILE_SK},
                ConditionExpression="attribute_exists(pk)",
                **request,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise KeyError(user_id) from None
            raise
        self._meta.delete_item(Key={PK: day_pk(day), SK: f"{TENANT_RELEASE_PREFIX}{user_id}"})


def _checked_cap(cap: Decimal | None) -> Decimal | None:
    """A cap an operator sets, within aijobs.bounds (BoundError, a ValueError, otherwise)."""
    return None if cap is None else SPEND_CAP_USD.check(cap)


def _expiry(now: datetime) -> int:
    return int((now + SPEND_RETENTION).timestamp())
