"""The chaos soak CI runs, and the `#crash` recovery it relies on."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from aijobs.domain import JobStatus
from aijobs.observability import logger
from aijobs.providers.local_directives import SimulatedCrash
from aijobs_cli.main import app
from aijobs_cli.soak.checks import INVARIANTS
from aijobs_cli.soak.report import SoakReport
from aijobs_cli.soak.run import run_soak
from aijobs_cli.soak.targets import LocalSoakTarget
from aijobs_cli.soak.workload import CANCELLED, DEAD_LETTERED, FAULTS
from tests.integration.harness import Stage, restored_process_state

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer does the slow part."


def test_a_crashed_attempt_keeps_its_lease_and_is_recovered_with_a_second_attempt(stage: Stage) -> None:
    job = stage.submit("user-1", "summary", "#crash " + TEXT)
    mapping = stage.mapping("summary")
    receipts: list[str] = []
    consumer_handle = mapping.handler

    def handler(event: dict[str, Any], context: Any) -> Any:
        receipts.extend(record["receiptHandle"] for record in event["Records"])
        return consumer_handle(event, context)

    mapping.handler = handler
    crashed = mapping.poll_once()
    assert isinstance(crashed.error, SimulatedCrash)
    # The invocation died: no row update beyond the claim, nothing deleted, no batch answer.
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.RUNNING, 1)
    assert crashed.response is None

    # Like SQS after the visibility timeout, without waiting for it; the lease has expired too.
    stage.clock.advance(stage.resources.config.lease_seconds + 1)
    for receipt in receipts:
        stage.sqs.change_message_visibility(
            QueueUrl=stage.resources.queue_urls["summary"], ReceiptHandle=receipt, VisibilityTimeout=0
        )
    recovered = mapping.poll_once()
    assert (recovered.received, recovered.failed_ids, recovered.error) == (1, [], None)
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)
    assert stage.provider.calls[job.job_id] == 2


def test_a_redelivered_crash_inside_the_lease_is_acknowledged_without_running(stage: Stage) -> None:
    job = stage.submit("user-1", "summary", "#crash " + TEXT)
    mapping = stage.mapping("summary")
    assert isinstance(mapping.poll_once().error, SimulatedCrash)
    stage.send(job)  # a duplicate while the crashed attempt still holds the lease
    assert mapping.poll_once().failed_ids == []
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.RUNNING, 1)
    assert stage.provider.calls[job.job_id] == 1


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """The soak runs every function in-process: keep their INFO logs out of the captured output."""
    with restored_process_state():
        logger.setLevel("WARNING")
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
        yield


def _assert_clean(report: SoakReport) -> None:
    problems = {name: report.examples.get(name, []) for name, count in report.invariants.items() if count}
    assert report.ok, f"invariants violated: {problems}"
    assert set(report.invariants) == set(INVARIANTS)
    assert all(count == 0 for count in report.invariants.values()), "every check measured locally"


# The smallest consumer timeout the stage allows: a crashed batch reappears after 6 x 3 + 1 = 19 s
# instead of 31 s. The lease stays at .env.local's 10 s (at least the timeout, as the config requires).
CI_SOAK = {"CONSUMER_TIMEOUT_SECONDS": "3"}


def test_ci_soak_every_invariant_is_zero(quiet_logs: None) -> None:
    with LocalSoakTarget(CI_SOAK) as target:
        # A generous deadline: a run ends as soon as every job finished and the queues are empty.
        report = run_soak(target, jobs=200, users=6, seed=20261129, timeout_seconds=600)
    _assert_clean(report)
    figures = report.figures
    assert report.jobs == figures["jobs_accepted"] == 200
    # The report counted what it claims to have done.
    assert figures["copies_on_main_queues_in_flight"] > 0
    assert figures["copies_on_main_queues_after_finish"] > 0
    assert figures["copies_on_dead_letter_queues"] > 0
    assert figures["cron_double_fires"] >= 2 * 2  # at least one round during the run + the final one
    assert figures["short_grants"] >= 2
    crash_jobs = sum(report.outcomes["crash"].values())
    assert crash_jobs > 0
    assert figures["provider_crashes"] >= crash_jobs
    assert figures["jobs_crashed_and_recovered"] == crash_jobs
    assert figures["retries"] > 0
    outage = sum(report.outcomes["outage-503"].values())
    rerun = sum(report.outcomes["outage-rerun"].values())
    # Every job that died has its entry: the ones dead now open (and counted), the ones an
    # operator's batch re-run brought back resolved (the dead-letter check compares each to its row).
    assert figures["dead_letter_entries"] == outage + rerun
    assert figures["dead_letter_entries_open"] == outage > 0
    assert figures["rerun_jobs_succeeded"] == rerun > 0
    assert figures["jobs_rerun"] >= outage + rerun  # the final round took every failed job again
    assert figures["copies_on_dead_letter_queues_after_rerun"] >= outage + rerun
    # The capped tenant's jobs ran (held while at its cap), and none was re-sent as lost.
    assert figures["capped_tenant_jobs"] > 0
    # Every job was submitted at once: some waited in line, and the report measured it.
    assert figures["longest_queue_wait_seconds"] > 0
    # Cancelled workflows: their children ran or stopped, each success charged (ledger checks).
    assert figures["workflow_children"] > 0
    assert sum(figures["workflow_cancels"].values()) == sum(report.outcomes["batch-cancelled"].values()) > 0
    for fault in FAULTS:
        if fault.expect == CANCELLED:  # queued when cancelled, or mid-call (then charged)
            assert set(report.outcomes[fault.name]) <= {CANCELLED, "succeeded"}
            continue
        assert report.outcomes[fault.name] == {fault.expect: sum(report.outcomes[fault.name].values())}
    # Every cancel was answered, and reached its job before it ended (its call takes a second, the
    # cancel comes within 0.8 s of acceptance). Whether the job was still queued (200, refunded)
    # or mid-call (202, then charged) depends on how busy the machine is: both are right.
    cancels = figures["cancels"]
    assert sum(cancels.values()) == sum(report.outcomes["cancelled"].values()) > 0
    assert cancels.get("200", 0) + cancels.get("202", 0) > 0
    # Each answer says what became of its job: 200 cancelled and refunded; 202 ran and charged.
    assert figures["cancelled_jobs"] == cancels.get("200", 0)
    assert figures["cancelled_mid_call_and_charged"] == cancels.get("202", 0)
    assert report.outcomes["outage-503"] == {DEAD_LETTERED: outage}
    # Synchronous calls ran among the jobs, each answered and charged once (the ledger checks).
    assert figures["classify_calls"] == report.outcomes["classify-call"]["succeeded"] == 200 // 40


def test_cli_soak_of_a_deployed_stage_needs_url_and_key() -> None:
    result = CliRunner().invoke(app, ["soak", "--api-url", "https://example.invalid"])
    assert result.exit_code == 1
    assert "--api-key" in result.output


def test_cli_soak_reports_json_and_exit_code(quiet_logs: None) -> None:
    result = CliRunner().invoke(app, ["soak", "--jobs", "3", "--users", "2", "--seed", "3", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == (0 if report["ok"] else 1), report["examples"]
    assert report["ok"], report["examples"]
    assert report["jobs"] == 3
    assert report["invariants"]["jobs_lost"] == 0
