"""The local stack emulates adaptive concurrency: a `#fail:429` storm narrows a kind's pollers to
the floor of 2, and after the quiet period (the controller run on a clock moved past it) they widen
again; the history shows in `aijobs status --json`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from aijobs import runtime
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import CronSettings
from aijobs.store.throttle_counts import ThrottleCounts
from aijobs_cdk.stage_config import event_source_mappings_env
from aijobs_cli.local.stack import LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack, wait_until

pytestmark = pytest.mark.integration

EVERY_MINUTE = "* * * * *"
KIND = "summary"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    values = {
        "QUEUE_NAMES": KIND,
        "KIND_PRICES": f"{KIND}:1",
        "CRONS": "",  # the test runs the controller itself, on its own clock
        "QUEUE_MAX_CONCURRENCY": "4",
    }
    # Idle pollers re-poll every second instead of every 10: the test counts five polls of each of
    # the two active pollers on an empty queue (inactive ones check every 0.5 s, so any poll of
    # theirs still shows within the window).
    with running_local_stack(tmp_path_factory.mktemp("local-aimd"), values, long_poll_seconds=1) as local:
        yield local


def _control(stack: LocalStack, at: datetime) -> dict[str, Any]:
    assert stack.resources is not None
    env = {
        **stack.resources.cron_env(),
        **event_source_mappings_env(stack.config, stack.resources.queue_arns),
    }
    ctx = runtime.build_cron_context(CronSettings.from_env(env), clock=lambda: at)
    ctx.control = stack.control  # type: ignore[assignment]
    outcome = dispatch({"cron": EVERY_MINUTE}, ctx, SCHEDULED_HANDLERS)
    assert outcome["status"] == "ok", outcome
    result: dict[str, Any] = outcome["result"]["kinds"][KIND]
    return result


def _active(stack: LocalStack) -> list[bool]:
    assert stack.resources is not None
    pollers = stack.control.mappings.get(stack.resources.queue_arns[KIND], [])
    return [stack.control.active(m) for m in pollers]


def _count_polls(stack: LocalStack) -> list[int]:
    """Count each poller's receives from now on (the list is updated in place)."""
    assert stack.resources is not None
    pollers = stack.control.mappings[stack.resources.queue_arns[KIND]]
    counts = [0] * len(pollers)
    for slot, poller in enumerate(pollers):
        original = poller.poll_once

        def counting(slot: int = slot, original: Any = original) -> Any:
            counts[slot] += 1
            return original()

        poller.poll_once = counting  # type: ignore[method-assign]
    return counts


def test_a_429_storm_narrows_the_pollers_and_quiet_widens_them(stack: LocalStack, tmp_path: Path) -> None:
    assert stack.info_file is not None
    assert stack.resources is not None
    wait_until(lambda: len(_active(stack)) == 4, "four pollers")
    # The scheduler's own firing reaches the emulated mappings: nothing to change yet.
    assert stack.fire_cron(EVERY_MINUTE)["result"]["kinds"][KIND]["action"] == "hold"
    assert _active(stack) == [True] * 4
    client = Target.from_info_file(stack.info_file)
    for _ in range(8):
        response = client.request("POST", "/jobs", {"kind": KIND, "input": "#fail:429 a throttled job"})
        assert response.status == 202, response.body
    records = ThrottleCounts(runtime.directory(CronSettings.from_env(stack.resources.cron_env())).meta)

    def throttled() -> int:
        counts, _ = records.read(KIND, datetime.now(UTC) - timedelta(minutes=5))
        return sum(count.throttled for count in counts)

    wait_until(lambda: throttled() >= 8, "the consumers to record the storm")

    narrowed = _control(stack, datetime.now(UTC))
    assert (narrowed["action"], narrowed["maxConcurrency"]) == ("narrow", 2)
    assert _active(stack) == [True, True, False, False]
    polls = _count_polls(stack)
    wait_until(lambda: min(polls[:2]) >= 2, "the two remaining pollers to poll")
    polls[2:] = [0, 0]  # a poll under way when the value changed may finish
    wait_until(lambda: min(polls[:2]) >= 5, "the two remaining pollers to poll again")
    assert polls[2:] == [0, 0]  # the pollers above the value idle

    quiet = _control(stack, datetime.now(UTC) + timedelta(minutes=11))
    assert (quiet["action"], quiet["maxConcurrency"]) == ("widen", 4)
    assert _active(stack) == [True] * 4

    shown = CliRunner().invoke(app, ["status", "--info-file", str(stack.info_file), "--json"])
    assert shown.exit_code == 0, shown.output
    # stdout alone: the in-process stack's functions log to stderr meanwhile (harness).
    state = json.loads(shown.stdout)["consumers"][KIND]
    assert state["maxConcurrency"] == 4
    assert [(h["action"], h["from"], h["value"]) for h in state["history"]] == [
        ("widen", 2, 4),
        ("narrow", 4, 2),
    ]
