"""The credits ledger of a tenant shard: grants that expire, a balance, append-only transactions.

Money moves only inside DynamoDB transactions whose conditions make each movement happen once:
- a job's price is reserved in the same transaction that writes its row (no row without payment);
- `failed_final` refunds in the same transaction as the status change, guarded by the row's
  `charge_state` (reserved -> refunded happens once, however many consumers or operators race);
- a grant expires once (its `expired` flag is the condition), at most `limit` per cron run.
Debits draw on the grants that expire first, so expiry only removes credit nobody has spent.

Invariant (tested with hypothesis): balance == grants - debits + refunds - expired, never < 0,
where each sum is the balance item's `archived_<type>` total plus the transaction rows not folded
into it.

Retention: with the stage's credit-transaction retention known (aijobs.store.retention), a
transaction is folded into its `archived_<type>` total in the very transaction that writes it, and
its row carries a DynamoDB TTL: DynamoDB removes it when retention is over, free and at any rate,
and the totals already hold it. Without (no retention configured), the row goes into the `TX`
expiry index instead, and the `*/10` run archives it later, at most 100 per shard and run (folding
it then). `Transaction.folded` tells the two apart; sums over rows must skip folded ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.conditions import Key

from aijobs.bounds import CREDIT_GRANT
from aijobs.errors import PaymentRequiredError
from aijobs.ids import new_job_id
from aijobs.store.keys import PK, SK, TTL_ATTRIBUTE, IndexBuckets, iso, parse_iso, query_buckets, user_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

BALANCE_SK = "CREDITS"
# The `by_due` partitions shared by every tenant of a shard; items are written to a bucket of each
# (`GRANT#<b>`, `TX#<b>`, from the grant or transaction id) and read from all of them.
GRANT_DUE_PK = "GRANT"
TX_DUE_PK = "TX"
TX_TYPES = ("grant", "debit", "refund", "expire")
#: A transaction row whose amount its balance item's totals already hold (and that expires by TTL).
FOLDED = "folded"


def grant_sk(grant_id: str) -> str:
    return f"GRANT#{grant_id}"


def tx_sk(tx_id: str) -> str:
    return f"TX#{tx_id}"


@dataclass(frozen=True)
class Grant:
    user_id: str
    grant_id: str
    amount: int
    remaining: int
    expires_at: datetime
    expired: bool


@dataclass(frozen=True)
class Transaction:
    user_id: str
    tx_id: str
    type: str
    amount: int
    created_at: datetime
    job_id: str | None = None
    grant_id: str | None = None
    #: Already in the account's `archived` totals (written folded; its row expires by TTL).
    folded: bool = False


@dataclass(frozen=True)
class Account:
    balance: int
    #: Per type, the amounts no longer counted row by row: folded as written, or archived by the run.
    archived: dict[str, int]


class CreditLedger:
    """Credits of the users of one shard table."""

    def __init__(
        self,
        table: Table,
        clock: Callable[[], datetime],
        *,
        buckets: IndexBuckets,
        retention: Callable[[], timedelta | None] | None = None,
    ) -> None:
        self._table = table
        self._clock = clock
        self._buckets = buckets
        # How long a transaction row is kept (None: unknown, the maintenance run archives it).
        self._retention = retention

    @property
    def table_name(self) -> str:
        return self._table.name

    # --- reads -------------------------------------------------------------------------------

    def account(self, user_id: str) -> Account:
        item = self._table.get_item(Key={PK: user_pk(user_id), SK: BALANCE_SK}, ConsistentRead=True).get(
            "Item", {}
        )
        return Account(
            balance=int(item.get("balance", 0)),  # type: ignore[arg-type]
            archived={t: int(item.get(f"archived_{t}", 0)) for t in TX_TYPES},  # type: ignore[arg-type]
        )

    def grants(self, user_id: str) -> list[Grant]:
        items = self._query_user(user_id, "GRANT#")
        return sorted((_grant(item) for item in items), key=lambda g: (g.expires_at, g.grant_id))

    def transactions(self, user_id: str, *, limit: int | None = None) -> list[Transaction]:
        """A user's transactions, newest first."""
        items = self._query_user(user_id, "TX#", newest_first=True, limit=limit)
        return [_transaction(item) for item in items]

    def _query_user(
        self, user_id: str, prefix: str, *, newest_first: bool = False, limit: int | None = None
    ) -> list[dict[str, Any]]:
        query: dict[str, Any] = {
            "KeyConditionExpression": Key(PK).eq(user_pk(user_id)) & Key(SK).begins_with(prefix),
            "ConsistentRead": True,
            "ScanIndexForward": not newest_first,
        }
        items: list[dict[str, Any]] = []
        while True:
            if limit is not None:
                query["Limit"] = limit - len(items)
            response = self._table.query(**query)
            items.extend(response["Items"])
            if "LastEvaluatedKey" not in response or (limit is not None and len(items) >= limit):
                return items
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    # --- grants ------------------------------------------------------------------------------

    def grant(self, user_id: str, amount: int, expires_at: datetime, *, grant_id: str | None = None) -> str:
        """Add credits that expire at `expires_at`. A repeated `grant_id` is refused (idempotent).
        BoundError (a ValueError) for an amount outside aijobs.bounds, and nothing is written."""
        amount = CREDIT_GRANT.whole(amount)
        now = self._clock()
        if expires_at <= now:
            raise ValueError("a grant must expire in the future")
        grant_id = grant_id or new_job_id(int(now.timestamp() * 1000))
        self._transact(
            self._fold(
                user_id,
                [
                    self._put(
                        {
                            PK: user_pk(user_id),
                            SK: grant_sk(grant_id),
                            "grant_id": grant_id,
                            "userId": user_id,
                            "amount": amount,
                            "remaining": amount,
                            "expires_at": iso(expires_at),
                            "created_at": iso(now),
                            "expired": False,
                            "gsi3pk": self._buckets.partition(GRANT_DUE_PK, grant_id),
                            "gsi3sk": f"{iso(expires_at)}#{user_id}#{grant_id}",
                        },
                        condition="attribute_not_exists(pk)",
                    ),
                    self._balance_update(user_id, amount),
                    self._tx_put(user_id, "grant", amount, now, grant_id=grant_id),
                ],
            )
        )
        return grant_id

    # --- reservations and refunds (writes that ride in the job's own transaction) ------------

    def reserve(self, user_id: str, job_id: str, price: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Writes that debit `price`, drawn from the grants expiring first, and that allocation.

        Raises PaymentRequiredError when the unexpired grants do not cover the price.
        """
        now = self._clock()
        usable = [g for g in self.grants(user_id) if not g.expired and g.expires_at > now and g.remaining > 0]
        available = sum(g.remaining for g in usable)
        if available < price:
            raise PaymentRequiredError(
                f"this job costs {price} credits; you have {available}",
                details={"price": price, "balance": available},
            )
        allocation: dict[str, int] = {}
        writes = [self._balance_update(user_id, -price, require_at_least=price)]
        owed = price
        for grant in usable:
            take = min(owed, grant.remaining)
            allocation[grant.grant_id] = take
            writes.append(
                self._update(
                    {PK: user_pk(user_id), SK: grant_sk(grant.grant_id)},
                    "SET remaining = remaining - :take",
                    condition="remaining >= :take AND expired = :false AND expires_at > :now",
                    values={":take": take, ":false": False, ":now": iso(now)},
                )
            )
            owed -= take
            if owed == 0:
                break
        writes.append(self._tx_put(user_id, "debit", price, now, job_id=job_id))
        return self._fold(user_id, writes), allocation

    def refund(self, user_id: str, job_id: str, allocation: dict[str, int]) -> list[dict[str, Any]]:
        """Writes that give a job's debit back to the grants it came from.

        Credit drawn from a grant that has expired since is refunded and expired at once, so the
        refund never outlives the grant it belonged to.
        """
        now = self._clock()
        by_id = {g.grant_id: g for g in self.grants(user_id)}
        writes: list[dict[str, Any]] = []
        back_to_balance = 0
        expired_again = 0
        for grant_id, take in allocation.items():
            grant = by_id.get(grant_id)
            if grant is None or grant.expired:
                expired_again += take
                continue
            back_to_balance += take
            writes.append(
                self._update(
                    {PK: user_pk(user_id), SK: grant_sk(grant_id)},
                    "SET remaining = remaining + :take",
                    condition="expired = :false",
                    values={":take": take, ":false": False},
                )
            )
        total = back_to_balance + expired_again
        writes.append(self._tx_put(user_id, "refund", total, now, job_id=job_id))
        if expired_again:
            writes.append(self._tx_put(user_id, "expire", expired_again, now, job_id=job_id, suffix="x"))
        if back_to_balance:
            writes.append(self._balance_update(user_id, back_to_balance))
        return self._fold(user_id, writes)

    # --- cron: expiry and retention ------------------------------------------------------------

    def due_grants(self, now: datetime, limit: int) -> list[Grant]:
        """The `limit` grants that fell due first, across every bucket."""
        # Sort keys are `<expires_at>#<user>#<grant>`: "$" sorts right after "#", so this
        # includes every grant expiring at `now` exactly.
        items = self._due(GRANT_DUE_PK, iso(now) + "$", limit)
        return [_grant(item) for item in items]

    def expire(self, grant: Grant) -> bool:
        """Expire one grant's unspent credit; False when another run (or a debit) got there first."""
        now = self._clock()
        key = {PK: user_pk(grant.user_id), SK: grant_sk(grant.grant_id)}
        update = self._update(
            key,
            "SET expired = :true, remaining = :zero REMOVE gsi3pk, gsi3sk",
            condition="expired = :false AND remaining = :seen",
            values={":true": True, ":false": False, ":zero": 0, ":seen": grant.remaining},
        )
        writes = [update]
        if grant.remaining:
            writes += [
                self._balance_update(grant.user_id, -grant.remaining, require_at_least=grant.remaining),
                self._tx_put(grant.user_id, "expire", grant.remaining, now, grant_id=grant.grant_id),
            ]
        try:
            self._transact(self._fold(grant.user_id, writes))
        except self._table.meta.client.exceptions.TransactionCanceledException:
            return False
        return True

    def expire_due(self, now: datetime, limit: int = 20) -> int:
        """Expire at most `limit` due grants; the rest waits for the next run."""
        return sum(self.expire(grant) for grant in self.due_grants(now, limit))

    def old_transactions(self, before: datetime, limit: int) -> list[dict[str, Any]]:
        """The `limit` oldest transactions created before `before`, across every bucket (only the
        rows written without a known retention are in the index: folded ones expire by TTL)."""
        return self._due(TX_DUE_PK, iso(before), limit)

    def _due(self, base: str, before: str, limit: int) -> list[dict[str, Any]]:
        return query_buckets(
            self._table,
            self._buckets.partitions(base),
            sort_key="gsi3sk",
            limit=limit,
            query={
                "IndexName": "by_due",
                "KeyConditionExpression": "gsi3pk = :pk AND gsi3sk < :before",
                "ExpressionAttributeValues": {":before": before},
            },
        )

    def archive(self, item: dict[str, Any]) -> bool:
        """Remove one transaction past retention, folding its amount into the account's totals."""
        user_id = str(item["userId"])
        try:
            self._transact(
                [
                    {
                        "Delete": {
                            "TableName": self.table_name,
                            "Key": {PK: item[PK], SK: item[SK]},
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                    self._update(
                        {PK: user_pk(user_id), SK: BALANCE_SK},
                        f"ADD archived_{item['type']} :amount",
                        values={":amount": int(item["amount"])},
                    ),
                ]
            )
        except self._table.meta.client.exceptions.TransactionCanceledException:
            return False  # another run removed it first
        return True

    def cleanup_transactions(self, before: datetime, limit: int = 100) -> int:
        return sum(self.archive(item) for item in self.old_transactions(before, limit))

    # --- write builders ------------------------------------------------------------------------

    def _put(self, item: dict[str, Any], *, condition: str | None = None) -> dict[str, Any]:
        put: dict[str, Any] = {"TableName": self.table_name, "Item": item}
        if condition:
            put["ConditionExpression"] = condition
        return {"Put": put}

    def _update(
        self, key: dict[str, str], expression: str, *, condition: str | None = None, values: dict[str, Any]
    ) -> dict[str, Any]:
        update: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": key,
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values,
        }
        if condition:
            update["ConditionExpression"] = condition
        return {"Update": update}

    def _balance_update(
        self, user_id: str, delta: int, *, require_at_least: int | None = None
    ) -> dict[str, Any]:
        values: dict[str, Any] = {":delta": delta}
        condition = None
        if require_at_least is not None:
            condition, values[":need"] = "balance >= :need", require_at_least
        return self._update(
            {PK: user_pk(user_id), SK: BALANCE_SK}, "ADD balance :delta", condition=condition, values=values
        )

    def _tx_put(
        self,
        user_id: str,
        kind: str,
        amount: int,
        now: datetime,
        *,
        job_id: str | None = None,
        grant_id: str | None = None,
        suffix: str = "",
    ) -> dict[str, Any]:
        tx_id = new_job_id(int(now.timestamp() * 1000)) + suffix
        item: dict[str, Any] = {
            PK: user_pk(user_id),
            SK: tx_sk(tx_id),
            "tx_id": tx_id,
            "userId": user_id,
            "type": kind,
            "amount": amount,
            "created_at": iso(now),
        }
        kept = self._retention() if self._retention is not None else None
        if kept is None:  # retention unknown: into the expiry index, archived by the */10 run
            item["gsi3pk"] = self._buckets.partition(TX_DUE_PK, tx_id)
            item["gsi3sk"] = f"{iso(now)}#{user_id}#{tx_id}"
        else:  # folded into the totals by `_fold`, in the same transaction; DynamoDB removes the row
            item[FOLDED] = True
            item[TTL_ATTRIBUTE] = int((now + kept).timestamp())
        if job_id:
            item["jobId"] = job_id
        if grant_id:
            item["grant_id"] = grant_id
        return self._put(item, condition="attribute_not_exists(pk)")

    def _fold(self, user_id: str, writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Add the amounts of the folded transaction rows among `writes` to the balance item's
        `archived_<type>` totals, in the same DynamoDB transaction: counted once, as written."""
        amounts: dict[str, int] = defaultdict(int)
        for write in writes:
            item = write.get("Put", {}).get("Item", {})
            if item.get(FOLDED) and str(item.get(SK, "")).startswith("TX#"):
                amounts[str(item["type"])] += int(item["amount"])
        if not amounts:
            return writes
        key = {PK: user_pk(user_id), SK: BALANCE_SK}
        balance = next((w["Update"] for w in writes if "Update" in w and w["Update"]["Key"] == key), None)
        if balance is None:  # a transaction that moves no balance still records its totals
            balance = self._balance_update(user_id, 0)["Update"]
            writes = [*writes, {"Update": balance}]
        balance["UpdateExpression"] += "".join(f", archived_{kind} :fold_{kind}" for kind in amounts)
        balance["ExpressionAttributeValues"] = {
            **balance["ExpressionAttributeValues"],
            **{f":fold_{kind}": amount for kind, amount in amounts.items()},
        }
        return writes

    def _transact(self, writes: list[dict[str, Any]]) -> None:
        self._table.meta.client.transact_write_items(TransactItems=writes)  # type: ignore[arg-type]


def _grant(item: dict[str, Any]) -> Grant:
    return Grant(
        user_id=str(item["userId"]),
        grant_id=str(item["grant_id"]),
        amount=int(item["amount"]),
        remaining=int(item["remaining"]),
        expires_at=parse_iso(str(item["expires_at"])),
        expired=bool(item.get("expired", False)),
    )


def _transaction(item: dict[str, Any]) -> Transaction:
    return Transaction(
        user_id=str(item["userId"]),
        tx_id=str(item["tx_id"]),
        type=str(item["type"]),
        amount=int(item["amount"]),
        created_at=parse_iso(str(item["created_at"])),
        job_id=item.get("jobId"),
        grant_id=item.get("grant_id"),
        folded=bool(item.get(FOLDED, False)),
    )
