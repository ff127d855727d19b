"""The measured AWS calls of each code path, with the capacity units AWS bills for them.

`call_profile.json` beside this module is written by `scripts/benchmark.py --write-profile`, which
runs every path on a moto stage and records each call from botocore's own events
(`tests/aws_calls.py`), reading the items it touched from the moto backend before and after the
call. `tests/integration/test_call_profile.py` measures again and fails when the file is stale.
The cost estimator (`aijobs_cli.sizing.cost`) takes its per-path counts from here and nowhere else.

Per call it keeps what a capacity model needs too: the table by role (`meta`, `shard`), the key
*template* of every item it touched (`USER#{}` / `JOB#{}`: constant upper-case parts kept,
variable parts as `{}`), and the index partitions each write lands in (`KIND#{}#STATUS#{}` is one
partition per kind and status, shared by every tenant), so hot keys can be derived from it.

DynamoDB billing rules applied (on-demand request units; provisioned capacity units are the same
numbers per second):

- item size: attribute names + values (string: UTF-8 bytes; number: 1 byte per 2 significant
  digits + 1; binary: bytes; boolean/null: 1; list/map: 3 + 1 per element + the elements);
- a write: 1 WRU per started KB of the larger of the item before and after (a delete: the item
  deleted; a write refused by its condition: the item as it is, at least 1);
- a write in `TransactWriteItems` (and a `ConditionCheck`): 2 WRU per started KB;
- a global secondary index (every index here projects ALL attributes): 1 WRU per started KB of
  the entry for a put into or a delete from the index, 2 writes when the index key changes, 1 when
  only other attributes change, none when the item is in the index neither before nor after; at
  the standard rate also for transactional writes (index propagation is not transactional);
- a strongly consistent read: 1 RRU per started 4 KB; eventually consistent: half; transactional:
  double; a read of a missing item or an empty Query still costs the minimum (one 4 KB unit);
- a Query: the sizes of all items it returns, summed, then rounded up to 4 KB.
"""

from __future__ import annotations

import base64
import functools
import math
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

PROFILE_FILE = "call_profile.json"
#: The command that measures and rewrites the profile.
REGENERATE = ".venv/bin/python scripts/benchmark.py --write-profile"

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
#: SQS, SNS and Cloudflare Queues bill each started 64 KB of a request's payload as one request.
CHUNK_BYTES = 64 * 1024

#: Sort-key templates of job rows (their size grows with an inline input and result).
JOB_ITEM_SORTS = ("JOB#{}", "CHILD#{}")

#: One run of the cron dispatcher around a handler that makes no AWS call (its run claimed and
#: finished, the incident checked): what a cron costs at the least, and what the cost estimate
#: prices a registered cron with until the profile measures it.
CRON_DISPATCHER = "cron.dispatcher"

# --- DynamoDB item sizes and units ----------------------------------------------------------------


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: 1 per two significant digits, plus 1 (plus 1 if negative)."""
    digits = text.lstrip("-+").lower().split("e")[0].replace(".", "").strip("0")
    return math.ceil(max(len(digits), 1) / 2) + 1 + (1 if text.startswith("-") else 0)


def _bytes_of(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        return len(value)
    return len(base64.b64decode(value))


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB JSON (`{"S": "..."}`), by DynamoDB's size rules."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode("utf-8"))
    if kind == "N":
        return number_size(str(raw))
    if kind == "B":
        return _bytes_of(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode("utf-8")) for v in raw)
    if kind == "NS":
        return sum(number_size(str(v)) for v in raw)
    if kind == "BS":
        return sum(_bytes_of(v) for v in raw)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + attribute_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item in DynamoDB JSON: every attribute's name plus its value (0 if missing)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + attribute_size(value) for name, value in item.items())


def write_units(size: int, *, transactional: bool = False) -> float:
    """WRU of one item write of `size` bytes (at least one KB)."""
    units = max(1, math.ceil(size / WRITE_UNIT_BYTES))
    return float(units * (2 if transactional else 1))


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """RRU of a read returning `size` bytes (at least one 4 KB unit)."""
    units = float(max(1, math.ceil(size / READ_UNIT_BYTES)))
    if transactional:
        return units * 2
    return units if consistent else units / 2


def chunks(size: int) -> int:
    """Billed requests of a payload of `size` bytes: one per started 64 KB, at least one."""
    return max(1, math.ceil(size / CHUNK_BYTES))


_CONSTANT = re.compile(r"[A-Z]+")


def key_template(value: str) -> str:
    """`USER#alice` -> `USER#{}`: upper-case constant parts kept, variable parts as `{}`."""
    return "#".join(part if _CONSTANT.fullmatch(part) else "{}" for part in value.split("#"))


# --- the profile ----------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IndexWrite(_Frozen):
    """The writes one table write causes in one global secondary index."""

    index: str
    #: Template of the index partition key the entry is written under (the new one when it moved).
    partition: str
    #: 1 (put, delete, or update in place) or 2 (the index key changed: delete + put).
    writes: int = Field(ge=1, le=2)
    #: The larger index entry (ALL projection: the item) of the writes.
    bytes: int = Field(ge=0)
    units: float = Field(ge=0)


class ItemAccess(_Frozen):
    """One item a call read or wrote, with the units billed for it on the table."""

    action: Literal["Get", "Query", "Put", "Update", "Delete", "ConditionCheck"]
    table: str
    partition: str
    sort: str
    #: Billed size: the item read, or the larger of the item before and after a write.
    bytes: int = Field(ge=0)
    #: Whether the write changed the item (False: refused by its condition, or a check).
    changed: bool = False
    #: Table units for this item (0 for a Query's items: the Query is billed as a whole).
    units: float = Field(ge=0)
    index_writes: tuple[IndexWrite, ...] = ()

    @property
    def is_job_row(self) -> bool:
        return self.table == "shard" and self.sort in JOB_ITEM_SORTS


class Call(_Frozen):
    """One AWS request of a path."""

    service: str
    operation: str
    #: DynamoDB: the table's role (`meta`, `shard`); SQS: `queue` or `dlq`.
    table: str | None = None
    index: str | None = None
    #: DynamoDB Query: template of the partition it reads.
    partition: str | None = None
    consistent: bool | None = None
    transactional: bool = False
    #: Payload bytes (SQS/SNS message bodies, S3 objects).
    bytes: int = Field(default=0, ge=0)
    #: Billed requests (SQS/SNS: one per started 64 KB of payload).
    requests: int = Field(default=1, ge=0)
    read_units: float = Field(default=0.0, ge=0)
    write_units: float = Field(default=0.0, ge=0)
    index_write_units: float = Field(default=0.0, ge=0)
    items: tuple[ItemAccess, ...] = ()

    @property
    def carries_message(self) -> bool:
        """A request whose payload is a job message (its size is the workload's `message_kb`)."""
        return self.service == "sqs" and self.operation in ("SendMessage", "SendMessageBatch")

    def units(self, job_row_bytes: int | None = None) -> tuple[float, float]:
        """(RRU, WRU incl. index writes); with `job_row_bytes`, as if every job row had that size."""
        if job_row_bytes is None or not any(item.is_job_row for item in self.items):
            return self.read_units, self.write_units + self.index_write_units
        items = [
            item.model_copy(update={"bytes": job_row_bytes}) if item.is_job_row else item
            for item in self.items
        ]
        if self.operation == "Query":
            size = sum(item.bytes for item in items)
            return read_units(size, consistent=bool(self.consistent)), 0.0
        reads = writes = 0.0
        for item in items:
            if item.action == "Get":
                reads += read_units(
                    item.bytes, consistent=bool(self.consistent), transactional=self.transactional
                )
                continue
            writes += write_units(item.bytes, transactional=self.transactional)
            for index in item.index_writes:
                size = job_row_bytes if item.is_job_row else index.bytes
                writes += index.writes * write_units(size)
        return reads, writes


class PathProfile(_Frozen):
    """The calls of one unit of a path (one request, one delivery, one cron run), in order."""

    description: str
    calls: tuple[Call, ...]

    def count(self, service: str, operation: str | None = None, *, table: str | None = None) -> int:
        return sum(
            1
            for call in self.calls
            if call.service == service
            and (operation is None or call.operation == operation)
            and (table is None or call.table == table)
        )

    def requests(self, service: str, *, message_chunks: int | None = None, table: str | None = None) -> int:
        """Billed requests of `service`; `message_chunks` replaces the chunks of a job message."""
        total = 0
        for call in self.calls:
            if call.service != service or (table is not None and call.table != table):
                continue
            total += (
                message_chunks if (message_chunks is not None and call.carries_message) else call.requests
            )
        return total

    def units(self, job_row_bytes: int | None = None, *, table: str | None = None) -> tuple[float, float]:
        """(RRU, WRU incl. index writes) of the path's DynamoDB calls (on one table role)."""
        reads = writes = 0.0
        for call in self.calls:
            if call.service == "dynamodb" and (table is None or call.table == table):
                r, w = call.units(job_row_bytes)
                reads, writes = reads + r, writes + w
        return reads, writes


class CallProfile(_Frozen):
    """Every measured path: `producer.submit`, `consumer.success`, `cron.<expression>`, ..."""

    about: tuple[str, ...] = ()
    regenerate: str = REGENERATE
    #: The moto stage the paths ran on (the benchmark's `.env` values).
    stage: dict[str, str] = Field(default_factory=dict)
    #: The job row's size as measured (the benchmark's input is a few sentences).
    job_row_bytes: int = Field(default=0, ge=0)
    paths: dict[str, PathProfile]

    def path(self, name: str) -> PathProfile:
        try:
            return self.paths[name]
        except KeyError:
            raise KeyError(
                f"the call profile has no path {name!r} (it has {sorted(self.paths)}); "
                f"regenerate it: {REGENERATE}"
            ) from None

    def cron(self, expression: str) -> PathProfile:
        """One run of the cron handler registered under `expression` (nothing due)."""
        return self.path(f"cron {expression}")

    def has_cron(self, expression: str) -> bool:
        return f"cron {expression}" in self.paths

    def cron_or_estimate(self, expression: str) -> tuple[PathProfile, bool]:
        """The measured run of `expression`, or (a cron the profile has not measured, e.g. one a
        team added since it was written) the dispatcher's own run, and whether it is that estimate."""
        if self.has_cron(expression):
            return self.cron(expression), False
        return self.path(CRON_DISPATCHER), True

    @property
    def measured_kinds(self) -> tuple[str, ...]:
        """The job kinds whose jobs the consumer paths were measured on (the profile's stage)."""
        return tuple(kind.strip() for kind in self.stage.get("QUEUE_NAMES", "").split(";") if kind.strip())

    @classmethod
    def from_json(cls, path: str | Path) -> Self:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def to_json(self) -> str:
        return self.model_dump_json(indent=1, exclude_defaults=True) + "\n"


@functools.cache
def default_profile() -> CallProfile:
    """The profile committed with the package (read on first use)."""
    text = resources.files("aijobs_cli.sizing").joinpath(PROFILE_FILE).read_text(encoding="utf-8")
    return CallProfile.model_validate_json(text)


def profile_path() -> Path:
    """Where `scripts/benchmark.py --write-profile` writes the profile (this package's folder)."""
    return Path(__file__).with_name(PROFILE_FILE)
