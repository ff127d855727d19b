"""A kind's declared tuning at run time: the local stack's queues and pollers, the consumer's
attempt budget and the sweeper's, all from the same declaration (aijobs.kinds.base.Tuning)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import boto3
import pytest
from moto import mock_aws

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs_cdk.stage_config import LEASE_MARGIN_SECONDS, RECEIVE_HEADROOM, parse_stage_config
from aijobs_cli.local.resources import provision
from aijobs_cli.local.stack import LocalStack
from tests.integration.harness import Clock, Stage
from tests.probe_kinds import Tuning, declared, text_kind

pytestmark = pytest.mark.integration

TUNED, SINGLE, PLAIN = "tuning-probe", "tuning-single", "summary"
OWN = Tuning(timeout_seconds=40, max_retries=5, batch_size=2, max_concurrency=3)
SWEEP = CronRun("*/5 * * * *", "2026-12-01T09:10:00Z")
TEXT = "Two sentences to summarise. Here is the second."


@pytest.fixture
def stage() -> Iterator[Stage]:
    values = {
        "QUEUE_NAMES": f"{PLAIN};{TUNED};{SINGLE}",
        "CRONS": "*/5 * * * *",
        "PROVIDER": "local",
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
    }
    with (
        declared(text_kind(TUNED, tuning=OWN), text_kind(SINGLE, tuning=Tuning(max_concurrency=1))),
        mock_aws(),
    ):
        runtime.reset_runtime()
        yield Stage(resources=provision(parse_stage_config("dev", values)), clock=Clock())
    runtime.reset_runtime()


def _ctx(stage: Stage) -> CronContext:
    return runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)


def _attributes(stage: Stage, kind: str) -> dict[str, str]:
    url = stage.resources.queue_urls[kind]
    answer = boto3.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return {str(key): value for key, value in answer["Attributes"].items()}


def test_the_local_stack_creates_each_queue_with_its_kinds_visibility_and_receive_count(stage: Stage) -> None:
    config = stage.resources.config
    tuned, plain = _attributes(stage, TUNED), _attributes(stage, PLAIN)
    assert int(tuned["VisibilityTimeout"]) == 6 * 40 + config.batch_window_seconds
    assert json.loads(tuned["RedrivePolicy"])["maxReceiveCount"] == 6 + RECEIVE_HEADROOM
    assert int(plain["VisibilityTimeout"]) == config.visibility_timeout_seconds
    assert json.loads(plain["RedrivePolicy"])["maxReceiveCount"] == config.max_receive_count


def test_the_local_stack_runs_as_many_pollers_as_each_kind_may_have(stage: Stage) -> None:
    local = LocalStack(config=stage.resources.config)
    assert local._consumer_threads(TUNED) == 3
    assert local._consumer_threads(SINGLE) == 1
    assert local._consumer_threads(PLAIN) == 2  # no cap: the local stack's default


def test_the_tuned_consumer_retries_as_often_as_its_kind_says(stage: Stage) -> None:
    """`#fail:503` fails every attempt: the tuned kind spends 6 attempts, the plain one 4."""
    tuned = stage.submit("alice", TUNED, "#fail:503 " + TEXT)
    plain = stage.submit("alice", PLAIN, "#fail:503 " + TEXT)
    for kind in (TUNED, PLAIN):
        list(stage.drain(kind))
        stage.dlq_mapping(kind).poll_once()  # the dead-letter consumer finalizes the job
    assert (stage.job(tuned).status, stage.job(tuned).attempts) == (JobStatus.FAILED_FINAL, 6)
    assert (stage.job(plain).status, stage.job(plain).attempts) == (JobStatus.FAILED_FINAL, 4)
    assert stage.consumer(TUNED).lease.total_seconds() == 40 + LEASE_MARGIN_SECONDS


def test_the_sweeper_spends_each_kinds_own_attempt_budget(stage: Stage) -> None:
    """A queued job whose message was lost, with 4 attempts spent: the stage's budget (4) is gone,
    the tuned kind's (6) is not. The sweeper finalizes the first and re-sends the second."""
    jobs = {kind: stage.submit("alice", kind, TEXT) for kind in (TUNED, PLAIN)}
    for kind, job in jobs.items():
        stage.receive(stage.resources.queue_urls[kind])  # the message is lost
        stage.set_attempts(job, 4)
    ctx = _ctx(stage)
    assert ctx.max_attempts_of(TUNED) == 6
    stage.clock.advance(ctx.stuck_after.total_seconds() + 1)
    assert run_sweeper(SWEEP, ctx)["actions"] == {f"{TUNED}:resent": 1, f"{PLAIN}:finalized": 1}
    # Without the kind's limits the same run would have finalized both: the budget is the kind's.
    assert replace(ctx, limits={}).max_attempts_of(TUNED) == 4


def test_the_dead_letter_consumer_spends_each_kinds_own_attempt_budget(stage: Stage) -> None:
    """A message SQS redrove (its receives never reached the consumer) of a job with 4 attempts
    spent: the stage's budget (4) is gone, the tuned kind's (6) is not. The DLQ consumer finalizes
    the first and sends the second back to its queue."""
    jobs = {kind: stage.submit("alice", kind, TEXT) for kind in (TUNED, PLAIN)}
    for kind, job in jobs.items():
        stage.set_attempts(job, 4)
        stage.redrive(kind)
        assert stage.dlq_mapping(kind).poll_once().failed_ids == []
    tuned, plain = stage.job(jobs[TUNED]), stage.job(jobs[PLAIN])
    assert (plain.status, plain.dead_lettered) == (JobStatus.FAILED_FINAL, True)
    assert (tuned.status, tuned.dead_lettered, tuned.attempts) == (JobStatus.QUEUED, False, 4)
    list(stage.drain(TUNED))
    assert (stage.job(jobs[TUNED]).status, stage.job(jobs[TUNED]).attempts) == (JobStatus.SUCCEEDED, 5)
