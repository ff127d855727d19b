"""The measured writes per partition-key shape of each step of a job's life, for `aijobs capacity`.

`partition_trace.json` beside this module is written by `scripts/benchmark.py --write-trace`, which
drives a synthetic load (`tests/partition_sim.py`: grants, submits over many tenants and kinds,
claims, retries, failures with refunds, expiry and retention clean-up) through the real store code
on moto and counts every table and index write by partition key.
`tests/integration/test_partition_load.py` measures again and fails when the file is stale.

The call profile (`call_profile.json`) has what each request path calls; the trace adds what the
profile cannot see per job: the clean-up that removes every credit transaction a job wrote (a
cron's work, but one removal per transaction, so proportional to the job rate), grants entering
and leaving the expiry index, and the status each kind/status index write lands in. The capacity
model takes the loads of the index partitions every tenant shares (`KIND#<kind>#STATUS#<status>`,
`GRANT`, `TX`, each write-sharded over `INDEX_BUCKETS`) from here, each step weighed by how often
its workload runs it; `tests/integration/test_partition_load.py` also checks that the steps a
request path makes write what the call profile measured for that path.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field

TRACE_FILE = "partition_trace.json"
#: The command that measures and rewrites the trace.
REGENERATE = ".venv/bin/python scripts/benchmark.py --write-trace"

#: The steps of a job's (and its credits') life the simulation counts writes under.
STEPS = ("submit", "claim", "succeed", "fail_retryable", "fail_final", "grant", "expire", "archive")

_USER = re.compile(r"^USER#[^#]+")
_KIND = re.compile(r"^KIND#[^#]+#")
_BUCKET = re.compile(r"^(?P<base>KIND#[^#]+#STATUS#[a-z_]+|GRANT|TX)#\d+$")


def shape(partition: str) -> str:
    """A partition key with its tenant, kind and bucket as `{}` (its status kept):
    `KIND#summary#STATUS#queued#3` -> `KIND#{}#STATUS#queued#{}`, `USER#alice` -> `USER#{}`."""
    bucketed = _BUCKET.match(partition)
    if bucketed:
        partition = bucketed["base"] + "#{}"
    return _KIND.sub("KIND#{}#", _USER.sub("USER#{}", partition))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepWrites(_Frozen):
    """One step: how often the simulation ran it, and its writes per run by table or index
    ("table", or the index name) and partition-key shape, summed over the partitions of a shape.
    Table writes are by partition and item shape, `USER#{} CREDITS` (the item's sort key as the call
    profile's key template)."""

    runs: int = Field(ge=0)
    writes: dict[str, dict[str, float]]


class PartitionTrace(_Frozen):
    about: tuple[str, ...] = ()
    regenerate: str = REGENERATE
    jobs: int = Field(ge=1)
    tenants: int = Field(ge=1)
    kinds: tuple[str, ...]
    #: The simulation's write buckets (the writes per shape do not depend on it).
    index_buckets: int = Field(ge=1)
    steps: dict[str, StepWrites]

    @classmethod
    def from_json(cls, path: str | Path) -> Self:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def to_json(self) -> str:
        return self.model_dump_json(indent=1) + "\n"

    def writes(self, step: str, where: str, partition_shape: str) -> float:
        return self.steps[step].writes.get(where, {}).get(partition_shape, 0.0)


def step_rates(
    path_rates: Mapping[str, float], *, grants_per_job: float, trace: PartitionTrace
) -> dict[str, float]:
    """Runs of each step per job, from the capacity model's runs of each measured path per job.

    Every delivery claims; a job that ends failed (invalid input, or dead-lettered after its last
    attempt) is failed with a refund; each grant enters the expiry index and leaves it when due; and
    every credit transaction written (the debit, a refund, a grant's or an expiry's record) is
    removed by retention once, so archives per job are the transactions the other steps write.
    """

    def runs(*paths: str) -> float:
        return sum(path_rates.get(path, 0.0) for path in paths)

    rates = {
        "submit": runs("producer.submit", "producer.submit_idempotent"),
        "claim": sum(rate for name, rate in path_rates.items() if name.startswith("consumer.")),
        "succeed": runs("consumer.success", "consumer.success_webhook", "consumer.success_after_retry"),
        "fail_retryable": runs("consumer.retry"),
        "fail_final": runs("consumer.failed_final", "consumer.dead_letter"),
        "grant": grants_per_job,
        "expire": grants_per_job,
    }
    rates["archive"] = sum(rate * trace.writes(step, "by_due", "TX#{}") for step, rate in rates.items())
    return rates


def per_job_writes(trace: PartitionTrace, rates: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """Writes per job by (table or index, partition-key shape): each step's writes per run times its
    runs per job."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for step, rate in rates.items():
        if rate:
            for where, shapes in trace.steps[step].writes.items():
                for partition_shape, writes in shapes.items():
                    totals[(where, partition_shape)] += rate * writes
    return dict(totals)


@functools.cache
def default_trace() -> PartitionTrace:
    """The trace committed with the package (read on first use)."""
    text = resources.files("aijobs_cli.sizing").joinpath(TRACE_FILE).read_text(encoding="utf-8")
    return PartitionTrace.model_validate_json(text)


def trace_path() -> Path:
    """Where `scripts/benchmark.py --write-trace` writes the trace (this package's folder)."""
    return Path(__file__).with_name(TRACE_FILE)
