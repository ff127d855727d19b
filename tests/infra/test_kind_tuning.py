"""A kind's declared tuning (aijobs.kinds.base.Tuning) in the synthesized stack: its queue, its
consumer function, its event-source mapping and what the cron dispatcher knows of it, while a
kind without tuning keeps the stage's values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aijobs.bindings import KindLimits, parse_limits
from aijobs.settings import DlqSettings
from aijobs_cdk.stage_config import EVENT_SOURCE_MAPPINGS, LEASE_MARGIN_SECONDS, RECEIVE_HEADROOM
from tests.infra.conftest import _synth
from tests.infra.template import Synth, role_statements, symbolic_environment, target_id
from tests.probe_kinds import Tuning, declared, text_kind

pytestmark = pytest.mark.infra

TUNED, SINGLE, PLAIN = "tuning-probe", "tuning-single", "summary"
OWN = Tuning(timeout_seconds=120, memory_mb=1024, max_retries=6, batch_size=2, max_concurrency=8)
CONSUMER = "queue_consumer.handler.handler"
CRON = "cron_dispatcher.handler.handler"
DLQ = "dlq_consumer.handler.handler"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    with declared(text_kind(TUNED, tuning=OWN), text_kind(SINGLE, tuning=Tuning(max_concurrency=1))):
        return _synth(
            tmp_path_factory,
            {"QUEUE_NAMES": f"{PLAIN};{TUNED};{SINGLE}", "KIND_PRICES": "", "CRONS": "*/5 * * * *"},
        )


def _consumer(synth: Synth, kind: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical_id, props)
        for logical_id, props in synth.functions_by_handler(CONSUMER).items()
        if props["Environment"]["Variables"]["QUEUE_NAME"] == kind
    ]
    return found


def _mapping(synth: Synth, kind: str) -> tuple[str, dict[str, Any]]:
    function_id, _ = _consumer(synth, kind)
    (found,) = [
        (logical_id, resource["Properties"])
        for logical_id, resource in synth.resources("AWS::Lambda::EventSourceMapping").items()
        if target_id(resource["Properties"]["FunctionName"]) == function_id
    ]
    return found


def _queue(synth: Synth, kind: str) -> dict[str, Any]:
    return synth.props(target_id(_mapping(synth, kind)[1]["EventSourceArn"]))


def test_the_tuned_kinds_queue_consumer_and_mapping_follow_its_declaration(tuned: Synth) -> None:
    queue, (_, function), (_, mapping) = _queue(tuned, TUNED), _consumer(tuned, TUNED), _mapping(tuned, TUNED)
    window = tuned.config.batch_window_seconds
    assert queue["VisibilityTimeout"] == 6 * 120 + window
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 6 + 1 + RECEIVE_HEADROOM
    assert (function["Timeout"], function["MemorySize"]) == (120, 1024)
    env = function["Environment"]["Variables"]
    assert (env["MAX_RETRIES"], env["JOB_LEASE_SECONDS"]) == ("6", str(120 + LEASE_MARGIN_SECONDS))
    assert mapping["BatchSize"] == 2
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 8}


def test_a_kind_without_tuning_keeps_the_stages_values(tuned: Synth) -> None:
    config = tuned.config
    queue, (_, function), (_, mapping) = _queue(tuned, PLAIN), _consumer(tuned, PLAIN), _mapping(tuned, PLAIN)
    assert queue["VisibilityTimeout"] == config.visibility_timeout_seconds
    assert queue["RedrivePolicy"]["maxReceiveCount"] == config.max_receive_count
    assert (function["Timeout"], function["MemorySize"]) == (
        config.consumer_timeout_seconds,
        config.consumer_memory_mb,
    )
    assert function["Environment"]["Variables"]["MAX_RETRIES"] == str(config.max_retries)
    assert mapping["BatchSize"] == config.batch_size
    assert "ScalingConfig" not in mapping
    assert "ReservedConcurrentExecutions" not in function


def test_a_kind_capped_at_one_runs_one_consumer_the_cron_never_resizes(tuned: Synth) -> None:
    (_function_id, function), (single_mapping, mapping) = _consumer(tuned, SINGLE), _mapping(tuned, SINGLE)
    assert function["ReservedConcurrentExecutions"] == 1
    assert "ScalingConfig" not in mapping
    (dispatcher_id, dispatcher) = next(iter(tuned.functions_by_handler(CRON).items()))
    listed = json.dumps(dispatcher["Environment"]["Variables"][EVENT_SOURCE_MAPPINGS])
    assert single_mapping not in listed
    assert _mapping(tuned, TUNED)[0] in listed
    assert _mapping(tuned, PLAIN)[0] in listed
    resized = [
        json.dumps(statement["Resource"])
        for statement in role_statements(tuned, dispatcher_id)
        if "lambda:UpdateEventSourceMapping" in statement["Action"]
    ]
    assert resized
    assert all(single_mapping not in resources for resources in resized)
    assert any(_mapping(tuned, TUNED)[0] in resources for resources in resized)


def test_the_cron_dispatcher_knows_each_kinds_attempts_lease_and_ceiling(tuned: Synth) -> None:
    (dispatcher,) = tuned.functions_by_handler(CRON).values()
    limits = parse_limits(dispatcher["Environment"]["Variables"]["KIND_LIMITS"])
    config = tuned.config
    assert limits == {
        PLAIN: KindLimits(attempts=config.max_retries + 1, lease=config.lease_seconds, ceiling=1000),
        TUNED: KindLimits(attempts=7, lease=120 + LEASE_MARGIN_SECONDS, ceiling=8),
        SINGLE: KindLimits(attempts=config.max_retries + 1, lease=config.lease_seconds, ceiling=1),
    }


def test_the_dlq_consumer_knows_each_kinds_attempt_budget_and_may_send_to_each_kinds_queue(
    tuned: Synth,
) -> None:
    """A redriven message of a job with attempts left goes back to its kind's queue; only a spent
    budget (the kind's own) finalizes the job."""
    ((dlq_id, dlq),) = tuned.functions_by_handler(DLQ).items()
    settings = DlqSettings.from_env(symbolic_environment(dlq))
    config = tuned.config
    assert {kind: limits.attempts for kind, limits in settings.kind_limits.items()} == {
        PLAIN: config.max_retries + 1,
        TUNED: 7,
        SINGLE: config.max_retries + 1,
    }
    assert set(settings.queue_urls) == {PLAIN, TUNED, SINGLE}
    sendable = {
        target_id(resource)
        for statement in role_statements(tuned, dlq_id)
        if "sqs:SendMessage" in statement["Action"]
        for resource in (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
    }
    for kind in (PLAIN, TUNED, SINGLE):
        main_queue = target_id(_mapping(tuned, kind)[1]["EventSourceArn"])
        assert main_queue in sendable, kind
        assert settings.queue_urls[kind] == f"ref:{main_queue}"
