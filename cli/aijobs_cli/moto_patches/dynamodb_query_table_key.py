"""Query on a table's own key walks only the partition's matching items, found by bisection.

What moto does slowly (moto.dynamodb.models.table.Table.query, no IndexName): it sorts *every item
of the table* (with Python-level comparisons), keeps the partition's ones, sorts them again, then
walks the whole partition to skip past ExclusiveStartKey and test the sort-key condition: each
query costs O(table size), and the user's partition grows with every job.

The patch keeps each partition's sort keys in a sorted list (kept up to date as moto writes and
deletes items: partitions become `_SortedPartition`, a dict that maintains it), finds where the
condition's items and the ExclusiveStartKey are by bisection, and walks only the items it returns
(plus what decides LastEvaluatedKey). Results, their order, Count, ScannedCount and
LastEvaluatedKey are moto's, including moto's quirk of returning a LastEvaluatedKey when Limit
items matched and any other item of the partition follows them. Only string sort keys, one
sort-key condition (=, <, <=, >, >=, begins_with, between) and no legacy QueryFilter/KeyConditions
filters take this path; the rest is moto's code (through dynamodb_query_index, installed first).
Remove when moto's Query stops sorting the whole table.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import bisect
import copy
import threading
from collections import defaultdict
from collections.abc import Iterator
from functools import wraps
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"

# One lock for every tracked partition: held while a partition and its sorted keys change, and
# while a query reads them, so a query never sees the one without the other.
_partitions_lock = threading.RLock()

# moto refuses items over 405,000 bytes (LimitedSizeDict) and cuts a page at 1,000,000 bytes
# (table.RESULT_SIZE_LIMIT): one item alone never fills a page.
_MAX_ITEM_SIZE = 405_000
_RANGE_COMPARISONS = {"=", "EQ", "<", "LT", "<=", "LE", ">", "GT", ">=", "GE", "BEGINS_WITH", "BETWEEN"}


class _SortedPartition(dict[Any, Any]):
    """A table partition (range key -> item) that keeps its string range keys sorted, once a query
    has asked for them. Every way moto changes a partition goes through __setitem__ or pop; the
    rest of dict's mutators drop the sorted keys (rebuilt by the next query)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._values: list[str] | None = None  # the keys' strings, sorted
        self._keys: list[Any] = []  # the keys (DynamoType), in the same order

    def __reduce__(self) -> Any:  # copies and pickles: the items, without the sorted keys
        return (type(self), (dict(self),))

    def __setitem__(self, key: Any, value: Any) -> None:
        with _partitions_lock:
            new = key not in self
            super().__setitem__(key, value)
            if new and self._values is not None:
                if key.type == "S" and isinstance(key.value, str):
                    index = bisect.bisect_left(self._values, key.value)
                    self._values.insert(index, key.value)
                    self._keys.insert(index, key)
                else:
                    self._values = None

    def _forget(self, key: Any) -> None:
        if self._values is None or key not in self:
            return
        value = getattr(key, "value", None)
        if not isinstance(value, str):
            self._values = None
            return
        index = bisect.bisect_left(self._values, value)
        if index < len(self._values) and self._keys[index] == key:
            del self._values[index]
            del self._keys[index]
        else:
            self._values = None

    def pop(self, key: Any, *default: Any) -> Any:
        with _partitions_lock:
            self._forget(key)
            return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        with _partitions_lock:
            self._forget(key)
            super().__delitem__(key)

    def clear(self) -> None:
        with _partitions_lock:
            self._values = None
            super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        with _partitions_lock:
            self._values = None
            super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        with _partitions_lock:
            self._values = None
            return super().setdefault(key, default)

    def popitem(self) -> tuple[Any, Any]:
        with _partitions_lock:
            self._values = None
            return super().popitem()

    def __ior__(self, other: Any) -> _SortedPartition:  # type: ignore[misc]
        with _partitions_lock:
            self._values = None
            return super().__ior__(other)

    def sorted_keys(self) -> tuple[list[str], list[Any]] | None:
        """The range keys' strings and keys, sorted; None if a key is not a string (call with
        _partitions_lock held)."""
        if self._values is None:
            keys = list(self)
            if not all(key.type == "S" and isinstance(key.value, str) for key in keys):
                return None
            keys.sort(key=lambda key: key.value)
            self._keys = keys
            self._values = [key.value for key in keys]
        return self._values, self._keys


def _prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: there is none)."""
    for position in range(len(prefix) - 1, -1, -1):
        if ord(prefix[position]) < 0x10FFFF:
            return prefix[:position] + chr(ord(prefix[position]) + 1)
    return None


def _bounds(values: list[str], comparison: str | None, operands: list[str]) -> tuple[int, int]:
    """The slice of the sorted `values` that moto's comparison keeps (a contiguous run)."""
    low, high = 0, len(values)
    if comparison is None:
        return low, high
    first = operands[0]
    if comparison in ("=", "EQ"):
        return bisect.bisect_left(values, first), bisect.bisect_right(values, first)
    if comparison in ("<", "LT"):
        return low, bisect.bisect_left(values, first)
    if comparison in ("<=", "LE"):
        return low, bisect.bisect_right(values, first)
    if comparison in (">", "GT"):
        return bisect.bisect_right(values, first), high
    if comparison in (">=", "GE"):
        return bisect.bisect_left(values, first), high
    if comparison == "BEGINS_WITH":
        end = _prefix_end(first)
        low = bisect.bisect_left(values, first)
        return low, (high if end is None else bisect.bisect_left(values, end))
    # BETWEEN: lower <= value <= upper
    low = bisect.bisect_left(values, first)
    return low, max(low, bisect.bisect_right(values, operands[1]))


def _single_type(value: Any, expected: str) -> bool:
    return isinstance(value, dict) and len(value) == 1 and expected in value


def _key_operands(table: Any, hash_key: Any, query: dict[str, Any]) -> list[str] | None:
    """The sort-key condition's string operands; None when the query is not one this handles."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    limit, conditions, comparison = query["limit"], query["range_key_conditions"], query["range_comparison"]
    if (
        table.range_key_attr is None
        or table.range_key_type != "S"
        or not isinstance(hash_key, DynamoType)
        or hash_key.type not in ("S", "N", "B")
        or not isinstance(query["scan_index_forward"], bool)
        or not (limit is None or (isinstance(limit, int) and limit >= 1))
        or (conditions and (len(conditions) != 1 or conditions[0][0] != table.range_key_attr))
        or (comparison is not None and comparison not in _RANGE_COMPARISONS)
    ):
        return None
    if comparison is None:
        return []
    range_objs = query["range_objs"]
    count = 2 if comparison == "BETWEEN" else 1
    if len(range_objs) != count or not all(
        isinstance(obj, DynamoType) and obj.type == "S" and isinstance(obj.value, str) for obj in range_objs
    ):
        return None
    return [obj.value for obj in range_objs]


def _start(table: Any, hash_key: Any, start_key: Any, forward: bool) -> tuple[bool, str | None] | None:
    """Where ExclusiveStartKey puts the query: (skip the whole partition, the sort key to start
    after); None when the key is not one this handles."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    if start_key is None:
        return False, None
    if not (
        isinstance(start_key, dict)
        and _single_type(start_key.get(table.hash_key_attr), hash_key.type)
        and _single_type(start_key.get(table.range_key_attr), "S")
        and isinstance(start_key[table.range_key_attr]["S"], str)
    ):
        return None
    start_hash = DynamoType(start_key[table.hash_key_attr])
    if hash_key != start_hash:
        # moto skips an item while it sorts before the key: here, all of them or none.
        return (hash_key < start_hash) == forward, None
    return False, start_key[table.range_key_attr]["S"]


def _walk_order(
    values: list[str], bounds: tuple[int, int], after: str | None, forward: bool
) -> tuple[Iterator[int], Iterator[int]]:
    """Positions in the order moto walks the partition: the matching ones, then those after them."""
    low, high = bounds
    if forward:
        start = 0 if after is None else bisect.bisect_right(values, after)
        matching = iter(range(max(low, start), max(high, low, start)))
        return matching, iter(range(max(high, low, start), len(values)))
    start = len(values) if after is None else bisect.bisect_left(values, after)
    top = min(high, start)
    return iter(range(top - 1, low - 1, -1)), iter(range(min(low, top) - 1, -1, -1))


def _page(
    table: Any,
    partition: dict[Any, Any],
    keys: list[Any],
    walk: tuple[Iterator[int], Iterator[int]],
    limit: Any,
) -> tuple[list[Any], dict[str, Any] | None]:
    """The items moto's walk returns, and the LastEvaluatedKey it ends the page with."""
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    matching, rest = walk
    results: list[Any] = []
    result_size = 0
    for index in matching:
        item = dict.__getitem__(partition, keys[index])
        size = item.size()
        if len(results) == limit or result_size + size > RESULT_SIZE_LIMIT:
            return results, table._get_last_evaluated_key(results[-1], None)
        results.append(item)
        result_size += size
    # moto goes on through the rest of the partition: none of it matches, but meeting an item once
    # Limit items matched, or one too big for the page, ends the page there.
    if results and (len(results) == limit or result_size + _MAX_ITEM_SIZE > RESULT_SIZE_LIMIT):
        for index in rest:
            item = dict.__getitem__(partition, keys[index])
            if len(results) == limit or result_size + item.size() > RESULT_SIZE_LIMIT:
                return results, table._get_last_evaluated_key(results[-1], None)
    return results, None


def _fast_query(
    table: Any, hash_key: Any, **query: Any
) -> tuple[list[Any], int, dict[str, Any] | None] | None:
    """moto's Table.query on the table's own key, by bisection; None when it is not one of the
    queries this handles (moto's code answers it). `query` holds the rest of moto's arguments by
    name: range_comparison, range_objs, limit, exclusive_start_key, scan_index_forward,
    projection_expressions, filter_expression, range_key_conditions."""
    operands = _key_operands(table, hash_key, query)
    if operands is None:
        return None
    forward = query["scan_index_forward"]
    start = _start(table, hash_key, query["exclusive_start_key"], forward)
    if start is None:
        return None
    skip_all, after = start
    with _partitions_lock:
        found = table.items.get(hash_key)
        if found is not None and not isinstance(found, _SortedPartition):
            return None
        ordered = found.sorted_keys() if found is not None else ([], [])
        if ordered is None:
            return None
        values, keys = ordered
        bounds = (0, 0) if skip_all else _bounds(values, query["range_comparison"], operands)
        walk = _walk_order(values, bounds, after, forward)
        results, last_evaluated_key = _page(table, {} if found is None else found, keys, walk, query["limit"])
    scanned_count = len(results)
    results = copy.deepcopy(results)
    if query["filter_expression"] is not None:
        results = [item for item in results if query["filter_expression"].expr(item)]
    if query["projection_expressions"]:
        results = [item.project(query["projection_expressions"]) for item in results]
    return results, scanned_count, last_evaluated_key


def install(originals: dict[str, Any]) -> None:
    """Record moto's Table.__init__ and Table.query in `originals` (unless an earlier patch has),
    then make new tables' partitions sorted ones and answer table-key queries by bisection."""
    from moto.dynamodb.models import table as table_module

    table_class: Any = table_module.Table  # patched in place: typed loosely on purpose
    original_init = table_class.__init__
    inner_query = table_class.query  # moto's, or dynamodb_query_index's around it
    originals.setdefault("Table.__init__", original_init)
    originals.setdefault("Table.query", inner_query)

    @wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if isinstance(self.items, defaultdict) and self.items.default_factory is dict and not self.items:
            self.items = defaultdict(_SortedPartition)

    @wraps(inner_query)
    def query(
        self: Any,
        hash_key: Any,
        range_comparison: str | None,
        range_objs: list[Any],
        limit: int,
        exclusive_start_key: dict[str, Any],
        scan_index_forward: bool,
        projection_expressions: Any,
        index_name: str | None = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: Any = None,
        range_key_conditions: Any = None,
        **filter_kwargs: Any,
    ) -> tuple[list[Any], int, dict[str, Any] | None]:
        if not index_name and not filter_kwargs:
            answer = _fast_query(
                self,
                hash_key,
                range_comparison=range_comparison,
                range_objs=range_objs,
                limit=limit,
                exclusive_start_key=exclusive_start_key,
                scan_index_forward=scan_index_forward,
                projection_expressions=projection_expressions,
                filter_expression=filter_expression,
                range_key_conditions=range_key_conditions,
            )
            if answer is not None:
                return answer
        arguments = (
            hash_key,
            range_comparison,
            range_objs,
            limit,
            exclusive_start_key,
            scan_index_forward,
            projection_expressions,
            index_name,
            consistent_read,
            filter_expression,
        )
        keywords = {"hash_key_conditions": hash_key_conditions, "range_key_conditions": range_key_conditions}
        return inner_query(self, *arguments, **keywords, **filter_kwargs)  # type: ignore[no-any-return]

    table_class.__init__ = __init__
    table_class.query = query
