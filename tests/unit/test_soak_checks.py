"""The soak's money and dead-letter checks flag what they claim to (the CI soak shows they stay 0)."""

from __future__ import annotations

from aijobs_cli.soak.checks import _charge_due, _check_dead_letters
from aijobs_cli.soak.observed import ChildState, DeadLetterState
from aijobs_cli.soak.report import _backlog_note, _longest_wait
from aijobs_cli.soak.workload import (
    CANCELLED,
    FAILED_FINAL,
    FAULTS,
    SUCCEEDED,
    WORKFLOW_KIND,
    WORKFLOW_PARTS,
    SoakJob,
)

FAULT = {fault.name: fault for fault in FAULTS}
CHILD_PRICE = 5


def _job(fault: str, status: str, *, kind: str = "summary", price: int = 3, **row: object) -> SoakJob:
    job = SoakJob(index=0, user_id="u", kind=kind, fault=FAULT[fault], price=price, job_id=f"j-{fault}")
    job.status = status
    for name, value in row.items():
        setattr(job, name, value)
    return job


def _children(succeeded: int, stopped: int) -> list[ChildState]:
    return [ChildState(f"c{n}", SUCCEEDED, 0.001, True) for n in range(succeeded)] + [
        ChildState(f"s{n}", FAILED_FINAL, None, False) for n in range(stopped)
    ]


def test_a_job_owes_its_price_when_it_succeeded_and_nothing_when_it_failed_or_was_waived() -> None:
    assert _charge_due(_job("plain", SUCCEEDED), CHILD_PRICE) == 3
    assert _charge_due(_job("invalid-400", FAILED_FINAL), CHILD_PRICE) == 0
    # An operator's re-run on the house: refunded when it died, not charged when it succeeded.
    assert _charge_due(_job("outage-rerun", SUCCEEDED, charge_waived=True), CHILD_PRICE) == 0


def test_a_cancelled_workflow_owes_one_child_price_per_child_that_succeeded() -> None:
    base = 2
    reserved = base + CHILD_PRICE * WORKFLOW_PARTS
    cancelled = _job(
        "batch-cancelled", FAILED_FINAL, kind=WORKFLOW_KIND, reserved=reserved, last_error_class=CANCELLED,
        children=_children(succeeded=2, stopped=WORKFLOW_PARTS - 2),
    )  # fmt: skip
    assert _charge_due(cancelled, CHILD_PRICE) == 2 * CHILD_PRICE
    merged = _job(
        "batch-cancelled", SUCCEEDED, kind=WORKFLOW_KIND, reserved=reserved,
        children=_children(succeeded=WORKFLOW_PARTS, stopped=0),
    )  # fmt: skip
    assert _charge_due(merged, CHILD_PRICE) == reserved
    before_split = _job("batch-cancelled", FAILED_FINAL, kind=WORKFLOW_KIND, reserved=reserved)
    assert _charge_due(before_split, CHILD_PRICE) == 0


def _mismatches(jobs: list[SoakJob], entries: dict[str, DeadLetterState]) -> list[str]:
    found: list[str] = []
    _check_dead_letters(jobs, entries, lambda name, what: found.append(f"{name}: {what}"))
    return found


def test_dead_letter_entries_must_say_what_their_rows_say() -> None:
    dead = _job("outage-503", FAILED_FINAL, dead_lettered=True)
    back = _job("outage-rerun", SUCCEEDED, reruns=1)
    plain = _job("plain", SUCCEEDED)
    right = {
        dead.job_id: DeadLetterState("open", listed_open=True),
        back.job_id: DeadLetterState("succeeded", listed_open=False),
    }
    assert _mismatches([dead, back, plain], right) == []
    # Each way the list can lie is flagged.
    assert _mismatches([back], {back.job_id: DeadLetterState("succeeded", listed_open=True)})  # still counted
    assert _mismatches([back], {back.job_id: DeadLetterState("open", listed_open=True)})  # not settled
    assert _mismatches([dead], {})  # a dead job without its entry
    assert _mismatches([plain], {plain.job_id: DeadLetterState("open", listed_open=True)})  # a stranger
    # A re-run job a late dead-letter copy killed again is dead, though its fault says it recovers.
    killed = _job("outage-rerun", FAILED_FINAL, dead_lettered=True, reruns=1)
    assert _mismatches([killed], {killed.job_id: DeadLetterState("open", listed_open=True)}) == []


class _Target:
    def __init__(self, stuck: int | None) -> None:
        self.stuck = stuck

    def stuck_after_seconds(self) -> int | None:
        return self.stuck


def test_a_backlog_longer_than_the_sweepers_patience_is_named_in_the_report() -> None:
    jobs = [_job("plain", SUCCEEDED, first_wait=wait) for wait in (0.4, 12.25, None)]
    assert _longest_wait(jobs, set()) == 12.2  # rounded; a job tried more than once has no first wait
    assert _longest_wait([_job("plain", SUCCEEDED)], set()) is None
    # Not a backlog: a re-run's attempt starts long after its row was made, a capped tenant waits held.
    rerun = _job("plain", SUCCEEDED, first_wait=900.0, reruns=1)
    held = _job("plain", SUCCEEDED, first_wait=800.0, user_id="capped")
    assert _longest_wait([*jobs, rerun, held], {"capped"}) == 12.2
    assert _longest_wait([*jobs, held], set()) == 800.0
    (note,) = _backlog_note(_Target(5), 12.2)  # type: ignore[arg-type]
    assert "waited 12 s" in note
    assert "STUCK_QUEUED_SECONDS (5 s)" in note
    assert "--rate" in note
    assert _backlog_note(_Target(900), 12.2) == []  # type: ignore[arg-type]
    assert _backlog_note(_Target(None), 1e6) == []  # type: ignore[arg-type]  # a deployed stage
