"""The soak's report and its computation: `SoakReport` (the invariants next to plain figures, each
fault's outcomes, examples and notes), the figures of a finished run, the backlog note, and a paced
run's load section (caps, why submitting stopped, the throttles seen, the capacity model's
prediction). The command prints it (`aijobs_cli.commands.soak`)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aijobs_cli.soak.load import LoadPlan, counted_spend
from aijobs_cli.soak.observed import DeadLetterState
from aijobs_cli.soak.run_state import Api, SoakRun
from aijobs_cli.soak.targets import SoakTarget
from aijobs_cli.soak.workload import CANCELLED, CLASSIFY, SUCCEEDED, WORKFLOW_KIND, SoakJob, capped_tenants


@dataclass
class SoakReport:
    target: str
    seed: int
    jobs: int
    users: int
    duration_seconds: float
    jobs_per_second: float
    invariants: dict[str, int | None]
    figures: dict[str, Any]
    outcomes: dict[str, dict[str, int]]
    examples: dict[str, list[str]]
    notes: list[str]
    #: A paced run (`LoadPlan`): caps, why it stopped, throttles seen, the capacity model's prediction.
    load: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(not count for count in self.invariants.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def build_report(
    run: SoakRun,
    seed: int,
    invariants: dict[str, int | None],
    entries: dict[str, DeadLetterState] | None,
    left: int | None,
    finish_line: float,
    load: LoadPlan | None,
    capacity_inputs: Mapping[str, Any] | None,
) -> SoakReport:
    """The report of a finished and checked run (`finish_line`: when its last job finished)."""
    started, accepted, examples = run.started, run.accepted, run.examples
    elapsed = max(finish_line - started, 1e-6)
    outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in run.plan:
        outcomes[job.fault.name][(job.outcome or ("not accepted" if not job.job_id else "unfinished"))] += 1
    figures = _figures(run, entries, left)
    runs = run.target.runs
    if runs is not None:
        figures |= {
            "provider_runs": sum(runs.calls.values()),
            "provider_crashes": sum(runs.crashes.values()),
            "jobs_crashed_and_recovered": sum(
                1 for job in accepted if runs.crashes[job.job_id] and job.status == SUCCEEDED
            ),
        }
    else:
        figures["provider_runs_approximated_from_attempts"] = sum(job.attempts for job in accepted)
    report = SoakReport(
        target=run.target.label,
        seed=seed,
        jobs=figures["jobs_accepted"],
        users=len(run.people),
        duration_seconds=round(time.monotonic() - started, 1),
        jobs_per_second=round(figures["jobs_accepted"] / elapsed, 2),
        invariants=invariants,
        figures=figures,
        outcomes={name: dict(counts) for name, counts in outcomes.items()},
        examples={name: lines for name, lines in examples.items() if lines},
        notes=[*run.target.notes, *_backlog_note(run.target, figures["longest_queue_wait_seconds"])],
    )
    if load is not None:
        report.load = _load_report(
            run.target, load, run.stopped[0] if run.stopped else "deadline", run.submitted_jobs, accepted,
            run.api, run.window_start, capacity_inputs, len(run.people), report.jobs_per_second,
        )  # fmt: skip
    return report


def _figures(run: SoakRun, entries: dict[str, DeadLetterState] | None, left: int | None) -> dict[str, Any]:
    """The run's plain figures: what it submitted, injected, fired and re-ran, and what came of it."""
    accepted, injected, reruns, cron = run.accepted, run.injected, run.reruns, run.cron
    capped = capped_tenants(run.people)
    plain = [job for job in accepted if job.kind != WORKFLOW_KIND]
    return {
        "jobs_planned": run.jobs,
        "jobs_accepted": sum(1 for job in accepted if job.kind != CLASSIFY),
        "retries": sum(max(0, job.attempts - 1) for job in accepted),
        "dead_letter_entries": len(entries) if entries is not None else None,
        "dead_letter_entries_open": (
            sum(1 for entry in entries.values() if entry.listed_open) if entries is not None else None
        ),
        "batch_rerun_pages": reruns["pages"],
        "jobs_rerun": reruns["jobs"],
        "rerun_jobs_succeeded": sum(1 for job in accepted if job.reruns and job.status == SUCCEEDED),
        "copies_on_dead_letter_queues_after_rerun": injected["dead_letter_queue_after_rerun"],
        "capped_tenant_jobs": sum(1 for job in accepted if job.user_id in capped),
        "sweeper_resends": len(run.resent_by_sweeper),
        # The longest a job tried once waited in its queue: past STUCK_QUEUED_SECONDS, the sweeper
        # cannot tell a waiting row from a lost one and re-sends it (see the report's notes).
        "longest_queue_wait_seconds": _longest_wait(accepted, capped),
        "workflow_children": sum(len(job.children) for job in accepted),
        "workflow_children_succeeded": sum(
            1 for job in accepted for child in job.children if child.status == SUCCEEDED
        ),
        "copies_on_main_queues": injected["main_queue_early"] + injected["main_queue_late"],
        "copies_on_main_queues_in_flight": injected["main_queue_early"],
        "copies_on_main_queues_after_finish": injected["main_queue_late"],
        "copies_on_dead_letter_queues": injected["dead_letter_queue"],
        # Of plain jobs (a workflow's cancel is counted apart: its children are charged one by one).
        "cancels": dict(sorted(Counter(str(j.cancel_status) for j in plain if j.cancel_status).items())),
        "classify_calls": sum(1 for job in accepted if job.kind == CLASSIFY),
        "cancelled_jobs": sum(1 for job in plain if job.outcome == CANCELLED),
        "cancelled_mid_call_and_charged": sum(
            1 for job in plain if job.cancel_status == 202 and job.status == SUCCEEDED
        ),
        "workflow_cancels": dict(
            sorted(Counter(str(j.cancel_status) for j in accepted if j.kind == WORKFLOW_KIND).items())
        ),
        "workflows_cancelled": sum(1 for j in accepted if j.kind == WORKFLOW_KIND and j.outcome == CANCELLED),
        "cron_double_fires": cron["pairs"],
        "cron_double_fires_both_ran": cron["pairs_both_ran"],
        "short_grants": sum(len(user.short_grants) for user in run.people),
        "api_answers": {str(status): n for status, n in sorted(run.api.statuses.items())},
        "messages_left": left,
    }


def _longest_wait(accepted: Iterable[SoakJob], capped: set[str]) -> float | None:
    """The longest wait in a queue before a first attempt: of jobs tried once, never re-run (a
    re-run's attempt starts long after its row was made) and not of the capped tenant (held by
    design, not by a backlog)."""
    waits = [
        job.first_wait
        for job in accepted
        if job.first_wait is not None and not job.reruns and job.user_id not in capped
    ]
    return round(max(waits), 1) if waits else None


def _backlog_note(target: SoakTarget, longest: float | None) -> list[str]:
    """Say so when the run built a backlog the sweeper takes for lost messages."""
    stuck = target.stuck_after_seconds()
    if longest is None or stuck is None or longest <= stuck:
        return []
    return [
        f"a job waited {longest:.0f} s in its queue, longer than STUCK_QUEUED_SECONDS ({stuck} s): the "
        "run submitted faster than the stack finished, and the sweeper re-sends any row waiting that "
        "long (it cannot tell a message in a backlog from a lost one; the copy is dropped on arrival). "
        "held_rows_resent then counts held rows whose copy waited in that backlog: run at a lower --rate "
        "to check the hold itself"
    ]


def _load_report(
    target: SoakTarget,
    load: LoadPlan,
    stopped_by: str,
    submitted: list[SoakJob],
    accepted: list[SoakJob],
    api: Api,
    window_start: datetime,
    capacity_inputs: Mapping[str, Any] | None,
    tenants: int,
    achieved: float,
) -> dict[str, Any]:
    """Caps, why submitting stopped, the throttles seen, and the capacity model's prediction."""
    classes = Counter(job.last_error_class for job in accepted if job.last_error_class)
    # A job whose fault never fails has an error class only from the stage itself (a real throttle).
    unexpected = Counter(
        job.last_error_class
        for job in accepted
        if job.last_error_class and job.fault.name in ("plain", "slow")
    )
    window_end = datetime.now(UTC)
    prediction = None
    if capacity_inputs is not None:
        from aijobs_cli.sizing.capacity import CapacityInputs, model

        rate = load.rate or max(achieved, 0.001)
        fields = {**capacity_inputs, "kinds": target.kinds, "tenants": tenants}
        predicted = model(CapacityInputs(jobs_per_second=rate, **fields))
        first = predicted.first_wall()
        prediction = {
            "jobs_per_second": rate,
            "first_wall": None if first is None else {"limit": first.name, "jobs_per_second": first.wall},
            "limits_reached": [limit.name for limit in predicted.over()],
        }
    return {
        "rate_asked": load.rate,
        "duration_asked_seconds": load.duration_seconds,
        "max_jobs": load.max_jobs,
        "max_spend_usd": load.max_spend_usd,
        "cost_per_job_usd": load.cost_per_job_usd,
        "stopped_by": stopped_by,
        "submitted": len(submitted),
        "spend_counted_usd": round(counted_spend(submitted, load.cost_per_job_usd), 6),
        "spend_recorded_usd": round(sum(job.cost or 0.0 for job in accepted), 6),
        "throttles": {
            "api_429": api.statuses.get(429, 0),
            "job_error_classes": dict(classes),
            "job_error_classes_of_faultless_jobs": dict(unexpected),
            "cloudwatch": target.metrics(window_start, window_end),
        },
        "window": [window_start.isoformat(), window_end.isoformat()],
        "prediction": prediction,
    }
