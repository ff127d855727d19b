"""aijobs_cli.moto_patches' DynamoDB patches answer as moto does: every patched path is run against
moto's own code (moto_patches.ORIGINALS) on the same data, and the answers compared whole. The
other patches, the version guard and what each patch module declares: test_moto_patches.py."""

from __future__ import annotations

import copy
import importlib
import itertools
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb import models
from moto.dynamodb.models import table as table_module
from moto.dynamodb.models.dynamo_type import DynamoType
from mypy_boto3_dynamodb import DynamoDBClient

from aijobs_cli import moto_patches
from aijobs_cli.moto_patches import (
    dynamodb_query_table_key,
    dynamodb_transaction_rollback,
    dynamodb_update_expressions,
)

# moto's parsing modules are untyped (`# type: ignore`): looked up as plain modules.
ast_nodes: Any = importlib.import_module("moto.dynamodb.parsing.ast_nodes")
expressions: Any = importlib.import_module("moto.dynamodb.parsing.expressions")
validators: Any = importlib.import_module("moto.dynamodb.parsing.validators")

TABLE = "speedups"
STREAMED = "speedups-streamed"
ACCOUNT, REGION = "123456789012", "us-east-1"


@pytest.fixture
def dynamodb() -> Iterator[DynamoDBClient]:
    moto_patches.apply()  # the suite's conftest applies it too; idempotent
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "gpk", "gsk")
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_g",
                    "KeySchema": [
                        {"AttributeName": "gpk", "KeyType": "HASH"},
                        {"AttributeName": "gsk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def _moto_table(name: str = TABLE) -> Any:
    return models.dynamodb_backends[ACCOUNT][REGION].tables[name]


def _item(pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": pk}, "sk": {"S": sk}}
    for name, value in attrs.items():
        item[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
    return item


def _everything(client: DynamoDBClient, name: str = TABLE) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": name}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return sorted(items, key=lambda item: (item["pk"]["S"], item["sk"]["S"]))
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@pytest.fixture
def moto_as_is(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call to put moto's own query, index walk and transactions back (for this test only)."""

    def restore() -> None:
        monkeypatch.setattr(table_module.Table, "query", moto_patches.ORIGINALS["Table.query"])
        monkeypatch.setattr(table_module.Table, "all_items", moto_patches.ORIGINALS["Table.all_items"])
        monkeypatch.setattr(
            models.DynamoDBBackend,
            "transact_write_items",
            moto_patches.ORIGINALS["DynamoDBBackend.transact_write_items"],
        )
        parser, validator = expressions.UpdateExpressionParser, validators.UpdateExpressionValidator
        monkeypatch.setattr(parser, "make", moto_patches.ORIGINALS["UpdateExpressionParser.make"])
        for name in ("__init__", "validate"):
            monkeypatch.setattr(validator, name, moto_patches.ORIGINALS[f"UpdateExpressionValidator.{name}"])
        monkeypatch.setattr(validators, "deepcopy", moto_patches.ORIGINALS["validators.deepcopy"])

    return restore


# --- dynamodb_transaction_rollback: a failure rolls every write back, from copies of the items ---


def _seed(client: DynamoDBClient) -> None:
    for pk, sk, n in [("u1", "A#1", 1), ("u1", "A#2", 1), ("u1", "B#1", 1), ("u2", "A#1", 1)]:
        client.put_item(TableName=TABLE, Item=_item(pk, sk, n=n))


def _update(pk: str, sk: str, condition: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {
        "TableName": TABLE,
        "Key": {"pk": {"S": pk}, "sk": {"S": sk}},
        "UpdateExpression": "SET n = n + :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }
    if condition:
        update["ConditionExpression"] = condition
        update["ExpressionAttributeValues"][":five"] = {"N": "5"}
    return {"Update": update}


def _put(pk: str, sk: str) -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": _item(pk, sk, n=9)}}


def _delete(pk: str, sk: str) -> dict[str, Any]:
    return {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": pk}, "sk": {"S": sk}}}}


# Each fails after writing something: every item must be as it was, as moto's own rollback leaves it.
FAILING = {
    "a condition fails last": [
        _update("u1", "A#1"),
        _put("u1", "A#3"),
        _put("u9", "new"),  # a partition the transaction creates
        _delete("u1", "B#1"),
        _update("u2", "A#1", condition="n = :five"),
    ],
    "a condition fails first": [
        _update("u2", "A#1", condition="n = :five"),
        _put("u1", "A#0"),
        _delete("u1", "A#2"),
    ],
    "an update creates an item, then a put fails": [
        _update("u8", "created"),  # an update of an absent item writes it
        _delete("u1", "A#1"),
        {"Put": {**_put("u1", "A#1")["Put"], "ConditionExpression": "attribute_not_exists(pk)"}},
    ],
    "the same item twice": [_update("u1", "A#1"), _put("u1", "A#9"), _delete("u1", "A#1")],
    "a key of the wrong type": [
        _put("u1", "A#5"),
        {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "u1"}, "sk": {"N": "1"}}}},
    ],
}


def _run_failing(client: DynamoDBClient, items: list[dict[str, Any]]) -> tuple[str, list[str]]:
    with pytest.raises(client.exceptions.ClientError) as caught:
        client.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
    reasons = caught.value.response.get("CancellationReasons", [])
    return caught.value.response["Error"]["Code"], [reason.get("Code", "None") for reason in reasons]


@pytest.mark.parametrize("case", sorted(FAILING))
def test_a_failed_transaction_leaves_every_item_as_it_was(
    dynamodb: DynamoDBClient, moto_as_is: Callable[[], None], case: str
) -> None:
    _seed(dynamodb)
    before = _everything(dynamodb)
    partitions = set(_moto_table().items)
    patched = _run_failing(dynamodb, FAILING[case])
    assert _everything(dynamodb) == before
    assert set(_moto_table().items) == partitions  # no partition left behind by the rollback
    moto_as_is()
    assert _run_failing(dynamodb, FAILING[case]) == patched  # moto's own error, reasons and all
    assert _everything(dynamodb) == before


def test_a_transaction_that_succeeds_writes_what_moto_writes(
    dynamodb: DynamoDBClient, moto_as_is: Callable[[], None]
) -> None:
    items = [_update("u1", "A#1"), _put("u1", "A#3"), _put("u9", "new"), _delete("u1", "B#1")]
    _seed(dynamodb)
    dynamodb.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
    patched = _everything(dynamodb)
    for entry in _everything(dynamodb):
        dynamodb.delete_item(TableName=TABLE, Key={"pk": entry["pk"], "sk": entry["sk"]})
    moto_as_is()
    _seed(dynamodb)
    dynamodb.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
    assert _everything(dynamodb) == patched


class _CountingCopy:
    """Stands in for `copy` inside dynamodb_transaction_rollback, counting deep copies of whole tables."""

    def __init__(self) -> None:
        self.tables = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(value, table_module.Table):
            self.tables += 1
        return copy.deepcopy(value, memo)


def test_no_table_is_copied_for_a_transaction(
    dynamodb: DynamoDBClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(dynamodb)
    counting = _CountingCopy()
    monkeypatch.setattr(dynamodb_transaction_rollback, "copy", counting)
    puts: Any = [_put("u1", f"new{n}") for n in range(6)]
    dynamodb.transact_write_items(TransactItems=puts)
    _run_failing(dynamodb, FAILING["a condition fails last"])
    assert counting.tables == 0


def test_a_rollback_keeps_what_others_wrote_meanwhile(
    dynamodb: DynamoDBClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's rollback put back a copy of the whole table, undoing every other request's writes
    made while the transaction ran (the local stack serves requests in parallel)."""
    _seed(dynamodb)
    table = _moto_table()
    original_put = table_module.Table.put_item

    def put_and_another(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if item_attrs["sk"] == {"S": "A#3"}:  # meanwhile, another request writes another item
            original_put(self, _item("u3", "other", n=1))
        return original_put(self, item_attrs, *args, **kwargs)

    monkeypatch.setattr(table_module.Table, "put_item", put_and_another)
    _run_failing(dynamodb, FAILING["a condition fails last"])
    assert table.get_item(DynamoType({"S": "u3"}), DynamoType({"S": "other"})) is not None
    assert table.get_item(DynamoType({"S": "u1"}), DynamoType({"S": "A#3"})) is None


def test_no_request_writes_an_item_while_a_transaction_naming_it_runs(
    dynamodb: DynamoDBClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dynamodb_request_isolation: a failing transaction puts back the items it named as they were
    when it started. A write to one of them by another request before the transaction ends must
    not be erased: the other request waits for the transaction (DynamoDB's isolation), then
    writes."""
    _seed(dynamodb)
    paused, resume = threading.Event(), threading.Event()
    restore = dynamodb_transaction_rollback._restore

    def restore_later(saved: Any) -> None:  # the transaction has failed and is about to roll back
        paused.set()
        resume.wait(timeout=30)
        restore(saved)

    monkeypatch.setattr(dynamodb_transaction_rollback, "_restore", restore_later)
    errors: list[BaseException] = []

    def run(action: Callable[[], Any]) -> threading.Thread:
        def target() -> None:
            try:
                action()
            except BaseException as error:  # reported by the assertion below
                errors.append(error)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    transaction = run(lambda: _run_failing(dynamodb, FAILING["a condition fails last"]))
    assert paused.wait(timeout=30)
    writer = run(lambda: dynamodb.put_item(TableName=TABLE, Item=_item("u1", "A#1", n=7)))
    writer.join(timeout=1.0)  # without the patch it is done by now (and rolled back below)
    resume.set()
    transaction.join(timeout=30)
    writer.join(timeout=30)
    assert not errors
    assert dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "u1"}, "sk": {"S": "A#1"}})["Item"]["n"] == {
        "N": "7"
    }


def test_a_table_with_a_stream_is_rolled_back_with_its_records(dynamodb: DynamoDBClient) -> None:
    """A streamed table's records are part of what moto's table copy restores: it keeps moto's way."""
    dynamodb.create_table(
        TableName=STREAMED,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    dynamodb.put_item(TableName=STREAMED, Item=_item("u1", "A#1", n=1))
    records = len(_moto_table(STREAMED).stream_shard.items)
    before = _everything(dynamodb, STREAMED)
    items = [
        {"Put": {"TableName": STREAMED, "Item": _item("u1", "A#2", n=1)}},
        FAILING["a condition fails first"][0],
    ]
    _run_failing(dynamodb, items)
    assert _everything(dynamodb, STREAMED) == before
    assert len(_moto_table(STREAMED).stream_shard.items) == records


# --- dynamodb_query_table_key and dynamodb_query_index: moto's answers, page by page -------------


def _fill(client: DynamoDBClient, rng: random.Random) -> None:
    """Partitions with keys that share prefixes, index keys on some items, a few big items."""
    for pk in ("u1", "u2", "u3"):
        for prefix, count in (("A#", 7), ("AB#", 3), ("B#", 6), ("JOB#", 9), ("TX#", 5)):
            for n in range(count):
                attrs: dict[str, Any] = {"n": rng.randrange(10)}
                if rng.random() < 0.7:
                    attrs |= {"gpk": f"g{rng.randrange(3)}", "gsk": f"{rng.choice('abc')}{rng.randrange(5)}"}
                client.put_item(TableName=TABLE, Item=_item(pk, f"{prefix}{n:03d}", **attrs))
    big = "x" * 300_000  # three of these fill most of a 1 MB page
    for n in range(5):
        client.put_item(TableName=TABLE, Item=_item("big", f"B#{n}", blob=big))
    client.put_item(TableName=TABLE, Item=_item("big", "C#0", blob=big))


def _queries() -> Iterator[dict[str, Any]]:
    conditions: list[tuple[str, dict[str, Any]]] = [
        ("pk = :p", {}),
        ("pk = :p AND sk = :a", {":a": {"S": "B#004"}}),
        ("pk = :p AND sk < :a", {":a": {"S": "B#004"}}),
        ("pk = :p AND sk <= :a", {":a": {"S": "B#004"}}),
        ("pk = :p AND sk > :a", {":a": {"S": "B#0"}}),
        ("pk = :p AND sk >= :a", {":a": {"S": "JOB#004"}}),
        ("pk = :p AND begins_with(sk, :a)", {":a": {"S": "A"}}),
        ("pk = :p AND begins_with(sk, :a)", {":a": {"S": "A#"}}),
        ("pk = :p AND begins_with(sk, :a)", {":a": {"S": "JOB#"}}),
        ("pk = :p AND begins_with(sk, :a)", {":a": {"S": "TX#"}}),
        ("pk = :p AND begins_with(sk, :a)", {":a": {"S": "Z"}}),
        ("pk = :p AND sk BETWEEN :a AND :b", {":a": {"S": "A#005"}, ":b": {"S": "B#002"}}),
        ("pk = :p AND sk BETWEEN :a AND :b", {":a": {"S": "B#5"}, ":b": {"S": "B#1"}}),
        ("pk = :p AND sk BETWEEN :a AND :b", {":a": {"S": "TX#003"}, ":b": {"S": "TX#003"}}),
    ]
    for (condition, values), pk, forward, limit in itertools.product(
        conditions, ("u2", "big", "nobody"), (True, False), (None, 1, 4)
    ):
        query: dict[str, Any] = {
            "TableName": TABLE,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": {":p": {"S": pk}, **values},
            "ScanIndexForward": forward,
        }
        if limit is not None:
            query["Limit"] = limit
        yield query


def _pages(client: DynamoDBClient, query: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a query, following LastEvaluatedKey (as the answers moto gave)."""
    pages: list[dict[str, Any]] = []
    query = dict(query)
    for _ in range(200):
        page: dict[str, Any] = dict(client.query(**query))
        page.pop("ResponseMetadata", None)
        pages.append(page)
        if "LastEvaluatedKey" not in page:
            break
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return pages


def _variants(query: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield query
    pk = query["ExpressionAttributeValues"][":p"]
    # Start keys that are no item's: between two keys, and in partitions before and after this one.
    for start in ({"pk": pk, "sk": {"S": "AB#001x"}}, {"pk": {"S": "a"}, "sk": {"S": "A#000"}}):
        yield {**query, "ExclusiveStartKey": start}
    yield {**query, "ExclusiveStartKey": {"pk": {"S": "zz"}, "sk": {"S": "A#000"}}}
    values = {**query["ExpressionAttributeValues"], ":n": {"N": "4"}}
    yield {**query, "FilterExpression": "n > :n", "ExpressionAttributeValues": values}
    yield {**query, "ProjectionExpression": "sk, n"}


def test_table_queries_answer_as_moto_does(
    dynamodb: DynamoDBClient, moto_as_is: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(dynamodb, random.Random(7))
    fast = []
    real_fast_query = dynamodb_query_table_key._fast_query

    def counting_fast_query(*args: Any, **kwargs: Any) -> Any:
        answer = real_fast_query(*args, **kwargs)
        fast.append(answer is not None)
        return answer

    monkeypatch.setattr(dynamodb_query_table_key, "_fast_query", counting_fast_query)
    # Every condition, direction and Limit on one partition, page by page; a seeded sample of the
    # rest (other partitions, start keys, filters, projections).
    everything = [variant for query in _queries() for variant in _variants(query)]
    queries = [
        q
        for q in everything
        if q["ExpressionAttributeValues"][":p"]["S"] == "u2" and len(q) == 4 + ("Limit" in q)
    ]
    queries += random.Random(3).sample([q for q in everything if q not in queries], 120)
    patched = [_pages(dynamodb, query) for query in queries]
    assert fast
    assert all(fast)  # every one of these took the patched path
    moto_as_is()
    for query, pages in zip(queries, patched, strict=True):
        assert _pages(dynamodb, query) == pages, query


def _random_writes(dynamodb: DynamoDBClient, rng: random.Random) -> None:
    """One seeded round of puts, deletes and rolled-back transactions in partition u2."""
    for _ in range(20):
        sk = f"{rng.choice(['A#', 'B#', 'JOB#', 'C#'])}{rng.randrange(40):03d}"
        action = rng.random()
        if action < 0.45:
            dynamodb.put_item(TableName=TABLE, Item=_item("u2", sk, n=rng.randrange(10)))
        elif action < 0.8:
            dynamodb.delete_item(TableName=TABLE, Key={"pk": {"S": "u2"}, "sk": {"S": sk}})
        else:
            _run_failing(dynamodb, [_put("u2", sk), _delete("u2", "A#001"), _update("u2", "zz", "n = :five")])


def test_queries_follow_writes_and_rollbacks(
    dynamodb: DynamoDBClient, moto_as_is: Callable[[], None]
) -> None:
    """The sorted keys each partition keeps follow every put, overwrite, delete and rollback."""
    rng = random.Random(11)
    _fill(dynamodb, rng)
    queries = [q for q in _queries() if q["ExpressionAttributeValues"][":p"]["S"] == "u2"][::7]
    answers = []
    for _ in range(3):
        _random_writes(dynamodb, rng)
        answers.append((_everything(dynamodb), [_pages(dynamodb, query) for query in queries]))
    # The same writes again from the same seed, on moto's own code.
    for entry in _everything(dynamodb):
        dynamodb.delete_item(TableName=TABLE, Key={"pk": entry["pk"], "sk": entry["sk"]})
    moto_as_is()
    rng = random.Random(11)
    _fill(dynamodb, rng)
    for contents, pages in answers:
        _random_writes(dynamodb, rng)
        assert _everything(dynamodb) == contents
        assert [_pages(dynamodb, query) for query in queries] == pages


def test_index_queries_answer_as_moto_does(dynamodb: DynamoDBClient, moto_as_is: Callable[[], None]) -> None:
    _fill(dynamodb, random.Random(5))
    queries = []
    for gpk, condition, forward, limit in itertools.product(
        ("g0", "none"),
        ("", " AND begins_with(gsk, :a)", " AND gsk BETWEEN :a AND :b"),
        (True, False),
        (None, 4),
    ):
        values = {":g": {"S": gpk}}
        if condition:
            values |= {":a": {"S": "a"}, ":b": {"S": "b3"}}
            if "BETWEEN" not in condition:
                values.pop(":b")
        query: dict[str, Any] = {
            "TableName": TABLE,
            "IndexName": "by_g",
            "KeyConditionExpression": "gpk = :g" + condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": forward,
        }
        if limit:
            query["Limit"] = limit
        queries.append(query)
    patched = [_pages(dynamodb, query) for query in queries]
    assert any(page["Items"] for pages in patched for page in pages)
    moto_as_is()
    for query, pages in zip(queries, patched, strict=True):
        assert _pages(dynamodb, query) == pages, query


def test_a_copied_partition_keeps_its_own_sorted_keys() -> None:
    moto_patches.apply()
    key = DynamoType
    partition = dynamodb_query_table_key._SortedPartition()
    for sk in ("b", "a", "c"):
        partition[key({"S": sk})] = sk
    assert partition.sorted_keys() is not None
    clone = copy.deepcopy(partition)
    clone[key({"S": "0"})] = "0"
    partition.pop(key({"S": "b"}))
    assert [k.value for k in partition.sorted_keys()[1]] == ["a", "c"]  # type: ignore[index]
    assert [k.value for k in clone.sorted_keys()[1]] == ["0", "a", "b", "c"]  # type: ignore[index]
    assert dict(clone) == {key({"S": s}): s for s in "0abc"}


# --- dynamodb_update_expressions: moto's answers and errors, parses and value-free checks reused --


def _update_item(pk: str, expression: str, names: dict[str, str], **values: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TableName": TABLE,
        "Key": {"pk": {"S": pk}, "sk": {"S": "J"}},
        "UpdateExpression": expression,
        "ReturnValues": "ALL_NEW",
    }
    if names:
        request["ExpressionAttributeNames"] = names
    if values:
        request["ExpressionAttributeValues"] = {
            f":{key}": {"N": str(value)} if isinstance(value, int) else value for key, value in values.items()
        }
    return request


SET_MANY = (
    "SET " + ", ".join(f"#a{n} = :v{n}" for n in range(12)) + ", tries = if_not_exists(tries, :z) + :one"
)
NAMES_MANY = {f"#a{n}": f"a{n}" for n in range(12)}
VALUES_MANY = {f"v{n}": {"S": f"value {n}"} for n in range(12)} | {"z": 0, "one": 1}
# In order, twice over (the second time from the reused parses and checks): the same texts with
# other names must meet the checks that depend on names (a key attribute, overlapping paths).
UPDATES = [
    _update_item("u1", SET_MANY, NAMES_MANY, **VALUES_MANY),
    _update_item("u1", SET_MANY, NAMES_MANY, **VALUES_MANY),
    _update_item("u2", SET_MANY, NAMES_MANY, **VALUES_MANY),  # an item the update creates
    _update_item("u1", "SET #a = :x, #b = :y", {"#a": "n", "#b": "m"}, x=1, y=2),
    _update_item("u1", "SET #a = :x, #b = :y", {"#a": "n", "#b": "n"}, x=1, y=2),  # duplicate path
    _update_item("u1", "SET #k = :x", {"#k": "n"}, x=3),
    _update_item("u1", "SET #k = :x", {"#k": "sk"}, x={"S": "other"}),  # a key attribute
    _update_item(
        "u1",
        "SET l = list_append(if_not_exists(l, :e), :l), m.#p = :x",
        {"#p": "p"},
        e={"L": []},
        l={"L": [{"N": "1"}]},
        x=1,
    ),
    _update_item("u1", "SET m = :m", {}, m={"M": {"p": {"N": "1"}, "q": {"L": [{"S": "a"}, {"S": "b"}]}}}),
    _update_item("u1", "SET m.p = m.p + :one REMOVE m.q[0] ADD c :one, s :s", {}, one=1, s={"SS": ["a"]}),
    _update_item("u1", "DELETE s :s", {}, s={"SS": ["a"]}),
    _update_item("u1", "SET a = :x SET b = :x", {}, x=1),  # two SET clauses
    _update_item("u1", "SET n = n + :x", {}, x={"S": "text"}),  # a type mismatch
    _update_item("u1", "SET n = :undefined", {}, x=1),
    _update_item("u1", "SET nothing = nothing + :x", {}, x=1),  # a path that does not exist
    _update_item("u1", "SET = :x", {}, x=1),  # not an expression
]


def _outcome(client: DynamoDBClient, request: dict[str, Any]) -> Any:
    try:
        return client.update_item(**request)["Attributes"]
    except client.exceptions.ClientError as error:
        return error.response["Error"]["Code"], error.response["Error"]["Message"]


def test_update_expressions_answer_as_moto_does(
    dynamodb: DynamoDBClient, moto_as_is: Callable[[], None]
) -> None:
    patched = [_outcome(dynamodb, request) for request in UPDATES + UPDATES]
    contents = _everything(dynamodb)
    assert any(isinstance(outcome, tuple) for outcome in patched)  # some are refused
    for entry in contents:
        dynamodb.delete_item(TableName=TABLE, Key={"pk": entry["pk"], "sk": entry["sk"]})
    moto_as_is()
    assert [_outcome(dynamodb, request) for request in UPDATES + UPDATES] == patched
    assert _everything(dynamodb) == contents


def test_the_value_free_checks_run_once_per_text_names_and_table(
    dynamodb: DynamoDBClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    original = validators.ActionCountValidator.verify_action_counts

    def counting(self: Any, node: Any) -> Any:
        checked.append("checked")
        return original(self, node)

    monkeypatch.setattr(validators.ActionCountValidator, "verify_action_counts", counting)
    expression = "SET #a = :x, b = :x"  # a text no other test uses: not checked yet
    dynamodb.update_item(**_update_item("u5", expression, {"#a": "a"}, x=1))
    assert checked
    checked.clear()
    dynamodb.update_item(**_update_item("u5", expression, {"#a": "a"}, x=2))
    assert not checked  # the same text and names: values and item alone differ
    dynamodb.update_item(**_update_item("u5", expression, {"#a": "c"}, x=2))
    assert checked  # other names


def _shape(root: Any) -> Any:
    """A tree as nested data: each node's type, attributes in order, and its parent's position."""
    positions: dict[int, int] = {}

    def number(node: Any) -> None:
        positions[id(node)] = len(positions)
        for child in node.children or []:
            if isinstance(child, ast_nodes.Node):
                number(child)

    def shape(node: Any) -> Any:
        if not isinstance(node, ast_nodes.Node):
            return node
        attributes: dict[str, Any] = {}
        for name, value in vars(node).items():
            if name == "parent":
                attributes[name] = None if value is None else positions.get(id(value), "outside")
            elif name == "children":
                attributes[name] = None if value is None else [shape(child) for child in value]
            else:
                attributes[name] = value
        return type(node), list(vars(node)), attributes

    number(root)
    return shape(root)


def test_a_parsed_tree_is_cloned_as_deepcopy_copies_it(dynamodb: DynamoDBClient) -> None:
    original_make = moto_patches.ORIGINALS["UpdateExpressionParser.make"].__func__
    for request in UPDATES[:-1]:
        tree = original_make(expressions.UpdateExpressionParser, request["UpdateExpression"])
        clone = dynamodb_update_expressions._clone_tree(tree)
        assert clone is not None
        assert _shape(clone) == _shape(copy.deepcopy(tree))
        assert not {id(node) for node in _nodes(clone)} & {id(node) for node in _nodes(tree)}


def _nodes(root: Any) -> Iterator[Any]:
    yield root
    for child in root.children or []:
        if isinstance(child, ast_nodes.Node):
            yield from _nodes(child)


def test_moto_never_changes_a_parsed_tree_it_is_handed(dynamodb: DynamoDBClient) -> None:
    """make() hands every caller the same tree for a text: moto must only read it."""
    for request in UPDATES + UPDATES:
        _outcome(dynamodb, request)
    update = {key: value for key, value in UPDATES[0].items() if key != "ReturnValues"}
    dynamodb.transact_write_items(TransactItems=[{"Update": update}])  # type: ignore[typeddict-item]
    original_make = moto_patches.ORIGINALS["UpdateExpressionParser.make"].__func__
    kept = dynamodb_update_expressions._parsed_updates
    assert {request["UpdateExpression"] for request in UPDATES[:-1]} <= set(kept)
    for text, tree in kept.items():
        assert _shape(tree) == _shape(original_make(expressions.UpdateExpressionParser, text)), text
