"""`aijobs capacity`: which limit a job rate meets first, from the measured call profile and
partition trace.

Pure arithmetic, like `aijobs_cli.sizing.cost`: nothing here calls AWS. What each request path calls (and
which items, partitions and index partitions it writes) comes from the call profile
(`aijobs_cli/sizing/call_profile.json`, measured on moto by `scripts/benchmark.py --write-profile`). The
index partitions every tenant shares, and the per-job work the crons do later (retention removing
each credit transaction, grants entering and leaving the expiry index), come from the partition
trace (`aijobs_cli/sizing/partition_trace.json`, `scripts/benchmark.py --write-trace`: the store driven
through every step of a job's life on moto), each step weighed by how often this workload runs it.
This module only says how often each path and step runs per job and how the load spreads:

- jobs are spread evenly over the kinds and over the tenants (or one tenant sends
  `hot_tenant_share` of them);
- a partition template starting with `USER#` is one tenant's (its job partition, its `CREDITS`
  item, its `USER#..#STATUS#..` index partitions), `KIND#` and `DEADLETTER#` one kind's, the
  `GRANT` and `TX` index partitions are shared by every tenant; the kind/status, `GRANT` and `TX`
  index partitions are divided by the stage's `INDEX_BUCKETS` write-sharding buckets (1: unsharded);
- a kind/status index partition's load is its own status's (the trace counts an entry that moves
  as a delete in the partition it leaves and a put in the one it enters);
- the cron steps' table writes are transactions (2 WRU per item), their index writes 1 WRU each
  (grant and transaction items are far under 1 KB);
- every load is linear in the job rate (`fixed + per_job * rate`), so the rate at which a limit is
  reached is `(ceiling - fixed) / per_job`.

The limits are AWS's published defaults (per account and region unless said otherwise); several are
adjustable quotas, marked `quota`. `design` marks the walls the key design decides.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aijobs_cdk.stage_config import StageConfig
from aijobs_cli.sizing.call_profile import Call, CallProfile, default_profile
from aijobs_cli.sizing.capacity_limits import (
    APIGW_ACCOUNT_RPS,
    LAMBDA_ACCOUNT_CONCURRENCY,
    SECONDS_PER_MONTH,
    Limit,
    Owner,
    UnitLoad,
    api_limits,
    index_bucket_limits,
    lambda_limits,
    maintenance_limits,
    partition_limits,
    provider_limits,
    scheduler_limits,
    sqs_limits,
    table_limits,
)
from aijobs_cli.sizing.cost_lines import poll_reads
from aijobs_cli.sizing.partition_trace import PartitionTrace, default_trace, per_job_writes, step_rates


class CapacityInputs(BaseModel):
    """A sustained job rate and what the model needs about the stage and the workload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    jobs_per_second: float = Field(gt=0)
    kinds: tuple[str, ...] = Field(min_length=1)
    tenants: int = Field(default=1_000, ge=1)
    #: Share of all jobs one (the busiest) tenant sends; None: every tenant sends 1 / tenants.
    hot_tenant_share: float | None = Field(default=None, gt=0, le=1)
    #: Credit grants each tenant gets a month (each enters the expiry index and leaves it when due):
    #: they follow the tenants, not the job rate.
    grants_per_tenant_month: float = Field(default=2.0, ge=0)
    retry_rate: float = Field(default=0.05, ge=0, le=1)
    dlq_rate: float = Field(default=0.01, ge=0, le=1)
    failed_final_rate: float = Field(default=0.0, ge=0, le=1)
    idempotency_rate: float = Field(default=0.0, ge=0, le=1)
    polls_per_job: float = Field(default=1.0, ge=0)
    #: Seconds each status call waits for its job (`?wait=`): it holds an API execution that long.
    poll_wait_seconds: float = Field(default=2.0, ge=0, le=20)
    #: Function time per request / per delivered message / per dead letter.
    producer_ms: float = Field(default=60.0, ge=0)
    consumer_seconds: float = Field(default=2.0, ge=0)
    dlq_ms: float = Field(default=200.0, ge=0)
    max_retries: int = Field(default=3, ge=0)
    retry_base_delay_seconds: float = Field(default=10.0, ge=0)
    retry_max_delay_seconds: float = Field(default=900.0, ge=0)
    batch_window_seconds: float = Field(default=10.0, ge=0)
    api_throttle_rate: float = Field(default=50.0, gt=0)
    #: The mapping's MaximumConcurrency (None: no limit of the stage's own).
    esm_max_concurrency: int | None = Field(default=None, ge=1)
    index_buckets: int = Field(default=1, ge=1)
    shard_count: int = Field(default=1, ge=1)
    #: Runs per hour of each cron expression.
    cron_runs: dict[str, float] = Field(default_factory=dict)
    #: A provider's requests and tokens per minute, per kind (only the kinds given are checked).
    provider_rpm: dict[str, float] = Field(default_factory=dict)
    provider_tpm: dict[str, float] = Field(default_factory=dict)
    tokens_per_attempt: float = Field(default=2_300.0, ge=0)
    lambda_account_concurrency: float = Field(default=LAMBDA_ACCOUNT_CONCURRENCY, gt=0)
    apigw_account_rps: float = Field(default=APIGW_ACCOUNT_RPS, gt=0)

    @model_validator(mode="after")
    def _rates(self) -> CapacityInputs:
        if self.dlq_rate > self.retry_rate:
            raise ValueError(f"dlq_rate ({self.dlq_rate}) > retry_rate ({self.retry_rate})")
        if self.retry_rate + self.failed_final_rate > 1:
            raise ValueError("retry_rate + failed_final_rate > 1")
        unknown = sorted((set(self.provider_rpm) | set(self.provider_tpm)) - set(self.kinds))
        if unknown:
            raise ValueError(
                f"provider quotas for kinds not in the model: {unknown} (kinds: {list(self.kinds)})"
            )
        return self

    @property
    def tenant_share(self) -> float:
        """The busiest tenant's share of all jobs."""
        return self.hot_tenant_share if self.hot_tenant_share is not None else 1 / self.tenants

    @property
    def kind_share(self) -> float:
        return 1 / len(self.kinds)

    @property
    def grants_per_second(self) -> float:
        return self.tenants * self.grants_per_tenant_month / SECONDS_PER_MONTH


def stage_inputs(config: StageConfig) -> dict[str, Any]:
    """The `CapacityInputs` fields a stage's configuration decides."""
    from aijobs_cli.sizing.cost import cron_runs_per_hour

    return {
        "kinds": config.queue_names or ("default",),
        "max_retries": config.max_retries,
        "retry_base_delay_seconds": config.retry_base_delay_seconds,
        "retry_max_delay_seconds": config.retry_max_delay_seconds,
        "batch_window_seconds": config.batch_window_seconds,
        "api_throttle_rate": config.api_throttle_rate,
        "esm_max_concurrency": config.esm_max_concurrency or config.consumer_reserved_concurrency,
        "index_buckets": config.index_buckets,
        "shard_count": config.shard_count,
        "cron_runs": {cron.text: cron_runs_per_hour(cron.text) for cron in config.crons},
    }


# --- how often each path runs -----------------------------------------------------------------


def path_rates(i: CapacityInputs) -> dict[str, float]:
    """Runs of each measured path per job (the cost model's job fates, as fractions)."""
    recovered = i.retry_rate - i.dlq_rate
    return {
        "producer.submit": 1 - i.idempotency_rate,
        "producer.submit_idempotent": i.idempotency_rate,
        "producer.poll": i.polls_per_job * poll_reads(i.poll_wait_seconds),
        "consumer.success": 1 - i.retry_rate - i.failed_final_rate,
        # Webhooks are not in the capacity model (their consumer has its own mapping and table
        # writes per delivery; `aijobs cost --webhook-rate` prices them).
        "consumer.success_webhook": 0.0,
        "webhook.delivery": 0.0,
        "consumer.retry": recovered + i.dlq_rate * i.max_retries,
        "consumer.success_after_retry": recovered,
        "consumer.dead_letter": i.dlq_rate,
        "consumer.failed_final": i.failed_final_rate,
        "dlq.dead_letter": i.dlq_rate,
    }


def deliveries_per_job(i: CapacityInputs) -> float:
    """Consumer deliveries per job: every attempt."""
    rates = path_rates(i)
    return sum(rates[name] for name in rates if name.startswith("consumer."))


def retry_delay(i: CapacityInputs, attempt: int) -> float:
    """Mean back-off after failed attempt `attempt` (1-based): equal jitter, 3/4 of the step."""
    step = min(i.retry_max_delay_seconds, i.retry_base_delay_seconds * float(2 ** max(0, attempt - 1)))
    return 0.75 * step


def backoff_seconds_per_job(i: CapacityInputs) -> float:
    """Seconds a job's message waits invisible in back-off, averaged over all jobs."""
    recovered = (i.retry_rate - i.dlq_rate) * retry_delay(i, 1)
    dead = i.dlq_rate * sum(retry_delay(i, attempt) for attempt in range(1, i.max_retries + 1))
    return recovered + dead


# --- DynamoDB load per partition, from the profile --------------------------------------------


@dataclass(frozen=True)
class UnitKey:
    table: str
    #: "" for the table itself, else the index name.
    index: str
    partition: str
    #: The item's sort-key template for single-item loads (e.g. `CREDITS`); "" for a partition.
    item: str = ""


def _dynamodb_calls(profile: CallProfile, rates: Mapping[str, float]) -> Iterator[tuple[Call, float]]:
    """Each DynamoDB call (on a known table) of every path the workload runs, with how often that
    path runs per job."""
    for name, per_job in rates.items():
        if per_job:
            for call in profile.path(name).calls:
                if call.service == "dynamodb" and call.table is not None:
                    yield call, per_job


def unit_loads(profile: CallProfile, rates: Mapping[str, float]) -> dict[UnitKey, UnitLoad]:
    """DynamoDB units per job by (table, index, partition) and by single item, summed over paths."""
    loads: dict[UnitKey, UnitLoad] = defaultdict(UnitLoad)
    for call, per_job in _dynamodb_calls(profile, rates):
        assert call.table is not None
        if call.operation == "Query":
            key = UnitKey(call.table, call.index or "", call.partition or "?")
            loads[key].reads += call.read_units * per_job
            continue
        for item in call.items:
            partition = UnitKey(call.table, "", item.partition)
            single = UnitKey(call.table, "", item.partition, item.sort)
            if item.action == "Get":
                loads[partition].reads += item.units * per_job
                loads[single].reads += item.units * per_job
                continue
            loads[partition].writes += item.units * per_job
            loads[single].writes += item.units * per_job
            for entry in item.index_writes:
                loads[UnitKey(call.table, entry.index, entry.partition)].writes += entry.units * per_job
    return dict(loads)


def table_loads(profile: CallProfile, rates: Mapping[str, float]) -> dict[tuple[str, str], UnitLoad]:
    """Units per job by (table role, index or "" for the table), summed over paths."""
    totals: dict[tuple[str, str], UnitLoad] = defaultdict(UnitLoad)
    for call, per_job in _dynamodb_calls(profile, rates):
        assert call.table is not None
        if call.operation == "Query":
            totals[(call.table, call.index or "")].reads += call.read_units * per_job
            continue
        totals[(call.table, "")].reads += call.read_units * per_job
        totals[(call.table, "")].writes += call.write_units * per_job
        for item in call.items:
            for entry in item.index_writes:
                totals[(call.table, entry.index)].writes += entry.units * per_job
    return dict(totals)


#: Steps of the trace no request path makes: the crons' work per grant and per transaction.
DEFERRED_STEPS = ("grant", "expire", "archive")
#: WRU per item a transaction writes (each item under 1 KB): the ledger writes in transactions.
TRANSACTION_WRU = 2.0


def deferred_loads(
    trace: PartitionTrace, steps: Mapping[str, float], table: str = "shard"
) -> tuple[dict[UnitKey, UnitLoad], dict[tuple[str, str], UnitLoad]]:
    """The cron steps' WRU per job, by partition and item (as `unit_loads`) and by table or index
    (as `table_loads`)."""
    per_key: dict[UnitKey, UnitLoad] = defaultdict(UnitLoad)
    per_table: dict[tuple[str, str], UnitLoad] = defaultdict(UnitLoad)
    writes = per_job_writes(trace, {step: steps[step] for step in DEFERRED_STEPS})
    for (where, at), count in writes.items():
        if where == "table":
            partition, _, item = at.partition(" ")
            per_key[UnitKey(table, "", partition)].writes += TRANSACTION_WRU * count
            per_key[UnitKey(table, "", partition, item)].writes += TRANSACTION_WRU * count
            per_table[(table, "")].writes += TRANSACTION_WRU * count
        else:
            per_key[UnitKey(table, where, at)].writes += count
            per_table[(table, where)].writes += count
    return dict(per_key), dict(per_table)


def _merged(*loads: Mapping[Any, UnitLoad]) -> dict[Any, UnitLoad]:
    total: dict[Any, UnitLoad] = defaultdict(UnitLoad)
    for load in loads:
        for key, units in load.items():
            total[key].reads += units.reads
            total[key].writes += units.writes
    return dict(total)


def index_units_per_write(profile: CallProfile, index: str) -> float:
    """WRU per index write of `index` in the profile's request paths (the entry's size in KB)."""
    ratios = [
        entry.units / entry.writes
        for path in profile.paths.values()
        for call in path.calls
        for item in call.items
        for entry in item.index_writes
        if entry.index == index and entry.writes
    ]
    return max(ratios, default=1.0)


# --- limits -------------------------------------------------------------------------------------


@dataclass
class CapacityReport:
    jobs_per_second: float
    inputs: CapacityInputs
    limits: list[Limit]
    notes: list[str] = field(default_factory=list)

    def ordered(self) -> list[Limit]:
        """The limits by the job rate that reaches them, first wall first."""
        return sorted(self.limits, key=lambda limit: (limit.wall, limit.name))

    def first_wall(self, owners: tuple[Owner, ...] | None = None) -> Limit | None:
        found = [limit for limit in self.ordered() if owners is None or limit.owner in owners]
        return found[0] if found else None

    def first_partition_wall(self) -> Limit | None:
        """The first wall of the key design: a DynamoDB partition, index partition or item."""
        found = [
            limit for limit in self.ordered() if limit.owner == "design" and limit.name.startswith("DynamoDB")
        ]
        return found[0] if found else None

    def over(self) -> list[Limit]:
        """Limits the rate reaches or passes (where throttling is predicted)."""
        return [limit for limit in self.ordered() if limit.utilisation(self.jobs_per_second) >= 1]

    def to_dict(self) -> dict[str, Any]:
        rate = self.jobs_per_second

        def row(limit: Limit) -> dict[str, Any]:
            return asdict(limit) | {
                "load": limit.load(rate),
                "utilisation": limit.utilisation(rate),
                "wall_jobs_per_second": None if math.isinf(limit.wall) else limit.wall,
            }

        first, design, partition = (
            self.first_wall(),
            self.first_wall(("design",)),
            self.first_partition_wall(),
        )
        return {
            "jobs_per_second": rate,
            "inputs": self.inputs.model_dump(),
            "first_wall": row(first) if first else None,
            "first_design_wall": row(design) if design else None,
            "first_partition_wall": row(partition) if partition else None,
            "over": [limit.name for limit in self.over()],
            "limits": [row(limit) for limit in self.ordered()],
            "notes": self.notes,
        }


def model(
    inputs: CapacityInputs, profile: CallProfile | None = None, trace: PartitionTrace | None = None
) -> CapacityReport:
    """Every limit that applies to `inputs.jobs_per_second`, with the load per job on it."""
    i = inputs
    profile = profile or default_profile()
    trace = trace or default_trace()
    rates = path_rates(i)
    # Grants come per tenant, not per job: as a share of this rate's jobs (exact at this rate).
    steps = step_rates(rates, grants_per_job=i.grants_per_second / i.jobs_per_second, trace=trace)
    deferred_keys, deferred_tables = deferred_loads(trace, steps)
    deliveries = deliveries_per_job(i)
    traced = per_job_writes(trace, steps)
    entry_units = {where: index_units_per_write(profile, where) for where, _ in traced if where != "table"}
    limits = [
        *api_limits(i),
        *lambda_limits(i, deliveries),
        *sqs_limits(i, deliveries, backoff_seconds_per_job(i)),
        *partition_limits(i, _merged(unit_loads(profile, rates), deferred_keys)),
        *index_bucket_limits(i, traced, entry_units),
        *table_limits(i, _merged(table_loads(profile, rates), deferred_tables)),
        # Retention and expiry: each maintenance run handles at most its limits per shard table, so
        # what is left for it (credit transactions written while no retention was known, the grants
        # falling due) must not arrive faster than the runs take it away; past that the backlog
        # grows without end. Finished job rows and folded transactions carry their own TTL:
        # DynamoDB's TTL deletes are free and keep up at any rate (the run's clean-up is only the
        # backstop).
        *maintenance_limits(i, rates, trace),
        *scheduler_limits(i),
        *provider_limits(i, deliveries),
    ]
    notes: list[str] = []
    missing = [expression for expression in i.cron_runs if f"cron {expression}" not in profile.paths]
    if missing:
        notes.append(f"crons not in the call profile (their DynamoDB reads are not counted): {missing}")
    notes.append(
        "A tenant partition can exceed 1,000 WRU/s once DynamoDB splits it by sort key; a single item "
        "(CREDITS) cannot. The crons' work per job (retention of each credit transaction, grants "
        f"expiring: {i.grants_per_tenant_month:g} a month per tenant) is counted from the partition trace."
    )
    return CapacityReport(i.jobs_per_second, i, limits, notes)


# --- rendering ------------------------------------------------------------------------------------


def _number(value: float) -> str:
    if math.isinf(value):
        return "never"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.1f}"
    return f"{value:.3g}"


def rows(report: CapacityReport) -> list[tuple[str, ...]]:
    """(limit, scope, load, ceiling, use, wall at jobs/s, owner, raise or reshape), first wall first."""
    rate = report.jobs_per_second
    return [
        (
            limit.name,
            limit.scope,
            f"{_number(limit.load(rate))} {limit.unit}",
            _number(limit.ceiling),
            f"{limit.utilisation(rate):.0%}",
            _number(limit.wall),
            limit.owner,
            limit.action,
        )
        for limit in report.ordered()
    ]


def summary(report: CapacityReport) -> list[str]:
    """The lines under the table: the first wall overall and the first of aijobs' own design."""
    lines = []
    first, design = report.first_wall(), report.first_wall(("design",))
    if first is not None:
        lines.append(
            f"First wall: {first.name} ({first.scope}, {first.owner}) at {_number(first.wall)} jobs/s."
        )
    if design is not None:
        lines.append(f"First wall of aijobs' own design: {design.name} at {_number(design.wall)} jobs/s.")
    partition = report.first_partition_wall()
    if partition is not None and partition is not design:
        lines.append(f"First wall of the key design: {partition.name} at {_number(partition.wall)} jobs/s.")
    over = report.over()
    if over:
        lines.append(
            f"At {_number(report.jobs_per_second)} jobs/s, {len(over)} limit(s) reached: throttling expected."
        )
    return lines


def markdown(report: CapacityReport, top: int = 0) -> str:
    """The table as Markdown (for a README or an issue), then the summary lines."""
    header = ("limit", "scope", "load", "ceiling", "use", "wall at jobs/s", "owner", "raise or reshape")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows(report)[: top or None]:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join([*lines, "", *summary(report)])
