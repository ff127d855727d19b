"""Record the AWS calls a piece of code makes, from botocore's own events (no patching).

Each call becomes the IAM actions it needs: a `TransactWriteItems` is authorized item by item
(`PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem` on each item's table), a `Query` on
an index is authorized on `table/index/*`. The infra tests compare these with each function's
policy; the benchmarks count them per job.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3

from aijobs import aws
from aijobs.store.keys import PK

_TRANSACT_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_BATCH_WRITE_ACTIONS = {"PutRequest": "PutItem", "DeleteRequest": "DeleteItem"}


@dataclass(frozen=True)
class Access:
    """One IAM action on one resource: `dynamodb:PutItem` on a table (and its leading key)."""

    action: str
    table: str | None = None
    index: bool = False
    leading_key: str | None = None


@dataclass
class CallLog:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (service, operation) as sent
    accesses: list[Access] = field(default_factory=list)
    # Set to a list to keep each call's parameters too (the benchmark replays them).
    keep_params: list[tuple[str, str, dict[str, Any]]] | None = None

    def count(self, service: str | None = None) -> int:
        return sum(1 for s, _ in self.calls if service is None or s == service)

    def clear(self) -> None:
        self.calls.clear()
        self.accesses.clear()

    def record(self, service: str, operation: str, params: dict[str, Any]) -> None:
        self.calls.append((service, operation))
        self.accesses.extend(_accesses(service, operation, params))
        if self.keep_params is not None:
            self.keep_params.append((service, operation, copy.deepcopy(params)))


def _plain(value: Any) -> Any:
    """A key value as the resource layer passes it, or as the low-level client does ({"S": ...})."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("S", "N", "B"):
        return next(iter(value.values()))
    return value


def _leading(key_or_item: dict[str, Any] | None) -> str | None:
    if not key_or_item or PK not in key_or_item:
        return None
    return str(_plain(key_or_item[PK]))


def _accesses(service: str, operation: str, params: dict[str, Any]) -> list[Access]:
    if service != "dynamodb":
        return [Access(f"{service}:{operation}")]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found = []
        for entry in params.get("TransactItems", []):
            ((kind, item),) = entry.items()
            key = item.get("Item") if kind == "Put" else item.get("Key")
            found.append(
                Access(f"dynamodb:{_TRANSACT_ITEM_ACTIONS[kind]}", item["TableName"], False, _leading(key))
            )
        return found
    if operation == "BatchWriteItem":
        return [
            Access(
                f"dynamodb:{_BATCH_WRITE_ACTIONS[kind]}",
                table,
                False,
                _leading(body.get("Item") or body.get("Key")),
            )
            for table, requests in params.get("RequestItems", {}).items()
            for request in requests
            for kind, body in request.items()
        ]
    if operation == "BatchGetItem":
        return [Access("dynamodb:BatchGetItem", table) for table in params.get("RequestItems", {})]
    key = params.get("Item") if operation == "PutItem" else params.get("Key")
    return [
        Access(f"dynamodb:{operation}", params.get("TableName"), bool(params.get("IndexName")), _leading(key))
    ]


@contextmanager
def recording_calls() -> Iterator[CallLog]:
    """Record every AWS call made by clients created inside the block (aijobs' cached clients are
    dropped on entry, since botocore copies its event hooks into a client when it is created)."""
    log = CallLog()
    session = boto3._get_default_session()._session

    def on_call(**event: Any) -> None:
        model = event["model"]
        log.record(model.service_model.endpoint_prefix, model.name, event["params"])

    session.register("provide-client-params", on_call)
    aws.reset_clients()
    try:
        yield log
    finally:
        session.unregister("provide-client-params", on_call)
        aws.reset_clients()
