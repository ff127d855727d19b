"""A cron that keeps failing alerts once per incident, and says when it recovers (moto)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from aijobs import runtime
from aijobs.observability import METRIC_CRON_FAILED, METRIC_CRON_SUCCEEDED
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import ScheduledHandler
from aijobs.settings import CronSettings
from aijobs.store import cron_incidents
from aijobs.store.cron_incidents import INCIDENT_SK, CronIncidents
from aijobs.store.keys import CRON_RUN_PREFIX, PK, SK
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

CRON = "*/10 * * * *"
OTHER = "*/5 * * * *"


class Switch:
    """A scheduled job that fails while `failing` is set."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self, run: CronRun, ctx: CronContext) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("provider key rotated")
        return {"done": True}


def _ctx(stage: Stage) -> CronContext:
    return runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)


def _fire(
    stage: Stage, handlers: dict[str, ScheduledHandler], minute: int, cron: str = CRON
) -> dict[str, Any]:
    event = {"cron": cron, "scheduledTime": f"2026-11-29T09:{minute:02d}:00Z", "executionId": "e"}
    return dispatch(event, _ctx(stage), handlers)


def _alerts(stage: Stage, inbox: str) -> list[dict[str, Any]]:
    messages = [json.loads(m["Body"]) for m in stage.receive(inbox)]
    return [{"subject": m["Subject"], **json.loads(m["Message"])} for m in messages]


def _incident(stage: Stage, cron: str = CRON) -> dict[str, Any] | None:
    table = boto3.resource("dynamodb").Table(stage.resources.meta_table)
    item: dict[str, Any] | None = table.get_item(Key={PK: CRON_RUN_PREFIX + cron, SK: INCIDENT_SK}).get(
        "Item"
    )
    return item


def test_a_failing_cron_alerts_once_then_once_more_when_it_recovers(
    stage: Stage, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    inbox = stage.subscribe_inbox()
    job = Switch()
    handlers: dict[str, ScheduledHandler] = {CRON: job}
    results = [_fire(stage, handlers, minute) for minute in (0, 10, 20)]
    # A handled failure is a result, not an exception: the invocation succeeds, nothing retries it.
    assert [r["status"] for r in results] == ["failed"] * 3
    assert results[0]["error"] == "RuntimeError: provider key rotated"
    (opened,) = _alerts(stage, inbox)
    assert opened["subject"] == f"aijobs dev: cron '{CRON}' failing"
    assert (opened["incident"], opened["cron"]) == ("opened", CRON)
    assert opened["error"] == "RuntimeError: provider key rotated"
    # Every failed run is still logged and counted.
    assert capfd.readouterr().out.count(f'"{METRIC_CRON_FAILED}":[1.0]') == 3  # one EMF line per run
    assert [r.getMessage() for r in caplog.records].count("cron run failed") == 3
    incident = _incident(stage)
    assert incident is not None
    assert (incident["state"], incident["failures"]) == ("open", 3)

    job.failing = False
    assert _fire(stage, handlers, 30)["status"] == "ok"
    (recovered,) = _alerts(stage, inbox)
    assert recovered["subject"] == f"aijobs dev: cron '{CRON}' recovered"
    assert (recovered["incident"], recovered["failedRuns"]) == ("closed", 3)
    assert recovered["lastError"] == "RuntimeError: provider key rotated"
    assert recovered["openedAt"] < recovered["closedAt"] or recovered["openedAt"] == recovered["closedAt"]
    assert f'"{METRIC_CRON_SUCCEEDED}":[1.0]' in capfd.readouterr().out

    # Healthy runs say nothing; the next failure is a new incident and alerts again.
    assert _fire(stage, handlers, 40)["status"] == "ok"
    assert _alerts(stage, inbox) == []
    job.failing = True
    _fire(stage, handlers, 50)
    (reopened,) = _alerts(stage, inbox)
    assert reopened["incident"] == "opened"
    incident = _incident(stage)
    assert incident is not None
    assert (incident["state"], incident["failures"]) == ("open", 1)


def test_incidents_are_per_expression(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    handlers: dict[str, ScheduledHandler] = {CRON: Switch(), OTHER: Switch()}
    _fire(stage, handlers, 0, CRON)
    _fire(stage, handlers, 0, OTHER)
    _fire(stage, handlers, 5, OTHER)
    assert sorted(a["cron"] for a in _alerts(stage, inbox)) == sorted([OTHER, CRON])


def test_of_two_failures_racing_only_the_one_that_opens_the_incident_alerts(stage: Stage) -> None:
    """The conditional open decides: a second opener (a concurrent run of the same cron) loses
    the condition and only counts."""
    incidents = CronIncidents(boto3.resource("dynamodb").Table(stage.resources.meta_table))
    now = stage.clock()
    assert incidents.record_failure(CRON, error="first", now=now) is True
    assert incidents.record_failure(CRON, error="second", now=now) is False
    assert incidents.record_success(CRON, now=now) is not None
    assert incidents.record_success(CRON, now=now) is None  # the racing success closes nothing
    incident = _incident(stage)
    assert incident is not None
    assert (incident["state"], incident["failures"], incident["last_error"]) == ("closed", 2, "second")


def test_a_failure_whose_count_finds_the_incident_just_closed_opens_a_new_one(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open fails (already open), a success closes it, then the count fails too: the failure must
    still alert, by opening the next incident."""
    meta = boto3.resource("dynamodb").Table(stage.resources.meta_table)
    incidents = CronIncidents(meta)
    now = stage.clock()
    incidents.record_failure(CRON, error="first", now=now)
    real_update = meta.update_item
    calls: list[str] = []

    def update_item(**kwargs: Any) -> Any:
        calls.append(kwargs["ConditionExpression"])
        if len(calls) == 2:  # between the lost open and the count, a success closes the incident
            other = boto3.resource("dynamodb").Table(stage.resources.meta_table)
            CronIncidents(other).record_success(CRON, now=now)
        return real_update(**kwargs)

    monkeypatch.setattr(meta, "update_item", update_item)
    assert incidents.record_failure(CRON, error="second", now=now) is True
    # lost open, lost count (closed meanwhile), then the open of a new incident
    assert len(calls) == 3
    incident = _incident(stage)
    assert incident is not None
    assert (incident["state"], incident["failures"], incident["last_error"]) == ("open", 1, "second")


def test_an_alert_that_cannot_be_sent_gives_the_incident_back(stage: Stage) -> None:
    inbox = stage.subscribe_inbox()
    handlers: dict[str, ScheduledHandler] = {CRON: Switch()}
    ctx = _ctx(stage)

    class BrokenAlerts:
        def publish(self, subject: str, detail: dict[str, Any]) -> None:
            raise ClientError({"Error": {"Code": "AuthorizationError", "Message": "no"}}, "Publish")

    ctx.alerts = BrokenAlerts()  # type: ignore[assignment]
    # Nothing alerted: the invocation fails, for Lambda's retries, Errors alarm and cron DLQ.
    with pytest.raises(ClientError):
        dispatch({"cron": CRON, "scheduledTime": "2026-11-29T09:00:00Z"}, ctx, handlers)
    incident = _incident(stage)
    assert incident is not None
    assert incident["state"] == "closed"
    # The claim was given back, so the retry of the same firing runs and, now able to, alerts.
    assert _fire(stage, handlers, 0)["status"] == "failed"
    (alert,) = _alerts(stage, inbox)
    assert alert["incident"] == "opened"


def test_without_incident_state_a_failure_still_alerts(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    inbox = stage.subscribe_inbox()

    def unavailable(self: CronIncidents, expression: str, *, error: str, now: Any) -> bool:
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": ""}}, "Update"
        )

    monkeypatch.setattr(cron_incidents.CronIncidents, "record_failure", unavailable)
    _fire(stage, {CRON: Switch()}, 0)
    assert len(_alerts(stage, inbox)) == 1


def test_the_incident_item_lives_under_the_keys_the_dispatcher_may_write() -> None:
    """The dispatcher's IAM grant allows writes only to `CRONRUN#*` partitions of the meta table
    (aijobs_cdk Tables.grant_cron_run_records)."""
    key = CronIncidents._key(CRON)
    assert key[PK].startswith(CRON_RUN_PREFIX)
    assert key[SK] == INCIDENT_SK
