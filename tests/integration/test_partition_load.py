"""A synthetic load through the real store code on moto (`tests/partition_sim.py`), with every
write's partitions recorded: no partition key that several tenants write to takes more than its
bucket's share (issue 15), and the trace `aijobs capacity` reads is what the store writes now.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest

from aijobs_cli.sizing.call_profile import default_profile
from aijobs_cli.sizing.partition_trace import REGENERATE, PartitionTrace, default_trace, trace_path
from tests.partition_sim import BUCKETED, BUCKETS, JOBS, PartitionRecorder, measure

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def simulation() -> tuple[PartitionRecorder, PartitionTrace]:
    return measure(JOBS)


def test_no_partition_shared_by_tenants_takes_more_than_its_bucket_share(
    simulation: tuple[PartitionRecorder, PartitionTrace],
) -> None:
    recorder, _ = simulation

    groups: defaultdict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    squares: Counter[tuple[str, str]] = Counter()  # per group: the sum of each item's writes squared
    for (where, partition), count in recorder.writes.items():
        tenants = recorder.tenants[(where, partition)]
        if partition.startswith(
            "USER#"
        ):  # a tenant's own partition: bounded per tenant (docs/operations/scale.md)
            assert tenants == {partition.split("#")[1]}, f"{where} {partition} written by {tenants}"
            continue
        bucketed = BUCKETED.match(partition)
        assert where in ("by_kind_status", "by_due"), f"{where} {partition} is shared by tenants"
        assert bucketed, f"{where} {partition} is shared by tenants and not write-sharded"
        assert int(bucketed["bucket"]) < BUCKETS
        groups[(where, bucketed["base"])][int(bucketed["bucket"])] += count
        squares[(where, bucketed["base"])] += sum(w * w for w in recorder.items[(where, partition)].values())
    assert {base for _, base in groups} >= {"GRANT", "KIND#summary#STATUS#succeeded"}
    # Transactions are folded into their tenant's totals as written and expire by TTL: none enters
    # the TX index any more, so nothing waits there for the */10 run's 100 per shard.
    assert not [base for _, base in groups if base == "TX"]
    # The unit that is hashed is an item (a job, a grant, a transaction): item i, written w_i
    # times in a group of n writes, lands all of them in one bucket with p = 1/BUCKETS (crc32 of
    # random ids). A bucket's count has mean n*p and variance p*(1-p)*sum(w_i^2); six standard
    # deviations above the mean is crossed by chance about once in 10^9 per bucket. A job writes a
    # kind/status key once or twice (w_i <= 2), so those bounds are tight: the busiest of 8 buckets
    # within about 6 * sqrt(n / 4) of n / 8. A grant is rewritten on every debit of its tenant, so
    # the GRANT buckets follow the (skewed) tenants and get the wider bound their weights imply.
    checked = 0
    p = 1 / BUCKETS
    for (where, base), buckets in groups.items():
        n = sum(buckets.values())
        if n < 100:
            continue
        checked += 1
        ceiling = n * p + 6 * math.sqrt(p * (1 - p) * squares[(where, base)])
        assert max(buckets.values()) <= ceiling, f"{where} {base}: {dict(buckets)} over {ceiling:.0f} of {n}"
    assert checked >= 9  # GRANT, and each kind's queued, running and (mostly) succeeded keys


def test_the_committed_trace_is_what_the_store_writes_now(
    simulation: tuple[PartitionRecorder, PartitionTrace],
) -> None:
    _, measured = simulation
    committed = PartitionTrace.from_json(trace_path())
    stale = sorted(step for step in measured.steps if measured.steps[step] != committed.steps.get(step))
    hint = f"run `{REGENERATE}` and commit cli/aijobs_cli/sizing/partition_trace.json"
    assert not stale, f"the partition trace is stale (steps that changed: {stale}): {hint}"
    assert measured == committed, f"the partition trace's header is stale: {hint}"
    assert default_trace() == committed  # the package reads the same file
    # Every step ran but the archive: with retention known every transaction is folded as written.
    assert [name for name, step in measured.steps.items() if not step.runs] == ["archive"]
    assert measured.writes("submit", "table", "USER#{} TX#{}") == 1.0


#: The call profile's request paths, as the steps of the trace they run.
PATH_STEPS = {
    "producer.submit": ("submit",),
    "consumer.success": ("claim", "succeed"),
    "consumer.retry": ("claim", "fail_retryable"),
    "consumer.failed_final": ("claim", "fail_final"),
}


@pytest.mark.parametrize("path", sorted(PATH_STEPS))
def test_the_trace_and_the_call_profile_count_the_same_shared_index_writes(
    simulation: tuple[PartitionRecorder, PartitionTrace], path: str
) -> None:
    """One measurement checks the other: the writes a request path makes to the index partitions
    every tenant shares, by key head, are the same in the call profile (the handlers on a moto
    stage) and in the trace (the store driven by the simulation)."""
    _, trace = simulation

    def head(partition: str) -> str:
        return partition.split("#", 1)[0]

    profiled: defaultdict[str, float] = defaultdict(float)
    for call in default_profile().path(path).calls:
        for item in call.items if call.service == "dynamodb" else ():
            for entry in item.index_writes:
                if head(entry.partition) in ("KIND", "GRANT", "TX"):
                    profiled[head(entry.partition)] += entry.writes
    traced: defaultdict[str, float] = defaultdict(float)
    for step in PATH_STEPS[path]:
        for where in ("by_kind_status", "by_due"):
            for partition, writes in trace.steps[step].writes.get(where, {}).items():
                traced[head(partition)] += writes
    assert profiled
    assert {key: round(value, 6) for key, value in traced.items()} == profiled
