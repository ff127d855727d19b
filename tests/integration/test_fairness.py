"""Per-tenant fairness (issue 13 point 3): a running cap per tenant and kind, and a flood by one
tenant that does not stop another tenant's job from starting.

The jobs of tenant A stay `running` (`#running:N` keeps the local provider's task going, and the
re-check interval is longer than the test), so A reaches its cap and stays there.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.observability import METRIC_TENANT_HELD
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.tenants import PROFILE_CACHE_SECONDS
from tests.integration.harness import Stage, sqs_on

# Speech is asynchronous on the local provider: `#running:N` keeps its task going.
KIND = "tts-generate"
RUNS_FOREVER = "#running:1000 A long task."


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {
        **stage_values,
        "QUEUE_NAMES": KIND,
        "PROVIDER_RECHECK_SECONDS": "900",  # re-checks stay out of the test's way
        "TENANT_MAX_RUNNING": "2",
        "TENANT_HOLD_SECONDS": "1",
        "STUCK_QUEUED_SECONDS": "5",  # the sweeper would take a row for lost within the test
    }


def _statuses(stage: Stage, jobs: list[Any]) -> dict[JobStatus, int]:
    counts: dict[JobStatus, int] = {}
    for job in jobs:
        status = stage.job(job).status
        counts[status] = counts.get(status, 0) + 1
    return counts


def test_a_flooding_tenant_does_not_hold_up_another_tenants_job(stage: Stage) -> None:
    flood = [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(60)]
    single = stage.submit("tenant-b", KIND, "Just one summary, please.")
    mapping = stage.mapping(KIND, batch_size=10)

    batches = 0
    while stage.job(single).status is JobStatus.QUEUED:
        assert mapping.poll_once().received > 0, "the queue ran dry before tenant B's job started"
        batches += 1
        assert batches <= 10
    # B arrived behind 60 of A's messages (6 batches of 10). SQS fair queues deliver a quiet
    # tenant's message first once A takes the consumers (the group id on every job message);
    # A's cap keeps A from starting more than 2.
    assert batches <= 2, f"tenant B's job waited {batches} batches behind tenant A's flood"
    assert stage.job(single).status is JobStatus.SUCCEEDED
    counts = _statuses(stage, flood)
    assert counts[JobStatus.RUNNING] == 2
    assert counts[JobStatus.QUEUED] == 58
    # Held jobs spent no attempt: nothing but the two running ones was ever claimed.
    assert sum(stage.job(job).attempts for job in flood) == 2
    assert set(stage.provider.calls) == {flood[0].job_id, flood[1].job_id, single.job_id}


def test_a_tenant_at_its_cap_waits_without_spending_an_attempt_and_runs_once_below_it(
    stage: Stage,
) -> None:
    with sqs_on(stage.clock):  # the held copy's delay ends when the test's clock says
        jobs = [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(3)]
        mapping = stage.mapping(KIND, batch_size=10)

        outcome = mapping.poll_once()
        assert outcome.received == 3
        assert outcome.failed_ids == []  # held jobs are acknowledged
        assert _statuses(stage, jobs) == {JobStatus.RUNNING: 2, JobStatus.QUEUED: 1}
        held = next(job for job in jobs if stage.job(job).status is JobStatus.QUEUED)
        assert stage.job(held).attempts == 0
        # Not dropped: a fresh copy waits in the queue, delayed (TENANT_HOLD_SECONDS and a spread),
        # beside the two running jobs' re-checks.
        attributes = stage.sqs.get_queue_attributes(
            QueueUrl=stage.resources.queue_urls[KIND], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        assert attributes["ApproximateNumberOfMessagesDelayed"] == "3"

        # One of the running jobs ends: the held one starts when its copy comes back.
        running = next(job for job in jobs if stage.job(job).status is JobStatus.RUNNING)
        store = stage.store_for("tenant-a")
        store.fail_final(stage.job(running), now=stage.clock(), error_class="cancelled", message="test")
        stage.clock.advance(1.2)  # the copy's delay: TENANT_HOLD_SECONDS=1 (a spread of up to half of it: 0)
        assert mapping.poll_once().received == 1
    assert stage.job(held).status is JobStatus.RUNNING
    assert stage.job(held).attempts == 1


def test_a_held_job_is_not_resent_by_the_sweeper_and_runs_once_its_tenant_has_room(stage: Stage) -> None:
    with sqs_on(stage.clock):  # each round's 4 s take the held copy's delay (1 s) past its end
        jobs = [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(3)]
        mapping = stage.mapping(KIND, batch_size=10)
        mapping.poll_once()
        held = next(job for job in jobs if stage.job(job).status is JobStatus.QUEUED)
        url = stage.resources.queue_urls[KIND]
        assert stage.depth(url) == 3  # the two running jobs' re-checks and the held job's copy
        stage.send(held)  # a second copy of the held job's message (at-least-once delivery)
        sweeper = runtime.build_cron_context(
            CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock
        )
        sweep = CronRun("*/5 * * * *", "2026-11-29T09:10:00Z")

        # Four rounds over three times STUCK_QUEUED_SECONDS, the tenant still at its cap: the held
        # copy comes back, is held again, and the sweeper finds nothing lost. The extra copy is dropped.
        for _ in range(4):
            stage.clock.advance(4)
            assert mapping.poll_once().failed_ids == []
            assert run_sweeper(sweep, sweeper)["actions"] == {}
            assert stage.depth(url) == 3
        row = stage.job(held)
        assert (row.status, row.attempts) == (JobStatus.QUEUED, 0)

        running = next(job for job in jobs if stage.job(job).status is JobStatus.RUNNING)
        store = stage.store_for("tenant-a")
        store.fail_final(stage.job(running), now=stage.clock(), error_class="cancelled", message="test")
        stage.clock.advance(4)
        assert mapping.poll_once().received == 1
    row = stage.job(held)
    assert (row.status, row.attempts) == (JobStatus.RUNNING, 1)
    assert stage.provider.calls[held.job_id] == 1


def test_a_lapsed_lease_does_not_count_against_the_cap(stage: Stage) -> None:
    first = [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(2)]
    mapping = stage.mapping(KIND, batch_size=10)
    mapping.poll_once()
    assert _statuses(stage, first) == {JobStatus.RUNNING: 2}
    store = stage.store_for("tenant-a")
    assert store.count_running("tenant-a", KIND, now=stage.clock()) == 2
    # Their consumers died: once the leases (re-check wait plus the lease) lapse, they stop counting.
    stage.clock.advance(900 + 200)
    assert store.count_running("tenant-a", KIND, now=stage.clock()) == 0
    late = stage.submit("tenant-a", KIND, RUNS_FOREVER)
    mapping.poll_once()
    assert stage.job(late).status is JobStatus.RUNNING


def test_a_tenants_own_cap_overrides_the_stage_default(stage: Stage) -> None:
    directory = stage.consumer(KIND).directory
    stage.directory.ensure_user("tenant-a")
    stage.directory.set_max_running("tenant-a", 1)
    jobs = [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(3)]
    stage.mapping(KIND, batch_size=10).poll_once()
    assert _statuses(stage, jobs) == {JobStatus.RUNNING: 1, JobStatus.QUEUED: 2}

    # 0 for one tenant: no cap at all, whatever the stage's default (after the profile cache).
    stage.directory.set_max_running("tenant-a", 0)
    profile = directory.profile("tenant-a")
    assert profile is not None
    assert profile.max_running == 1  # still cached in this container
    directory._monotonic = lambda: time.monotonic() + PROFILE_CACHE_SECONDS + 1
    profile = directory.profile("tenant-a")
    assert profile is not None
    assert profile.running_cap(2) == 0

    stage.directory.set_max_running("tenant-a", None)
    fresh = stage.directory.profile("tenant-a")
    assert fresh is not None
    assert fresh.max_running is None
    assert fresh.running_cap(2) == 2
    with pytest.raises(KeyError):
        stage.directory.set_max_running("nobody", 3)


def test_no_cap_costs_no_count_query(stage_values: dict[str, str]) -> None:
    """With no cap anywhere, a delivery makes no count query (the floor of 3 calls per job holds)."""
    from moto import mock_aws

    from aijobs import runtime
    from aijobs_cdk.stage_config import parse_stage_config
    from aijobs_cli.local.resources import provision
    from tests.aws_calls import recording_calls
    from tests.integration.harness import Clock

    values = {**stage_values, "TENANT_MAX_RUNNING": "0"}
    with mock_aws():
        runtime.reset_runtime()
        stage = Stage(resources=provision(parse_stage_config("dev", values)), clock=Clock())
        jobs = [stage.submit("tenant-a", KIND, "A short summary.") for _ in range(3)]
        mapping = stage.mapping(KIND, batch_size=10)
        stage.consumer(KIND).directory.profile("tenant-a")  # the container's cached profile
        with recording_calls() as log:
            mapping.poll_once()
        assert _statuses(stage, jobs) == {JobStatus.SUCCEEDED: 3}
        queries = [call for call in log.calls if call == ("dynamodb", "Query")]
        assert queries == []
    runtime.reset_runtime()


def test_the_held_metric_is_emitted(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    from aijobs.observability import emit

    [stage.submit("tenant-a", KIND, RUNS_FOREVER) for _ in range(3)]
    emitted: list[str] = []

    def spy(name: str, **kwargs: Any) -> None:
        emitted.append(name)
        emit(name, **kwargs)

    monkeypatch.setattr("aijobs.consumer.attempts.emit", spy)
    stage.mapping(KIND, batch_size=10).poll_once()
    assert emitted.count(METRIC_TENANT_HELD) == 1
