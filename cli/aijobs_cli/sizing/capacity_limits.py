"""The limits `aijobs capacity` weighs (`aijobs_cli.sizing.capacity.model`): AWS's published
defaults, the `Limit` each becomes, and one step per service listing the limits a job rate meets
there, each with the load one job per second puts on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aijobs_cli.sizing.partition_trace import PartitionTrace, step_rates

if TYPE_CHECKING:
    from aijobs_cli.sizing.capacity import CapacityInputs, UnitKey

#: API Gateway HTTP API: requests per second per account and region (adjustable).
APIGW_ACCOUNT_RPS = 10_000.0
#: Lambda concurrent executions per account and region (adjustable).
LAMBDA_ACCOUNT_CONCURRENCY = 1_000.0
#: Concurrent batches one SQS event-source mapping processes (standard mode).
ESM_MAX_BATCHES = 1_000.0
#: In-flight messages per standard SQS queue (raised through AWS Support).
SQS_IN_FLIGHT = 120_000.0
#: Per partition (and per item) per second: hard DynamoDB limits.
PARTITION_WCU = 1_000.0
PARTITION_RCU = 3_000.0
#: On-demand throughput per table (and per global secondary index) per second (adjustable).
TABLE_WCU = 40_000.0
TABLE_RCU = 40_000.0
#: What a new on-demand table serves at once before it has seen traffic (its warm throughput).
NEW_TABLE_WCU = 4_000.0
#: A 30-day month.
SECONDS_PER_MONTH = 30 * 86_400
#: EventBridge Scheduler invocations per second (adjustable).
SCHEDULER_INVOCATIONS = 1_000.0

Owner = Literal["design", "quota", "config", "provider"]

Scope = Literal["tenant", "kind", "shared", "other"]


def partition_scope(template: str) -> Scope:
    """Whose partition a key template is: one tenant's, one kind's, or every tenant's."""
    head = template.split("#", 1)[0]
    if head in ("USER", "APIKEY"):
        return "tenant"
    if head in ("KIND", "DEADLETTER"):
        return "kind"
    if head in ("GRANT", "TX"):
        return "shared"
    return "other"


#: Index partitions the stage's INDEX_BUCKETS spreads over buckets.
SHARDED_INDEX_HEADS = ("KIND", "GRANT", "TX")


@dataclass
class UnitLoad:
    """Request units per job on one partition (or item) template."""

    reads: float = 0.0
    writes: float = 0.0


@dataclass(frozen=True)
class Limit:
    """One limit: its load is `fixed + per_job * jobs_per_second` against `ceiling`."""

    name: str
    scope: str
    owner: Owner
    per_job: float
    ceiling: float
    unit: str
    action: str
    fixed: float = 0.0

    def load(self, jobs_per_second: float) -> float:
        return self.fixed + self.per_job * jobs_per_second

    def utilisation(self, jobs_per_second: float) -> float:
        return self.load(jobs_per_second) / self.ceiling

    @property
    def wall(self) -> float:
        """Jobs per second at which the load reaches the ceiling (inf: never)."""
        if self.per_job <= 0:
            return math.inf if self.fixed < self.ceiling else 0.0
        return max(0.0, (self.ceiling - self.fixed) / self.per_job)


def _scaled(loads: UnitLoad, share: float, buckets: int = 1) -> UnitLoad:
    return UnitLoad(loads.reads * share / buckets, loads.writes * share / buckets)


def maintenance_limits(i: CapacityInputs, rates: Mapping[str, float], trace: PartitionTrace) -> list[Limit]:
    from aijobs.scheduled.maintenance import EXPIRE_LIMIT, TRANSACTION_CLEANUP_LIMIT, run_maintenance
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    expressions = [e for e, handler in SCHEDULED_HANDLERS.items() if handler is run_maintenance]
    runs_per_second = sum(i.cron_runs.get(expression, 0.0) for expression in expressions) / 3600
    if not runs_per_second:
        return []
    where = f"per shard table (1 of {i.shard_count})" if i.shard_count > 1 else "per shard table"
    action = (
        "the maintenance run's limits per shard and run (EXPIRE_LIMIT, TRANSACTION_CLEANUP_LIMIT): "
        "more shard tables (SHARD_COUNT); set retention so transactions expire by TTL "
        "(docs/operations/scale.md)"
    )
    # The jobs' transactions follow the job rate; the grants' (written when granted, and when one
    # expires with credit left) follow the tenants: a fixed load, whatever the job rate.
    per_job = step_rates(rates, grants_per_job=0.0, trace=trace)["archive"]
    per_grant = sum(trace.writes(step, "by_due", "TX#{}") for step in ("grant", "expire"))
    limits = [
        Limit(
            "Maintenance, credit transactions removed by retention", where, "design", per_job / i.shard_count,
            TRANSACTION_CLEANUP_LIMIT * runs_per_second, "item/s", action,
            fixed=i.grants_per_second * per_grant / i.shard_count,
        ),
        Limit(
            "Maintenance, credit grants expired", where, "design", 0.0, EXPIRE_LIMIT * runs_per_second,
            "item/s", action, fixed=i.grants_per_second / i.shard_count,
        ),
    ]  # fmt: skip
    # With retention configured, transactions are folded as written and expire by TTL: none is
    # left for the run (only rows written while no retention was configured).
    return [limit for limit in limits if limit.per_job or limit.fixed]


def api_limits(i: CapacityInputs) -> list[Limit]:
    """API Gateway: every submit and every poll is a request."""
    limits: list[Limit] = []
    add = limits.append
    api_per_job = 1 + i.polls_per_job
    add(
        Limit(
            "API Gateway requests/s",
            "account, per region",
            "quota",
            api_per_job,
            i.apigw_account_rps,
            "req/s",
            "raise the HTTP API throttle quota (Service Quotas); use webhooks instead of polling",
        )
    )
    add(
        Limit(
            "API stage throttle (API_THROTTLE_RATE)",
            "stage",
            "config",
            api_per_job,
            i.api_throttle_rate,
            "req/s",
            "raise API_THROTTLE_RATE / API_THROTTLE_BURST in .env.<stage> (below the account quota)",
        )
    )
    return limits


def lambda_limits(i: CapacityInputs, deliveries: float) -> list[Limit]:
    """Lambda: concurrency = rate x duration."""
    limits: list[Limit] = []
    add = limits.append
    kinds, per_kind = len(i.kinds), i.kind_share
    api_per_job = 1 + i.polls_per_job
    producer = api_per_job * i.producer_ms / 1000 + i.polls_per_job * i.poll_wait_seconds
    consumer_per_kind = deliveries * per_kind * i.consumer_seconds
    dlq = i.dlq_rate * i.dlq_ms / 1000
    mapping_cap = float(min(i.esm_max_concurrency or ESM_MAX_BATCHES, ESM_MAX_BATCHES))
    mapping_owner: Owner = "config" if i.esm_max_concurrency else "quota"
    add(
        Limit(
            "Lambda concurrency, api function",
            "function",
            "quota",
            producer,
            i.lambda_account_concurrency,
            "executions",
            "raise the account's concurrent executions (Service Quotas)",
        )
    )
    add(
        Limit(
            "Lambda concurrency, one kind's consumer (mapping)",
            f"per kind (1 of {kinds})",
            mapping_owner,
            consumer_per_kind,
            mapping_cap,
            "executions",
            "raise QUEUE_MAX_CONCURRENCY (2-1000); past 1,000 batches per mapping, split the kind "
            "or shorten the consumer's time per message",
        )
    )
    add(
        Limit(
            "Lambda concurrency, all functions",
            "account, per region",
            "quota",
            producer + consumer_per_kind * kinds + dlq,
            i.lambda_account_concurrency,
            "executions",
            "raise concurrent executions (Service Quotas; ask for the peak x 1.5)",
        )
    )
    return limits


def sqs_limits(i: CapacityInputs, deliveries: float, backoff: float) -> list[Limit]:
    """SQS: messages received and not yet deleted, plus those waiting out a retry's back-off."""
    limits: list[Limit] = []
    add = limits.append
    kinds, per_kind = len(i.kinds), i.kind_share
    in_flight = per_kind * (deliveries * (i.consumer_seconds + i.batch_window_seconds) + backoff)
    add(
        Limit(
            "SQS in-flight messages, one kind's queue",
            f"per kind (1 of {kinds})",
            "quota",
            in_flight,
            SQS_IN_FLIGHT,
            "messages",
            "ask AWS Support to raise in-flight messages; shorter back-off or batch window; split the kind",
        )
    )
    return limits


def partition_limits(i: CapacityInputs, partition_loads: Mapping[UnitKey, UnitLoad]) -> list[Limit]:
    """DynamoDB partitions and items: the request paths' (profile) and the crons' work per job (trace)."""
    limits: list[Limit] = []
    add = limits.append
    kinds, per_kind, tenant = len(i.kinds), i.kind_share, i.tenant_share
    tenant_scope = (
        f"the busiest tenant ({i.hot_tenant_share:.0%} of jobs)"
        if i.hot_tenant_share is not None
        else f"per tenant (1 of {i.tenants:,})"
    )
    for key, load in sorted(partition_loads.items(), key=lambda kv: repr(kv[0])):
        scope = partition_scope(key.partition)
        head = key.partition.split("#", 1)[0]
        if scope == "other":
            continue  # the meta table's per-run items (CRONRUN#, CONFIG): a handful per minute
        if key.index and head in SHARDED_INDEX_HEADS:
            continue  # below, per status, from the trace
        buckets = i.index_buckets if key.index and head in SHARDED_INDEX_HEADS else 1
        share = {"tenant": tenant, "kind": per_kind, "shared": 1.0}[scope]
        scaled = _scaled(load, share, buckets)
        where = key.partition + (f" {key.item}" if key.item else "")
        what = (
            f"{key.index} partition {where}"
            if key.index
            else (f"item {where}" if key.item else f"partition {where}")
        )
        if key.index:
            what += f" ({buckets} bucket{'s' if buckets > 1 else ''})" if head in SHARDED_INDEX_HEADS else ""
        if key.item and key.item not in ("CREDITS",):
            continue  # single job rows and ledger entries: each written a few times in its life
        scope_text = {"tenant": tenant_scope, "kind": f"per kind (1 of {kinds})", "shared": "all tenants"}[
            scope
        ]
        if scope == "tenant":
            action = (
                "a single item takes 1,000 WRU/s whatever the partition: spread the balance over "
                "several counters, or cap one tenant's submits with a 429"
                if key.item
                else "DynamoDB splits a hot partition by sort key (split for heat); cap one tenant's rate"
            )
        elif head == "DEADLETTER":
            action = "dead letters of one kind: only an outage writes here; split the kind"
        elif scope == "kind":
            action = "raise INDEX_BUCKETS (write-sharded index keys)" if key.index else "split the kind"
        else:
            action = "raise INDEX_BUCKETS (write-sharded index keys)"
        if scaled.writes:
            add(
                Limit(
                    f"DynamoDB writes, {what}",
                    scope_text,
                    "design",
                    scaled.writes,
                    PARTITION_WCU,
                    "WRU/s",
                    action,
                )
            )
        if scaled.reads:
            add(
                Limit(
                    f"DynamoDB reads, {what}",
                    scope_text,
                    "design",
                    scaled.reads,
                    PARTITION_RCU,
                    "RRU/s",
                    action,
                )
            )
    return limits


def index_bucket_limits(
    i: CapacityInputs, traced: Mapping[tuple[str, str], float], entry_units: Mapping[str, float]
) -> list[Limit]:
    """The index partitions every tenant shares, each status its own, from the trace; each write is
    the entry's size in KB as the profile measured it."""
    limits: list[Limit] = []
    add = limits.append
    kinds, per_kind = len(i.kinds), i.kind_share
    for (where, at), writes in sorted(traced.items()):
        head = at.split("#", 1)[0]
        if where == "table" or head not in SHARDED_INDEX_HEADS:
            continue
        share = per_kind if head == "KIND" else 1.0
        units = writes * (entry_units[where] if head == "KIND" else 1.0)
        buckets = i.index_buckets
        add(
            Limit(
                f"DynamoDB writes, {where} partition {at} ({buckets} bucket{'s' if buckets > 1 else ''})",
                f"per kind (1 of {kinds})" if head == "KIND" else "all tenants",
                "design",
                units * share / buckets,
                PARTITION_WCU,
                "WRU/s",
                "raise INDEX_BUCKETS (write-sharded index keys; docs/operations/scale.md)",
            )
        )
    return limits


def table_limits(i: CapacityInputs, loads: Mapping[tuple[str, str], UnitLoad]) -> list[Limit]:
    """DynamoDB tables: jobs spread over SHARD_COUNT shard tables; every index has its own throughput."""
    limits: list[Limit] = []
    add = limits.append
    for (table, index), load in sorted(loads.items()):
        spread = i.shard_count if table == "shard" else 1
        name = f"{table} table" + (f" index {index}" if index else "")
        where = f"per table (1 of {spread})" if spread > 1 else "per table"
        more = "raise the table's on-demand maximum (Service Quotas)" + (
            ", or SHARD_COUNT" if table == "shard" else ""
        )
        if load.writes:
            add(
                Limit(
                    f"DynamoDB writes, {name}",
                    where,
                    "quota",
                    load.writes / spread,
                    TABLE_WCU,
                    "WRU/s",
                    more,
                )
            )
            if table == "shard" and not index:
                add(
                    Limit(
                        f"DynamoDB writes, {name}, a new table's warm throughput",
                        where,
                        "quota",
                        load.writes / spread,
                        NEW_TABLE_WCU,
                        "WRU/s",
                        "pre-warm the tables (warm throughput) before a launch, or ramp up over 30 minutes",
                    )
                )
        if load.reads:
            add(
                Limit(
                    f"DynamoDB reads, {name}",
                    where,
                    "quota",
                    load.reads / spread,
                    TABLE_RCU,
                    "RRU/s",
                    more,
                )
            )
    return limits


def scheduler_limits(i: CapacityInputs) -> list[Limit]:
    """Crons: EventBridge Scheduler invocations (fixed, not per job)."""
    limits: list[Limit] = []
    add = limits.append
    fires = sum(i.cron_runs.values()) / 3600
    add(
        Limit(
            "EventBridge Scheduler invocations/s",
            "account, per region",
            "quota",
            0.0,
            SCHEDULER_INVOCATIONS,
            "inv/s",
            "raise the Scheduler invocation quota",
            fixed=fires,
        )
    )
    return limits


def provider_limits(i: CapacityInputs, deliveries: float) -> list[Limit]:
    """Providers: one request per attempt; tokens per attempt."""
    limits: list[Limit] = []
    add = limits.append
    kinds, per_kind = len(i.kinds), i.kind_share
    attempts_per_minute = deliveries * 60
    for kind, rpm in sorted(i.provider_rpm.items()):
        add(
            Limit(
                f"provider requests/min, {kind}",
                f"per kind (1 of {kinds})",
                "provider",
                attempts_per_minute * per_kind,
                rpm,
                "req/min",
                "ask the provider for a higher quota; QUEUE_MAX_CONCURRENCY bounds the kind's calls",
            )
        )
    for kind, tpm in sorted(i.provider_tpm.items()):
        add(
            Limit(
                f"provider tokens/min, {kind}",
                f"per kind (1 of {kinds})",
                "provider",
                attempts_per_minute * per_kind * i.tokens_per_attempt,
                tpm,
                "tokens/min",
                "ask the provider for a higher quota; fewer tokens per job",
            )
        )
    return limits
