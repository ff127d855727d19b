"""Adaptive consumer concurrency end to end on moto: real consumer runs with `#fail:429` write the
throttle counters, the every-minute cron narrows the kind's event-source mapping (moto's Lambda
keeps `ScalingConfig`), holds it, and widens it again after the quiet period."""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.aimd import HOLD, Step
from aijobs.observability import METRIC_CONSUMER_CONCURRENCY
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import CronSettings
from aijobs.store.keys import PK, SK, concurrency_pk
from aijobs.store.throttle_counts import ThrottleCounts, minute_sk
from tests.integration.harness import Stage

EVERY_MINUTE = "* * * * *"
TEXT = "Queues decouple accepting work from doing it."


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {
        **stage_values,
        "QUEUE_MAX_CONCURRENCY": "10",
        "CRONS": EVERY_MINUTE,
        "CONCURRENCY_QUIET_SECONDS": "600",
        "CONCURRENCY_COOLDOWN_SECONDS": "180",
    }


@pytest.fixture
def mapping_id(stage: Stage) -> str:
    """The summary consumer's mapping in moto's Lambda, MaximumConcurrency 10 as the stack deploys it.
    Its source is a queue of its own: moto would otherwise try to invoke the function (Docker)."""
    role = boto3.client("iam").create_role(RoleName="consumer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    awslambda = boto3.client("lambda")
    awslambda.create_function(
        FunctionName="consumer-summary", Runtime="python3.12", Role=role, Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )  # fmt: skip
    sqs = stage.sqs
    url = sqs.create_queue(QueueName="mapped-only")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    created = awslambda.create_event_source_mapping(
        EventSourceArn=arn, FunctionName="consumer-summary", Enabled=False,
        ScalingConfig={"MaximumConcurrency": 10},
    )  # fmt: skip
    return str(created["UUID"])


def _max_concurrency(mapping_id: str) -> int:
    config = boto3.client("lambda").get_event_source_mapping(UUID=mapping_id)["ScalingConfig"]
    return int(config["MaximumConcurrency"])


def _fire(stage: Stage, mapping_id: str) -> dict[str, Any]:
    env = {**stage.resources.cron_env(), "EVENT_SOURCE_MAPPINGS": f"summary={mapping_id}"}
    ctx = runtime.build_cron_context(CronSettings.from_env(env), clock=stage.clock)
    scheduled = stage.clock().strftime("%Y-%m-%dT%H:%M:00Z")
    outcome = dispatch({"cron": EVERY_MINUTE, "scheduledTime": scheduled}, ctx, SCHEDULED_HANDLERS)
    assert outcome["status"] in ("ok", "duplicate"), outcome
    return outcome


def _storm(stage: Stage, jobs: int = 6) -> None:
    for _ in range(jobs):
        stage.submit("alice", "summary", "#fail:429 " + TEXT)
    list(stage.drain("summary"))


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    import aijobs.scheduled.concurrency as concurrency

    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(concurrency, "emit", lambda name, **kw: calls.append((name, kw)))
    return calls


def _counter(stage: Stage) -> tuple[int, int] | None:
    key = {PK: concurrency_pk("summary"), SK: minute_sk(stage.clock())}
    item = stage.directory.meta.get_item(Key=key).get("Item")
    if item is None:
        return None
    assert item["instances"] == {stage.consumer("summary").meter.instance}  # type: ignore[union-attr]
    assert int(str(item["ttl"])) > stage.clock().timestamp()
    return int(str(item["attempts"])), int(str(item["throttled"]))


def test_consumers_record_attempts_and_throttles_per_minute(stage: Stage) -> None:
    # Batches without a throttle are counted in memory and written at most every 30 s ...
    stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    assert _counter(stage) is None
    stage.clock.advance(30)
    stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    assert _counter(stage) == (2, 0)
    stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    assert _counter(stage) == (2, 0)
    # ... and a batch that saw a throttle is written at once, with what was pending.
    _storm(stage, jobs=3)  # each job's retry waits for its Retry-After: one attempt each here
    assert _counter(stage) == (6, 3)


def test_a_single_429_does_not_narrow(stage: Stage, mapping_id: str) -> None:
    stage.submit("alice", "summary", "#fail:429x1 " + TEXT)
    list(stage.drain("summary"))
    _fire(stage, mapping_id)
    assert _max_concurrency(mapping_id) == 10


def test_a_429_storm_narrows_the_mapping_then_quiet_widens_it(
    stage: Stage, mapping_id: str, emitted: list[tuple[str, Any]]
) -> None:
    _storm(stage)
    result = _fire(stage, mapping_id)["result"]["kinds"]["summary"]
    # One consumer instance ran: halving what ran hits the floor of 2.
    assert (result["action"], result["maxConcurrency"]) == ("narrow", 2)
    assert _max_concurrency(mapping_id) == 2
    assert emitted[-1] == (METRIC_CONSUMER_CONCURRENCY, {"kind": "summary", "value": 2})
    state = ThrottleCounts(stage.directory.meta).state("summary")
    assert state.value == 2
    assert state.version == 1
    assert [(h["action"], h["from"], h["value"]) for h in state.history] == [("narrow", 10, 2)]
    # Every attempt was throttled (6 jobs; a retry that came due in the same drain adds its own).
    throttled = re.fullmatch(r"(\d+) of \1 attempts throttled in 5 min", state.reason)
    assert throttled is not None, state.reason
    assert int(throttled.group(1)) >= 6

    # The same firing delivered again, and the next minutes of the storm: nothing steps twice.
    _fire(stage, mapping_id)
    stage.clock.advance(60)
    assert _fire(stage, mapping_id)["result"]["kinds"]["summary"]["action"] == HOLD
    assert len(ThrottleCounts(stage.directory.meta).state("summary").history) == 1

    # Quiet: ten minutes later without a throttle it widens by the step, then once per cool-down.
    stage.clock.advance(600)
    assert _fire(stage, mapping_id)["result"]["kinds"]["summary"]["maxConcurrency"] == 4
    assert _max_concurrency(mapping_id) == 4
    stage.clock.advance(60)
    assert _fire(stage, mapping_id)["result"]["kinds"]["summary"]["action"] == HOLD
    stage.clock.advance(120)
    assert _fire(stage, mapping_id)["result"]["kinds"]["summary"]["maxConcurrency"] == 6
    history = ThrottleCounts(stage.directory.meta).state("summary").history
    assert [(h["action"], h["value"]) for h in history] == [("widen", 6), ("widen", 4), ("narrow", 2)]


def test_two_runs_reading_the_same_state_record_one_step(stage: Stage) -> None:
    records = ThrottleCounts(stage.directory.meta)
    read = records.state("summary")
    step = Step("narrow", 5, "storm")
    assert records.save("summary", read, step, stage.clock(), observed=10)
    assert not records.save("summary", read, step, stage.clock(), observed=10)
    assert len(records.state("summary").history) == 1
    # The same once the state exists: the write is conditional on the version read.
    second = records.state("summary")
    assert second.version == 1
    assert records.save("summary", second, Step("narrow", 2, "storm"), stage.clock(), observed=5)
    assert not records.save("summary", second, Step("narrow", 2, "storm"), stage.clock(), observed=5)
    assert [h["value"] for h in records.state("summary").history] == [2, 5]


def test_reserved_concurrency_one_has_no_mapping_to_adjust(stage: Stage) -> None:
    from aijobs_cdk.stage_config import event_source_mappings_env, parse_stage_config
    from aijobs_cli.local.resources import provision

    values = {"QUEUE_NAMES": "summary", "QUEUE_MAX_CONCURRENCY": "1", "CRONS": EVERY_MINUTE}
    resources = provision(parse_stage_config("one", values))
    env = {**resources.cron_env(), **event_source_mappings_env(resources.config, resources.queue_arns)}
    assert env["EVENT_SOURCE_MAPPINGS"] == ""
    ctx = runtime.build_cron_context(CronSettings.from_env(env), clock=stage.clock)
    outcome = dispatch({"cron": EVERY_MINUTE}, ctx, SCHEDULED_HANDLERS)
    assert outcome["status"] == "ok"
    assert outcome["result"]["kinds"] == {}
    assert json.dumps(outcome)
