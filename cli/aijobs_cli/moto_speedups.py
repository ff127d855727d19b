"""Fixes to moto's slow paths, applied wherever this project runs on moto (tests, local stack).

Each one keeps what moto answers, and how its state changes, exactly as moto does it (for the
inputs it accepts; anything else goes to moto's own code unchanged); only the work is less.
`apply()` installs them all, once per process. Written against moto MOTO_VERSION (5.2.5, pinned
in requirements/dev.in): with any other moto installed, `apply()` warns and installs none of them,
since each one replaces a moto internal that may have changed (tests/unit/test_moto_speedups.py
runs every patched path against moto's own). Upgrading moto: re-read each patch against the new
release's code, then move the pin and MOTO_VERSION together.

1. TransactWriteItems rollback (moto.dynamodb.models.DynamoDBBackend.transact_write_items).
   moto deep-copies every table a transaction names (as many times as the transaction has items
   on it) before it writes anything, and puts the copies back if the transaction fails: a write
   costs a copy of the whole table, so the submit path slowed down as the tables grew, and a
   rollback also undid whatever another request wrote to those tables meanwhile.
   The patch copies, before anything is written, only the items the transaction's writes name
   (and whether their partitions existed); moto then runs with its table copies turned into no-ops,
   and on any failure the patch puts each of those items back as it was (absent ones removed,
   partitions that only the transaction created dropped). A transaction that fails still leaves
   every item as it was. Falls back to moto's table copies, one per table, when a table has a
   stream (its records are part of what moto's copy restores) or an item is not one moto would
   write by key (unknown table, missing key, more than 100 items...).
   Remove when moto stops copying whole tables for a transaction.

2. Query on a table's own key (moto.dynamodb.models.table.Table.query, no IndexName).
   moto sorts *every item of the table* (with Python-level comparisons), keeps the partition's
   ones, sorts them again, then walks the whole partition to skip past ExclusiveStartKey and test
   the sort-key condition: each query costs O(table size), and the user's partition grows with
   every job. The patch keeps each partition's sort keys in a sorted list (kept up to date as moto
   writes and deletes items: partitions become `_SortedPartition`, a dict that maintains it),
   finds where the condition's items and the ExclusiveStartKey are by bisection, and walks only
   the items it returns (plus what decides LastEvaluatedKey). Results, their order, Count,
   ScannedCount and LastEvaluatedKey are moto's, including moto's quirk of returning a
   LastEvaluatedKey when Limit items matched and any other item of the partition follows them.
   Only string sort keys, one sort-key condition (=, <, <=, >, >=, begins_with, between) and no
   legacy QueryFilter/KeyConditions filters take this path; the rest is moto's code.
   Remove when moto's Query stops sorting the whole table.

3. Query on a secondary index (the same method, with IndexName).
   moto sorts every item of the table before keeping the index partition's items, which it then
   sorts by the index key and the table key, a total order. The patch hands moto the table's items
   unsorted for that query: the same items, sorted once by moto into the same order. The walk over
   the table's items stays (indexes are not maintained here). Remove with 2.

4. Request routing (moto.backends.list_of_moto_modules).
   moto's server lists its own package directory (a listdir and an isdir per service, about 200
   system calls) for every request, twice for an SDK request, under a lock every request takes.
   The patch lists it once: the installed package does not change while the process runs.
   Remove when moto caches it.

5. Update expressions (moto.dynamodb.parsing: UpdateExpressionParser.make, UpdateExpressionValidator).
   moto parses an UpdateExpression twice per UpdateItem (once to list the names and values it
   uses, once to apply it), deep-copies the tree (with copy.deepcopy's generic machinery), then
   runs ten checks and rewrites over it. Three of them depend on the text, ExpressionAttributeNames
   and the table's key attributes alone (one SET/REMOVE/ADD clause each, no overlapping paths, no
   key attribute updated), and two of those walk the whole tree again at every nested action:
   their cost grows with the square of the number of actions (the job store's updates set a dozen
   attributes and more). The patch keeps each text's parsed tree (moto only reads it: the
   validator works on its copy), copies it node by node (the same copy deepcopy makes, for trees
   of nodes, strings and numbers; anything else goes to deepcopy), and skips those three checks
   for a text, names and key attributes that passed them before. Everything that depends on the
   values or the item (value binding, paths, functions, types, empty keys) runs every time; an
   expression moto refuses is refused again, with moto's error. Remove when moto's validator stops
   re-walking the tree per action and its parses get cheap.

6. SQS queue attributes (moto.sqs.models: Queue.attributes, SQSBackend.get_queue_attributes, and
   the module's clock, unix_time and unix_time_millis).
   moto builds every attribute of a queue whenever it reads one, and three of them are message
   counts that each walk the whole queue, reading the clock twice per message through datetime
   arithmetic (about 20 us a reading): once per SendMessage (for ContentBasedDeduplication) and
   three times per message a ReceiveMessage returns (its retention period, through
   get_queue_attributes). A send to a queue holding 5,000 messages took 280 ms of moto's CPU, and
   a receive of 10 messages 10.8 s, so the local stack crawled once a backlog built up. The patch
   builds a lookup of named attributes from those alone (names moto refuses, and "All", go to
   moto's code), counts in one walk with one clock reading, and reads the module's clock from
   time.time() (the same clock, without building datetimes; given a datetime, moto's function
   answers). At 5,000 messages: a send 3.9 ms, a receive of 10 3 ms. Values, their order, and
   the errors are moto's. Remove when moto stops building every attribute per lookup.

7. DynamoDB requests one at a time (moto.dynamodb.responses.DynamoHandler.call_action).
   Not a speed-up: isolation. DynamoDB applies each request, a transaction included, as one step
   no other request sees half-done; moto has no locks, and its server answers requests on threads:
   an UpdateItem changes the stored item one action at a time (a GetItem served meanwhile returned
   a job `succeeded` without its `finishedAt`), a query can iterate a partition another thread is
   changing ("dictionary changed size during iteration"), and a transaction that fails puts back
   the items it named as they were when it started (1. above), erasing another request's write
   made meanwhile. The patch takes one lock around each DynamoDB request, in the moto server and
   in-process (tests with threads) alike; requests are still read and answered in parallel, only
   the actions take turns, which costs nothing the interpreter lock did not already serialize.
   moto's transaction support lists "an ongoing operation is updating the same item" as not
   emulated (getmoto/moto#2879). Remove when moto serializes its DynamoDB backend.

8. SQS pending message groups (moto.sqs.models.Queue.pending_message_groups).
   Not a speed-up: a race. The property builds a set from the queue's in-flight messages by
   iterating the live set, while the server's other threads receive and delete messages of the
   same queue: under load ReceiveMessage failed with "RuntimeError: Set changed size during
   iteration" (seen in the 10,000-job soak), a 500 to the poller. The patch iterates a snapshot
   (tuple() copies the set in one step the interpreter lock does not interrupt). The same groups
   as moto's. Remove when moto locks its SQS queues.
"""

from __future__ import annotations

import bisect
import copy
import functools
import importlib
import json
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import wraps
from importlib import metadata
from typing import Any

#: The moto release these patches were written against (requirements/dev.in pins it).
MOTO_VERSION = "5.2.5"
_local = threading.local()
_applied = False
# moto's own functions, as they were before apply() (tests run both and compare).
ORIGINALS: dict[str, Any] = {}
# One lock for every tracked partition: held while a partition and its sorted keys change, and
# while a query reads them, so a query never sees the one without the other.
_partitions_lock = threading.RLock()

# moto refuses items over 405,000 bytes (LimitedSizeDict) and cuts a page at 1,000,000 bytes
# (table.RESULT_SIZE_LIMIT): one item alone never fills a page.
_MAX_ITEM_SIZE = 405_000
_RANGE_COMPARISONS = {"=", "EQ", "<", "LT", "<=", "LE", ">", "GT", ">=", "GE", "BEGINS_WITH", "BETWEEN"}


# --- 1. transaction rollback ---------------------------------------------------------------------


class _CopyModule:
    """Stands in for the `copy` module inside moto's DynamoDB models. Inside a transaction whose
    items the patch has saved, a table's deep copy is the table itself (moto's rollback then puts
    each table back in its own place: nothing); inside any other transaction, each table is copied
    once, however many of the transaction's items name it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        mode = getattr(_local, "transaction", None)
        if mode is None or memo is not None or not isinstance(value, _table_class):
            return copy.deepcopy(value, memo)
        if mode == "journal":
            return value
        backups: dict[int, Any] = _local.backups
        if id(value) not in backups:
            backups[id(value)] = copy.deepcopy(value)
        return backups[id(value)]


_table_class: Any = type(None)  # moto's Table, once apply() has imported it

# (table, hash key, range key or None, the item as it was or None, whether its partition existed)
_Saved = tuple[Any, Any, Any, Any, bool]


def _saved_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[_Saved] | None:
    """A copy of every item the transaction may write, taken before it writes anything; None when
    the transaction is one to leave to moto's table copies."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    if not isinstance(transact_items, list) or len(transact_items) > 100:
        return None
    saved: list[_Saved] = []
    try:
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                return None
            ((op_type, op),) = entry.items()
            if op_type == "ConditionCheck":
                continue
            if op_type not in ("Put", "Update", "Delete") or op.get("TableName") not in backend.tables:
                return None
            table = backend.tables[op["TableName"]]
            if table.stream_shard is not None or not isinstance(table.items, defaultdict):
                return None
            key = op["Item"] if op_type == "Put" else op["Key"]
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            if not all(isinstance(key.get(name), dict) and len(key[name]) == 1 for name in names):
                return None
            hash_key = DynamoType(key[table.hash_key_attr])
            range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
            if range_key is None:
                saved.append((table, hash_key, None, copy.deepcopy(table.items.get(hash_key)), True))
            else:
                partition = table.items.get(hash_key)
                item = None if partition is None else partition.get(range_key)
                saved.append((table, hash_key, range_key, copy.deepcopy(item), partition is not None))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError):
        return None
    return saved


def _restore(saved: list[_Saved]) -> None:
    for table, hash_key, range_key, item, partition_existed in reversed(saved):
        if range_key is None:
            if item is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = item
            continue
        partition = table.items.get(hash_key)
        if item is not None:
            table.items[hash_key][range_key] = item
        elif partition is not None:
            partition.pop(range_key, None)
            if not partition and not partition_existed:
                table.items.pop(hash_key, None)


def _patch_transactions(models: Any) -> None:
    original = models.DynamoDBBackend.transact_write_items

    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _saved_items(self, transact_items)
        _local.transaction = "copy" if saved is None else "journal"
        _local.backups = {}
        try:
            original(self, transact_items)
        except BaseException:
            if saved is not None:
                _restore(saved)
            raise
        finally:
            _local.transaction = None
            _local.backups = {}

    setattr(models, "copy", _CopyModule())  # noqa: B010 (moto imports `copy` as a module global)
    models.DynamoDBBackend.transact_write_items = transact_write_items


# --- 7. one DynamoDB request at a time -------------------------------------------------------------

#: Held for the whole of each DynamoDB request moto answers (in a server or in-process).
dynamodb_lock = threading.RLock()


def _patch_isolation(handler_class: Any) -> None:
    original = handler_class.call_action

    @wraps(original)
    def call_action(self: Any) -> Any:
        with dynamodb_lock:
            return original(self)

    handler_class.call_action = call_action


# --- 2. and 3. queries ---------------------------------------------------------------------------


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


def _fast_query(
    table: Any,
    hash_key: Any,
    range_comparison: str | None,
    range_objs: list[Any],
    limit: int | None,
    exclusive_start_key: dict[str, Any] | None,
    scan_index_forward: bool,
    projection_expressions: Any,
    filter_expression: Any,
    range_key_conditions: list[Any] | None,
) -> tuple[list[Any], int, dict[str, Any] | None] | None:
    """moto's Table.query on the table's own key, by bisection; None when it is not one of the
    queries this handles (moto's code answers it)."""
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    if (
        table.range_key_attr is None
        or table.range_key_type != "S"
        or not isinstance(hash_key, DynamoType)
        or hash_key.type not in ("S", "N", "B")
        or not isinstance(scan_index_forward, bool)
        or not (limit is None or (isinstance(limit, int) and limit >= 1))
        or (
            range_key_conditions
            and (len(range_key_conditions) != 1 or range_key_conditions[0][0] != table.range_key_attr)
        )
        or (range_comparison is not None and range_comparison not in _RANGE_COMPARISONS)
    ):
        return None
    operands: list[str] = []
    if range_comparison is not None:
        count = 2 if range_comparison == "BETWEEN" else 1
        if len(range_objs) != count or not all(
            isinstance(obj, DynamoType) and obj.type == "S" and isinstance(obj.value, str)
            for obj in range_objs
        ):
            return None
        operands = [obj.value for obj in range_objs]
    skip_all, after = False, None
    if exclusive_start_key is not None:
        if not (
            isinstance(exclusive_start_key, dict)
            and _single_type(exclusive_start_key.get(table.hash_key_attr), hash_key.type)
            and _single_type(exclusive_start_key.get(table.range_key_attr), "S")
            and isinstance(exclusive_start_key[table.range_key_attr]["S"], str)
        ):
            return None
        start_hash = DynamoType(exclusive_start_key[table.hash_key_attr])
        if hash_key != start_hash:
            # moto skips an item while it sorts before the key: here, all of them or none.
            skip_all = (hash_key < start_hash) == scan_index_forward
        else:
            after = exclusive_start_key[table.range_key_attr]["S"]

    results: list[Any] = []
    result_size = 0
    last_evaluated_key = None
    with _partitions_lock:
        found = table.items.get(hash_key)
        if found is not None and not isinstance(found, _SortedPartition):
            return None
        partition: dict[Any, Any] = {} if found is None else found
        ordered = found.sorted_keys() if found is not None else ([], [])
        if ordered is None:
            return None
        values, keys = ordered
        low, high = _bounds(values, range_comparison, operands)
        if skip_all:
            low = high = 0
        # Positions in the order moto walks the partition: the matching ones, then those after them.
        if scan_index_forward:
            start = 0 if after is None else bisect.bisect_right(values, after)
            matching: Iterator[int] = iter(range(max(low, start), max(high, low, start)))
            rest: Iterator[int] = iter(range(max(high, low, start), len(values)))
        else:
            start = len(values) if after is None else bisect.bisect_left(values, after)
            top = min(high, start)
            matching = iter(range(top - 1, low - 1, -1))
            rest = iter(range(min(low, top) - 1, -1, -1))
        for index in matching:
            item = dict.__getitem__(partition, keys[index])
            size = item.size()
            if len(results) == limit or result_size + size > RESULT_SIZE_LIMIT:
                last_evaluated_key = table._get_last_evaluated_key(results[-1], None)
                break
            results.append(item)
            result_size += size
        else:
            # moto goes on through the rest of the partition: none of it matches, but meeting
            # an item once Limit items matched, or one too big for the page, ends the page there.
            if results and (len(results) == limit or result_size + _MAX_ITEM_SIZE > RESULT_SIZE_LIMIT):
                for index in rest:
                    item = dict.__getitem__(partition, keys[index])
                    if len(results) == limit or result_size + item.size() > RESULT_SIZE_LIMIT:
                        last_evaluated_key = table._get_last_evaluated_key(results[-1], None)
                        break
    scanned_count = len(results)
    results = copy.deepcopy(results)
    if filter_expression is not None:
        results = [item for item in results if filter_expression.expr(item)]
    if projection_expressions:
        results = [item.project(projection_expressions) for item in results]
    return results, scanned_count, last_evaluated_key


def _unsorted(table: Any) -> bool:
    """Whether this thread is in an index query of `table` (its items need not be sorted)."""
    return getattr(_local, "unsorted_items", None) is table


def _patch_queries(table_module: Any) -> None:
    table_class = table_module.Table
    original_init = table_class.__init__
    original_query = table_class.query
    original_all_items = table_class.all_items

    @wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if isinstance(self.items, defaultdict) and self.items.default_factory is dict and not self.items:
            self.items = defaultdict(_SortedPartition)

    @wraps(original_all_items)
    def all_items(self: Any) -> list[Any]:
        if not _unsorted(self):
            return original_all_items(self)  # type: ignore[no-any-return]
        items: list[Any] = []
        for hash_set in list(self.items.values()):
            items.extend(list(hash_set.values()) if self.range_key_attr else [hash_set])
        return items

    @wraps(original_query)
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
        if not index_name and not filter_kwargs:
            answer = _fast_query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                filter_expression,
                range_key_conditions,
            )
            if answer is not None:
                return answer
        if not index_name:
            return original_query(self, *arguments, **keywords, **filter_kwargs)  # type: ignore[no-any-return]
        # An index query sorts the items it keeps by the index key then the table key, a total
        # order: the table's items need not be sorted first.
        _local.unsorted_items = self
        try:
            return original_query(self, *arguments, **keywords, **filter_kwargs)  # type: ignore[no-any-return]
        finally:
            _local.unsorted_items = None

    table_class.__init__ = __init__
    table_class.all_items = all_items
    table_class.query = query


# --- 5. update expressions -----------------------------------------------------------------------


class _NotPlain(Exception):
    """A tree _clone_tree leaves to copy.deepcopy."""


_PLAIN = (str, int, float, bool, type(None))
_EXPRESSION_CACHE_LIMIT = 4096
# Update expressions as moto parsed them, by text (moto only reads a parsed tree: its validator
# works on a copy); and the text of each, by the tree's id (the trees are kept: ids stay unique).
_parsed_updates: dict[str, Any] = {}
_update_sources: dict[int, str] = {}
# (text, ExpressionAttributeNames, the table's key attributes) that passed moto's checks that
# depend on nothing else: one clause of each kind, no overlapping paths, no key attribute updated.
_checked_updates: set[tuple[Any, ...]] = set()
_expressions_lock = threading.Lock()
_node_class: Any = None  # moto's expression tree Node, once apply() has imported it
_VALUE_FREE_CHECKS: tuple[type, ...] = ()  # those checks' classes, in moto's order


@functools.cache
def _copies_plainly(cls: Any) -> bool:
    """Whether copy.deepcopy copies an instance of `cls` as its __dict__, attribute by attribute."""
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is getattr(object, "__getstate__", None)
        and not hasattr(cls, "__setstate__")
        and not hasattr(cls, "__deepcopy__")
        and "__slots__" not in {name for klass in cls.__mro__ for name in vars(klass)}
    )


def _clone_tree(root: Any) -> Any:
    """What copy.deepcopy makes of a parsed expression tree, made without its generic machinery;
    None when the tree holds anything but nodes, their lists of children, strings, numbers and
    parents inside the tree (the caller then deep-copies)."""
    if not isinstance(root, _node_class) or getattr(root, "parent", None) is not None:
        return None
    copies: dict[int, Any] = {}
    nodes: list[tuple[Any, Any]] = []

    def clone(node: Any) -> Any:
        done = copies.get(id(node))
        if done is not None:
            return done
        cls: Any = type(node)
        if not _copies_plainly(cls):
            raise _NotPlain
        new = cls.__new__(cls)
        copies[id(node)] = new
        nodes.append((node, new))
        attributes: dict[str, Any] = {}
        for name, value in node.__dict__.items():
            if name == "parent":
                attributes[name] = None  # set below, once every node has its copy
            elif type(value) is list and name == "children":
                children = []
                for child in value:
                    if isinstance(child, _node_class):
                        children.append(clone(child))
                    elif type(child) in _PLAIN:
                        children.append(child)
                    else:
                        raise _NotPlain
                attributes[name] = children
            elif type(value) in _PLAIN:
                attributes[name] = value
            else:
                raise _NotPlain
        new.__dict__.update(attributes)
        return new

    try:
        copied = clone(root)
        for node, new in nodes:
            parent = node.__dict__.get("parent")
            if parent is not None:
                if id(parent) not in copies:
                    raise _NotPlain
                new.parent = copies[id(parent)]
    except (_NotPlain, RecursionError):
        return None
    return copied


def _deepcopy_tree(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """copy.deepcopy inside moto's validators module: expression trees are cloned directly."""
    if memo is None and isinstance(value, _node_class):
        copied = _clone_tree(value)
        if copied is not None:
            return copied
    return copy.deepcopy(value, memo)


def _check_key(validator: Any) -> tuple[Any, ...] | None:
    """What the value-free checks of this validation depend on; None if it is not known."""
    source = getattr(validator, "_speedups_source", None)
    if source is None:
        return None
    names = validator.expression_attribute_names
    try:
        return (
            source,
            None if names is None else tuple(sorted(names.items())),
            tuple(validator.table.table_key_attrs),
        )
    except (TypeError, AttributeError):
        return None


def _patch_update_expressions(expressions: Any, validators: Any) -> None:
    parser_class = expressions.UpdateExpressionParser
    original_make = parser_class.__dict__["make"].__func__
    validator_class = validators.UpdateExpressionValidator
    original_init = validator_class.__init__

    def make(cls: Any, expression_str: Any) -> Any:
        if cls is not parser_class or not isinstance(expression_str, str):
            return original_make(cls, expression_str)
        tree = _parsed_updates.get(expression_str)
        if tree is not None:
            return tree
        tree = original_make(cls, expression_str)  # an invalid expression raises: nothing kept
        # Only trees the validator can clone (the others are moto's to copy, each time).
        if _clone_tree(tree) is not None and len(_parsed_updates) < _EXPRESSION_CACHE_LIMIT:
            with _expressions_lock:
                _update_sources[id(tree)] = expression_str
                _parsed_updates.setdefault(expression_str, tree)
        return tree

    @wraps(original_init)
    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, expression, *args, **kwargs)
        source = _update_sources.get(id(expression))
        self._speedups_source = source if _parsed_updates.get(source or "") is expression else None

    def validate(self: Any) -> Any:
        processors = self.processors
        key = _check_key(self)
        if key is not None and tuple(type(p) for p in processors[: len(_VALUE_FREE_CHECKS)]) != (
            _VALUE_FREE_CHECKS
        ):
            key = None
        skip = len(_VALUE_FREE_CHECKS) if key is not None and key in _checked_updates else 0
        node = self.node_to_validate
        for index, processor in enumerate(processors):
            if index < skip:
                continue  # passed before for this text, these names and this table's keys
            node = processor.traverse(node)
            if (
                key is not None
                and not skip
                and index == len(_VALUE_FREE_CHECKS) - 1
                and len(_checked_updates) < _EXPRESSION_CACHE_LIMIT
            ):
                _checked_updates.add(key)
        return node

    parser_class.make = classmethod(make)
    validator_class.__init__ = __init__
    validator_class.validate = validate
    setattr(validators, "deepcopy", _deepcopy_tree)  # noqa: B010 (moto imports deepcopy by name)


# --- 4. request routing --------------------------------------------------------------------------


def _patch_routing(backends: Any) -> None:
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


# --- 6. SQS queue attributes -----------------------------------------------------------------------

# The counts among a queue's attributes (each a walk of its messages in moto).
_SQS_COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
)


def _message_counts(queue: Any, now: float) -> dict[str, int]:
    """moto's three counts (visible and not delayed; delayed; not visible) in one walk, at one
    time: `now`, in milliseconds of moto's SQS clock (so a test that sets that clock moves these
    counts with its messages' visibility)."""
    ready = delayed = in_flight = 0
    for message in queue._messages:
        visible = now > message.visible_at
        waiting = now < message.delayed_until
        ready += visible and not waiting
        delayed += waiting
        in_flight += not visible
    return dict(zip(_SQS_COUNTS, (ready, delayed, in_flight), strict=True))


def _attribute_names(queue: Any) -> list[str]:
    """The attributes moto gives the queue, in moto's order."""
    names = list(queue.BASE_ATTRIBUTES)
    if queue.fifo_queue:
        names += queue.FIFO_ATTRIBUTES
    if queue.kms_master_key_id:
        names += queue.KMS_ATTRIBUTES
    return names


def _attribute_value(queue: Any, name: str, counts: dict[str, int], field: Callable[[str], str]) -> Any:
    if name in counts:
        value: Any = counts[name]
    elif name == "RedrivePolicy" and queue.redrive_policy:
        value = json.dumps(queue.redrive_policy)
    else:
        value = getattr(queue, field(name))
    return str(value).lower() if isinstance(value, bool) else value


def _patch_sqs(sqs_models: Any, field: Callable[[str], str]) -> None:
    original_unix_time = sqs_models.unix_time
    original_unix_time_millis = sqs_models.unix_time_millis
    original_lookup = sqs_models.SQSBackend.get_queue_attributes
    field = functools.cache(field)  # moto converts each name with a regular expression

    def unix_time(dt: Any = None) -> float:
        return original_unix_time(dt) if dt is not None else time.time()

    def unix_time_millis(dt: Any = None) -> float:
        return original_unix_time_millis(dt) if dt is not None else time.time() * 1000.0

    def attributes(self: Any) -> dict[str, Any]:
        counts = _message_counts(self, sqs_models.unix_time_millis())
        return {name: _attribute_value(self, name, counts, field) for name in _attribute_names(self)}

    def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
        queue = self.get_queue(queue_name)  # moto's error for an unknown queue comes first
        valid = {*queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES}
        if not attribute_names or not all(name in valid for name in attribute_names):
            answer: dict[str, Any] = original_lookup(self, queue_name, attribute_names)
            return answer  # nothing asked, "All", or a name moto refuses
        present = set(_attribute_names(queue))
        counts = (
            _message_counts(queue, sqs_models.unix_time_millis())
            if any(n in _SQS_COUNTS for n in attribute_names)
            else {}
        )
        found: dict[str, Any] = {}
        for name in attribute_names:
            if name in present:
                value = _attribute_value(queue, name, counts, field)
                if value is not None:
                    found[name] = value
        return found

    sqs_models.unix_time = unix_time
    sqs_models.unix_time_millis = unix_time_millis
    sqs_models.Queue.attributes = property(attributes)
    sqs_models.SQSBackend.get_queue_attributes = get_queue_attributes


def _pending_groups(queue: Any) -> set[str]:
    return {message.group_id for message in tuple(queue._pending_messages) if message.group_id is not None}


def _patch_pending_groups(sqs_models: Any) -> None:
    sqs_models.Queue.pending_message_groups = property(_pending_groups)


def moto_matches() -> bool:
    """True when the installed moto is the release the patches were written for; else warns."""
    installed = metadata.version("moto")
    if installed == MOTO_VERSION:
        return True
    warnings.warn(
        f"aijobs: moto {installed} is installed, but the moto patches (aijobs_cli.moto_speedups) were "
        f"written for {MOTO_VERSION}: none is applied, so the local stack and the tests run on moto's "
        "own code (slower on big tables and queues, no fair queues, no DynamoDB isolation). Install "
        f"moto=={MOTO_VERSION} (requirements/dev.txt), or re-check the patches and move the pin.",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


def apply() -> None:
    """Install the fixes (idempotent); none when the installed moto is not MOTO_VERSION."""
    global _applied, _table_class, _node_class, _VALUE_FREE_CHECKS
    if _applied:
        return
    _applied = True  # checked once per process, whether or not they apply
    if not moto_matches():
        return
    from moto import backends
    from moto.core.utils import camelcase_to_underscores
    from moto.dynamodb import models
    from moto.dynamodb.models import table
    from moto.dynamodb.responses import DynamoHandler

    # moto's parsing modules are untyped (`# type: ignore`): looked up as plain modules.
    ast_nodes: Any = importlib.import_module("moto.dynamodb.parsing.ast_nodes")
    expressions: Any = importlib.import_module("moto.dynamodb.parsing.expressions")
    validators: Any = importlib.import_module("moto.dynamodb.parsing.validators")
    sqs_models: Any = importlib.import_module("moto.sqs.models")  # its clock is imported by name

    ORIGINALS.update(
        {
            "DynamoDBBackend.transact_write_items": models.DynamoDBBackend.transact_write_items,
            "DynamoHandler.call_action": DynamoHandler.call_action,
            "Table.__init__": table.Table.__init__,
            "Table.query": table.Table.query,
            "Table.all_items": table.Table.all_items,
            "list_of_moto_modules": backends.list_of_moto_modules,
            "UpdateExpressionParser.make": expressions.UpdateExpressionParser.__dict__["make"],
            "UpdateExpressionValidator.__init__": validators.UpdateExpressionValidator.__init__,
            "UpdateExpressionValidator.validate": validators.UpdateExpressionValidator.validate,
            "validators.deepcopy": validators.deepcopy,
            "sqs.unix_time": sqs_models.unix_time,
            "sqs.unix_time_millis": sqs_models.unix_time_millis,
            "Queue.attributes": sqs_models.Queue.__dict__["attributes"],
            "SQSBackend.get_queue_attributes": sqs_models.SQSBackend.get_queue_attributes,
            "Queue.pending_message_groups": sqs_models.Queue.__dict__["pending_message_groups"],
        }
    )
    _table_class = table.Table
    _node_class = ast_nodes.Node
    _VALUE_FREE_CHECKS = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )
    _patch_transactions(models)
    _patch_queries(table)
    _patch_routing(backends)
    _patch_update_expressions(expressions, validators)
    _patch_sqs(sqs_models, camelcase_to_underscores)
    _patch_isolation(DynamoHandler)
    _patch_pending_groups(sqs_models)
    # Not a speed-up: SQS behaviour moto lacks (fair queues), wanted wherever moto stands in for AWS.
    from aijobs_cli import moto_fair_queues

    moto_fair_queues.apply()
