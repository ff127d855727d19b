"""The soak's run loop, in named steps: set up the plan and the users, start submitting, watch the
jobs to their end (early and late copies, cron double fires, the batch re-run during the run and
the final one), drain the submitting threads, then the final rounds (a double cron round once
every short grant fell due, the queues let settle) and a last read of every row before the checks
and the report."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aijobs_cli.soak.actions import CRONS, feed, fire_pair, rerun_round, submit, take_reruns
from aijobs_cli.soak.checks import check_invariants
from aijobs_cli.soak.load import LoadPlan
from aijobs_cli.soak.report import SoakReport, build_report
from aijobs_cli.soak.run_state import SoakRun
from aijobs_cli.soak.targets import SoakTarget
from aijobs_cli.soak.workload import (
    FAILED_FINAL,
    SUCCEEDED,
    WORKFLOW_KIND,
    SoakJob,
    credit_needs,
    mix_in_calls,
    plan_jobs,
)

#: An accepted job whose row is absent this long after its 202, at this many polls in a row, is lost.
MISSING_AFTER_SECONDS = 10.0
MISSING_POLLS = 3


def run_soak(
    target: SoakTarget,
    *,
    jobs: int,
    users: int,
    seed: int,
    timeout_seconds: float = 600.0,
    cron_interval_seconds: float = 8.0,
    submit_workers: int = 4,
    progress: Callable[[str], None] | None = None,
    load: LoadPlan | None = None,
    capacity_inputs: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SoakReport:
    """Run the soak against `target` and return its report (`report.ok` when every invariant is 0).

    With `load`, jobs are submitted paced and capped by it (`jobs` is then `load.max_jobs`), and
    the report's `load` says why submitting stopped, the throttles seen and what the capacity model
    (`capacity_inputs`: the stage's `aijobs_cli.capacity.stage_inputs`) predicts for that rate.
    `clock` and `sleep` pace the submissions (injected by tests)."""
    if load is not None:
        jobs = load.max_jobs
    run = _set_up(target, jobs, users, seed, timeout_seconds, submit_workers, progress, clock, sleep)
    _start_submitting(run, load)
    _watch(run, cron_interval_seconds)
    _drain(run)
    finish_line = run.last_finished
    left = _final_rounds(run)
    _read_final_rows(run)
    invariants, entries = check_invariants(run)
    return build_report(run, seed, invariants, entries, left, finish_line, load, capacity_inputs)


def _set_up(
    target: SoakTarget,
    jobs: int,
    users: int,
    seed: int,
    timeout_seconds: float,
    submit_workers: int,
    progress: Callable[[str], None] | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> SoakRun:
    """The seeded plan, its users (granted what their jobs need), and the run about to start."""
    say = progress or (lambda _line: None)
    rng = random.Random(seed ^ 0x5EED)  # noqa: S311 - reproducible, not a secret
    plan = plan_jobs(jobs, users, target.kinds, target.prices, seed)
    mix_in_calls(plan, jobs, users, target.prices)
    people = target.make_users(users, credit_needs(plan), rng)
    for job in plan:
        job.user_id = people[int(job.user_id) % len(people)].user_id
    operator = target.operator_api()
    started = time.monotonic()
    window_start = datetime.now(UTC)
    say(f"soak: {jobs} jobs, {len(people)} users, seed {seed}, against {target.label}")
    pool = ThreadPoolExecutor(max_workers=submit_workers, thread_name_prefix="soak-submit")
    return SoakRun(
        target=target, jobs=jobs, plan=plan, people=people, say=say, clock=clock, sleep=sleep,
        operator=operator, started=started, window_start=window_start,
        deadline=started + timeout_seconds, pool=pool,
    )  # fmt: skip


def _start_submitting(run: SoakRun, load: LoadPlan | None) -> None:
    """Every job at once to the pool, or (a `LoadPlan`) paced and capped from a feeding thread."""
    if load is None:
        run.futures.extend(run.pool.submit(submit, run, job) for job in run.plan)
        run.fed.set()
    else:
        run.feeder = threading.Thread(target=feed, args=(run, load), name="soak-feed", daemon=True)
        run.feeder.start()


@dataclass
class _Watch:
    """The watch loop's own schedule: the next cron round, the next poll, the progress line."""

    next_cron: float
    next_poll: float
    final_rerun_done: bool
    last_line: str = ""
    next_say: float = 0.0


def _watch(run: SoakRun, cron_interval_seconds: float) -> None:
    """Until the deadline, or every job finished and the final batch re-run came back: act on the
    re-runs, send early copies, fire the crons, poll the rows."""
    watch = _Watch(run.started + cron_interval_seconds, run.started, run.operator is None, "", run.started)
    while time.monotonic() < run.deadline:
        now = time.monotonic()
        with run.lock:
            current = list(run.accepted)
        for job in current:
            run.by_id.setdefault(job.job_id, job)
        take_reruns(run)
        _start_rerun_if_due(run, current)
        _send_early_copies(run, current, now)
        if now >= watch.next_cron:
            for expression in CRONS:
                fire_pair(run, expression)
            watch.next_cron = time.monotonic() + cron_interval_seconds
        if now >= watch.next_poll:
            _poll(run, current, now, watch)
        with run.lock:
            all_done = run.fed.is_set() and all(f.done() for f in run.futures)
        idle = run.rerun_thread is None or not run.rerun_thread.is_alive()
        if all_done and idle and not run.rerun_answers and len(run.finished) == len(run.accepted):
            if watch.final_rerun_done:
                break
            run.say("  every job finished: a final batch re-run of the failed ones")
            rerun_round(run, final=True)
            watch.final_rerun_done = True
            continue
        time.sleep(0.1)


def _start_rerun_if_due(run: SoakRun, current: list[SoakJob]) -> None:
    """The batch re-run during the run: once, when half the plan was accepted and a job finished."""
    if (
        run.operator is not None
        and run.rerun_thread is None
        and len(current) >= len(run.plan) // 2
        and run.finished
    ):
        run.rerun_thread = threading.Thread(
            target=rerun_round, args=(run, False), name="soak-rerun", daemon=True
        )
        run.rerun_thread.start()


def _send_early_copies(run: SoakRun, current: list[SoakJob], now: float) -> None:
    """A copy of each job's message due in flight, on its main queue."""
    for job in current:
        if (
            job.early_copy is not None
            and job.job_id not in run.pending_early
            and now >= job.accepted_at + job.early_copy
        ):
            run.pending_early.add(job.job_id)
            if run.target.send_copy(job, dead_letter_queue=False):
                run.injected["main_queue_early"] += 1


def _poll(run: SoakRun, current: list[SoakJob], now: float, watch: _Watch) -> None:
    """Read the rows of the jobs not finished yet, note the ones that finished (with their late
    copies) or vanished, and say how far the run is."""
    rows = run.target.rows([job for job in current if job.job_id not in run.finished])
    for job in current:
        row = rows.get(job.job_id)
        if job.job_id in run.finished:
            continue
        if row is None and now - job.accepted_at > MISSING_AFTER_SECONDS:
            # An accepted job has a row from before its 202: one gone for several polls is
            # lost (reported as such), and the run goes on without it.
            job.missing_polls += 1
            if job.missing_polls >= MISSING_POLLS:
                job.missing = True
                run.finished.add(job.job_id)
                run.say(f"  {job.job_id}: its row is gone (counted as lost)")
            continue
        job.missing_polls = 0
        if row is None or row.status not in (SUCCEEDED, FAILED_FINAL):
            continue
        run.finished.add(job.job_id)
        job.cost, job.status, job.last_error_class = row.cost, row.status, row.last_error_class
        job.dead_lettered = row.dead_lettered
        job.finished_at = run.last_finished = time.monotonic()
        if job.late_copy and run.target.send_copy(job, dead_letter_queue=False):
            run.injected["main_queue_late"] += 1
        if job.dlq_copy and row.status == SUCCEEDED and run.target.send_copy(job, dead_letter_queue=True):
            run.injected["dead_letter_queue"] += 1
    with run.lock:
        submitted = sum(future.done() for future in run.futures)
    line = f"  {len(run.finished)}/{len(current)} accepted jobs finished ({submitted}/{run.jobs} submitted)"
    if line != watch.last_line and time.monotonic() >= watch.next_say:
        run.say(line)
        watch.last_line, watch.next_say = line, time.monotonic() + 5.0
    watch.next_poll = time.monotonic() + 2.0


def _drain(run: SoakRun) -> None:
    """Stop submitting, wait for the re-run thread, the feeder, the pool and the cancels' timers;
    a submission that raised is a bug of the soak itself: raise it."""
    run.halt.set()
    if run.rerun_thread is not None:
        run.rerun_thread.join(timeout=60)
    take_reruns(run)
    if run.feeder is not None:
        run.feeder.join()
    run.pool.shutdown(wait=True, cancel_futures=True)
    for timer in list(run.timers):
        timer.join(timeout=30)
    for future in run.futures:  # a submission that raised is a bug of the soak itself: say so
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error


def _final_rounds(run: SoakRun) -> int | None:
    """A last double round after every job finished and every short grant fell due (it must
    expire them), then let every injected copy be consumed before the checks. Returns the
    messages left on the queues (None: not checked)."""
    people, deadline = run.people, run.deadline
    due = max((user.short_expiry for user in people if user.short_expiry), default=None)
    while due is not None and datetime.now(UTC) <= due and time.monotonic() < deadline:
        time.sleep(0.5)
    swept_at = datetime.now(UTC)
    for user in people:
        user.swept_at = swept_at
    for expression in CRONS:
        fire_pair(run, expression)
    left = run.target.messages_left()
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = run.target.messages_left()
    run.say(f"  queues settled ({left} message(s) left)" if left is not None else "  (queues not checked)")
    return left


def _read_final_rows(run: SoakRun) -> None:
    """Every accepted job as its row ended (a workflow parent with its children's rows)."""
    rows = run.target.rows(list(run.accepted))
    for job in run.accepted:
        row = rows.get(job.job_id)
        if row is None:
            job.missing = True
        else:
            job.status, job.attempts, job.dead_lettered = row.status, row.attempts, row.dead_lettered
            job.cost, job.last_error_class = row.cost, row.last_error_class
            job.usage_recorded, job.reserved = row.usage_recorded, row.price
            job.charge_waived = row.charge_waived
            job.first_wait = row.first_wait
            if job.kind == WORKFLOW_KIND:
                job.children = run.target.children(job) or []
