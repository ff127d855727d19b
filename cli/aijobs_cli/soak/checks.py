"""The soak's invariants and their checks: what each invariant means (`INVARIANTS`, every count must
be 0), and the checks of a finished run: each job's end, the provider runs (local stack), the
model spend, cancels, re-runs and held rows, the API's answers, the crons, every user's ledger and
the dead-letter entries."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime

from aijobs_cli.soak.counting import ProviderRuns
from aijobs_cli.soak.observed import DeadLetterState
from aijobs_cli.soak.run_state import SoakRun
from aijobs_cli.soak.targets import SoakTarget
from aijobs_cli.soak.workload import (
    CLASSIFY,
    DEAD_LETTERED,
    FAILED_FINAL,
    SUCCEEDED,
    WORKFLOW_CHILD_KIND,
    WORKFLOW_KIND,
    WORKFLOW_PARTS,
    SoakJob,
    SoakUser,
    capped_tenants,
)

INVARIANTS = {
    "jobs_lost": "not finished at the deadline, or row missing",
    "wrong_terminal_status": "final status (or dead-letter flag) other than its fault's",
    "attempts_over_budget": "attempts above MAX_RETRIES + 1",
    "provider_successes_over_one": "jobs whose provider returned a result more than once",
    "succeeded_without_provider_success": "succeeded rows the provider never produced",
    "balance_mismatches": "users whose balance != grants - expired - prices not refunded",
    "ledger_errors_per_job": "jobs without exactly one debit, and one refund iff failed_final",
    "api_5xx": "5xx answers from the API, or no answer",
    "api_rejections": "submissions answered with a 4xx",
    "dead_letter_mismatches": "dead-letter entries whose state is not their row's: open for the jobs "
    "dead now, succeeded for those re-run since, none for any other",
    "cron_errors": "cron fires that raised",
    "grants_not_expired": "short-lived grants still unexpired after the final cron round",
    "model_calls_unrecorded": "provider results whose row did not succeed with its usage recorded",
    "results_not_charged": "succeeded jobs not charged exactly their price (one debit, no refund)",
    "spend_mismatches": "spend the brake counted != cost the provider reported != cost on the rows",
    "cancels_refused": "cancels answered otherwise than 200 (cancelled), 202 (running) or 409 (finished)",
    "rerun_mismatches": "batch re-runs whose dry run counted otherwise, or that re-ran a cancelled job",
    "held_rows_resent": "jobs of the capped tenant the sweeper re-sent as lost (held rows are held)",
}


def check_invariants(run: SoakRun) -> tuple[dict[str, int | None], dict[str, DeadLetterState] | None]:
    """Every invariant's count for the finished run (None: not measured on this target), with the
    dead-letter entries of its jobs (None: not readable); examples go to `run.examples`."""
    target, accepted, examples = run.target, run.accepted, run.examples
    invariants: dict[str, int | None] = dict.fromkeys(INVARIANTS, 0)

    def violate(name: str, what: str) -> None:
        count = invariants[name]
        invariants[name] = (count or 0) + 1
        if len(examples[name]) < 20:
            examples[name].append(what)

    _check_jobs(target, accepted, violate)
    runs = target.runs
    if runs is not None:
        _check_provider_runs(accepted, runs, violate)
        _check_spend(target, accepted, runs, run.window_start, violate, invariants)
    else:
        invariants["provider_successes_over_one"] = None
        invariants["succeeded_without_provider_success"] = None
        invariants["model_calls_unrecorded"] = None
        invariants["spend_mismatches"] = None
    for job in accepted:
        if job.cancel_status is not None and job.cancel_status not in (200, 202, 409):
            violate("cancels_refused", f"{job.job_id}: cancel answered {job.cancel_status}")
    for line in examples.pop("rerun_mismatches", []):
        violate("rerun_mismatches", line)
    capped = capped_tenants(run.people)
    for job_id in run.resent_by_sweeper:
        resent = run.by_id.get(job_id)
        if resent is not None and resent.user_id in capped:
            violate("held_rows_resent", f"{job_id} ({resent.kind}, {resent.fault.name}) of the capped tenant")
    api = run.api
    invariants["api_5xx"] = sum(n for status, n in api.statuses.items() if status >= 500 or status == 0)
    examples["api_5xx"] = api.errors[:20]
    invariants["api_rejections"] = len(examples["api_rejections"])
    invariants["cron_errors"] = run.cron["errors"]
    _check_ledgers(target, run.people, accepted, invariants, violate)
    entries = target.dead_letters({job.job_id for job in accepted})
    if entries is None:
        invariants["dead_letter_mismatches"] = None
    else:
        _check_dead_letters(accepted, entries, violate)
    return invariants, entries


def _check_jobs(target: SoakTarget, accepted: list[SoakJob], violate: Callable[[str, str], None]) -> None:
    """Each job finished, as its fault says, within its attempts budget."""
    for job in accepted:
        label = f"{job.job_id} ({job.kind}, {job.fault.name}, user {job.user_id})"
        if job.missing or job.status not in (SUCCEEDED, FAILED_FINAL):
            violate("jobs_lost", f"{label}: {'row missing' if job.missing else job.status}")
            continue
        if not job.outcome_expected():
            violate("wrong_terminal_status", f"{label}: {job.outcome}, expected {job.fault.expect}")
        if job.attempts > target.max_attempts:
            violate("attempts_over_budget", f"{label}: {job.attempts} attempts")


def _check_provider_runs(
    accepted: list[SoakJob], runs: ProviderRuns, violate: Callable[[str, str], None]
) -> None:
    """Each job's provider returned a result at most once, and only for a row that succeeded
    with its usage recorded (local stack only: provider runs are counted there)."""
    for job in accepted:
        if job.kind == CLASSIFY:
            continue  # the API's own provider call, not a consumer's: not observed
        # A workflow parent calls no model: its children do, each a job of its own.
        called = (
            [(child.job_id, child.status, child.usage_recorded) for child in job.children]
            if job.kind == WORKFLOW_KIND
            else [(job.job_id, job.status, job.usage_recorded)]
        )
        for job_id, status, usage_recorded in called:
            what = f"{job_id} ({job.kind}, {job.fault.name})"
            successes = runs.successes[job_id]
            if successes > 1:
                violate("provider_successes_over_one", f"{what}: {successes}")
            if status == SUCCEEDED and successes == 0:
                violate("succeeded_without_provider_success", what)
            if successes and not (status == SUCCEEDED and usage_recorded):
                violate("model_calls_unrecorded", f"{what}: {status}, usage recorded {usage_recorded}")


def _check_spend(
    target: SoakTarget,
    accepted: list[SoakJob],
    runs: ProviderRuns,
    started: datetime,
    violate: Callable[[str, str], None],
    invariants: dict[str, int | None],
) -> None:
    """The three figures of the run's model spend must agree: what the provider reported for
    every result, what the rows recorded, what the spend brake counted (stage days of the run)."""
    counted = target.spend_counted(started)
    if counted is None:
        invariants["spend_mismatches"] = None
        return
    reported = sum(runs.costs[job.job_id] for job in accepted) + sum(
        runs.costs[child.job_id] for job in accepted for child in job.children
    )
    on_rows = sum(job.cost or 0.0 for job in accepted if job.status == SUCCEEDED) + sum(
        child.cost or 0.0 for job in accepted for child in job.children if child.status == SUCCEEDED
    )
    if not (abs(counted - reported) < 1e-6 and abs(on_rows - reported) < 1e-6):
        violate(
            "spend_mismatches",
            f"provider reported {reported:.6f} USD, rows recorded {on_rows:.6f}, brake counted {counted:.6f}",
        )


def _check_ledgers(
    target: SoakTarget,
    people: list[SoakUser],
    accepted: list[SoakJob],
    invariants: dict[str, int | None],
    violate: Callable[[str, str], None],
) -> None:
    views = {user.user_id: target.ledger(user) for user in people}
    if any(view is None for view in views.values()):
        invariants["balance_mismatches"] = None
        invariants["ledger_errors_per_job"] = None
        invariants["grants_not_expired"] = None
        invariants["results_not_charged"] = None
        return
    jobs_of: dict[str, list[SoakJob]] = defaultdict(list)
    for job in accepted:
        jobs_of[job.user_id].append(job)
    child_price = target.prices.get(WORKFLOW_CHILD_KIND, 0)
    for user in people:
        view = views[user.user_id]
        assert view is not None
        totals = Counter(view.totals)
        # Grants made (locally) or the balance at the start (deployed), minus what expired since,
        # minus the price of every job that was not refunded.
        kept = sum(_charge_due(job, child_price) for job in jobs_of[user.user_id])
        expected = user.granted - view.expired_since - kept
        internal = totals["grant"] - totals["debit"] + totals["refund"] - totals["expire"]
        problems = []
        if view.balance != expected:
            problems.append(f"balance {view.balance}, expected {expected}")
        if view.balance != internal:
            problems.append(f"balance {view.balance} != ledger sum {internal}")
        if view.api_balance is not None and view.api_balance != view.balance:
            problems.append(f"GET /credits says {view.api_balance}")
        ours = {job.job_id for job in jobs_of[user.user_id]}
        strangers = sorted(job_id for job_id in view.per_job if job_id not in ours)
        if problems and strangers:
            problems.append(f"ledger entries of jobs the soak never saw accepted: {strangers[:5]}")
        if problems:
            violate("balance_mismatches", f"user {user.user_id}: " + "; ".join(problems))
        for _grant in range(view.short_grants_unexpired):
            violate("grants_not_expired", f"user {user.user_id}: a grant due before the final round")
        for job in jobs_of[user.user_id]:
            counts = view.per_job.get(job.job_id, Counter())
            debited = view.debit_amounts.get(job.job_id, 0)
            refunded = view.refund_amounts.get(job.job_id, 0) if counts["refund"] else 0
            due = _charge_due(job, child_price)
            what = f"{job.job_id} ({job.fault.name}, {job.outcome})"
            if debited - refunded < due:
                violate(
                    "results_not_charged",
                    f"{what}: charged {debited - refunded} ({counts['debit']} debit(s) of {debited}, "
                    f"{counts['refund']} refund(s) of {refunded}), due {due}",
                )
            refund_due = 1 if debited > due else 0
            if counts["debit"] != 1 or counts["refund"] != refund_due or debited - refunded != due:
                violate(
                    "ledger_errors_per_job",
                    f"{what}: {counts['debit']} debit(s) of {debited}, {counts['refund']} refund(s) of "
                    f"{refunded}, due {due}",
                )


def _charge_due(job: SoakJob, child_price: int) -> int:
    """What the tenant must have paid for `job` in the end (docs/concepts/credits.md): its price if it
    succeeded, nothing if it failed for good or was cancelled before it ran, nothing more for an
    operator's re-run on the house (`charge_waived`: its price was refunded when it died), and for
    a workflow its child kind's price per child that succeeded (plus its own base if it merged)."""
    reserved = job.reserved if job.reserved is not None else job.price
    if job.charge_waived:
        return 0
    if job.kind == WORKFLOW_KIND:
        succeeded = sum(1 for child in job.children if child.status == SUCCEEDED)
        base = reserved - child_price * WORKFLOW_PARTS
        return child_price * succeeded + (base if job.status == SUCCEEDED else 0)
    return reserved if job.status == SUCCEEDED else 0


def _check_dead_letters(
    accepted: list[SoakJob], entries: Mapping[str, DeadLetterState], violate: Callable[[str, str], None]
) -> None:
    """Each entry as operators see it must say what its row says: the jobs dead now are open (and
    counted), the ones re-run since and succeeded are resolved; no other job has one."""
    for job in accepted:
        entry = entries.get(job.job_id)
        label = f"{job.job_id} ({job.kind}, {job.fault.name}, {job.outcome})"
        ever_dead = job.fault.name in ("outage-503", "outage-rerun")
        if entry is None:
            if ever_dead:
                violate("dead_letter_mismatches", f"{label}: dead-lettered, but no entry")
            continue
        if not ever_dead:
            violate("dead_letter_mismatches", f"{label}: an entry for a job that was never dead")
            continue
        expected = {DEAD_LETTERED: "open", SUCCEEDED: "succeeded"}.get(job.outcome or "")
        if entry.resolution != expected or entry.listed_open != (expected == "open"):
            violate(
                "dead_letter_mismatches",
                f"{label}: entry {entry.resolution} ({'listed' if entry.listed_open else 'not listed'} "
                f"as open), expected {expected}",
            )
