"""What the soak does to the stage while it runs: submit the planned jobs (all at once, or paced and
capped by a `LoadPlan`), cancel jobs on their own timers, fire each cron twice at once, and run an
operator's batch re-runs, then act on their answers (late copies of the re-run jobs' old dead
letters)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from aijobs_cli.soak.load import LoadPlan, Pacer, counted_spend
from aijobs_cli.soak.run_state import SoakRun
from aijobs_cli.soak.workload import (
    CANCELLED,
    CLASSIFY,
    TEXTS,
    WORKFLOW_CHILD_KIND,
    WORKFLOW_KIND,
    WORKFLOW_PARTS,
    SoakJob,
)

CRONS = ("*/10 * * * *", "*/5 * * * *")
SWEEPER = "*/5 * * * *"
# A batch re-run page: the admin API sends re-runs at 5 per second, so a page must stay well under
# the client's 30 s timeout (the API's largest page, 200, takes 40 s and timed out in a 10,000-job
# run).
RERUN_PAGE = 50
#: Seconds between a submission's tries when it got no answer (the last is not waited for).
SUBMIT_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 0.0)


def rerun_round(run: SoakRun, final: bool) -> None:
    """An operator's batch re-run of every soak kind's failed jobs (changed before now), page
    by page; in the final round each page is counted by a dry run first."""
    operator, api = run.operator, run.api
    assert operator is not None
    until = datetime.now(UTC).isoformat()
    for kind in run.target.kinds:
        for _page in range(1000):
            body = {"kind": kind, "until": until, "limit": RERUN_PAGE}
            dry = api.call(operator, "POST", "/admin/reruns", {**body, "dryRun": True}) if final else None
            done = api.call(operator, "POST", "/admin/reruns", {**body, "dryRun": False})
            with run.lock:
                run.rerun_answers.append((final, dry, done))
            if done is None or done.status != 200:
                break
            # A page the API could not finish in its time names what it left: ask again.
            if done.body["matched"] < RERUN_PAGE and not done.body.get("notReached"):
                break


def cancel(run: SoakRun, job: SoakJob) -> None:
    response = run.api.call(run.target.api(run.by_user[job.user_id]), "POST", f"/jobs/{job.job_id}/cancel")
    job.cancel_status = response.status if response is not None else 0


def _request_of(job: SoakJob) -> tuple[str, dict[str, Any], int]:
    """The path, body and accepted status of the job's submission."""
    body: dict[str, Any]
    if job.kind == CLASSIFY:
        path, body, accepted_status = "/classify", {"text": TEXTS["summary"]}, 200
    elif job.kind == WORKFLOW_KIND:
        prompt = f"{job.fault.directive} {TEXTS[WORKFLOW_CHILD_KIND]}"
        prompts = [f"{prompt}, view {n}" for n in range(WORKFLOW_PARTS)]
        path, body, accepted_status = "/jobs", {"kind": job.kind, "input": {"prompts": prompts}}, 202
    else:
        words = f"{job.fault.directive} {TEXTS[job.kind]}".strip()
        path, body, accepted_status = "/jobs", {"kind": job.kind, "input": words}, 202
    return path, body, accepted_status


def submit(run: SoakRun, job: SoakJob) -> None:
    headers = {"Idempotency-Key": f"{job.user_id}-{job.index}"}
    path, body, accepted_status = _request_of(job)
    # A client with an Idempotency-Key retries what got no answer (a timeout on a busy machine):
    # the same key must give the same job, or the same refusal, and charge once.
    for backoff in SUBMIT_BACKOFF:
        response = run.api.call(run.target.api(run.by_user[job.user_id]), "POST", path, body, headers)
        if response is not None and response.status == accepted_status:
            job.job_id, job.accepted_at = str(response.body["jobId"]), time.monotonic()
            with run.lock:
                run.accepted.append(job)
                if job.cancel_after is not None:
                    # On its own timer: a cancel due now must not wait for the soak's loop.
                    timer = threading.Timer(job.cancel_after, cancel, args=(run, job))
                    timer.daemon = True
                    run.timers.append(timer)
                    timer.start()
            return
        if response is not None and response.status < 500:
            run.examples["api_rejections"].append(f"job #{job.index}: {response.status} {response.body}")
            return
        if run.halt.wait(backoff):
            return


def fire_pair(run: SoakRun, expression: str) -> None:
    """Two overlapping fires of one scheduled run, as an at-least-once scheduler may deliver."""
    scheduled = datetime.now(UTC).replace(microsecond=0)
    results: list[dict[str, Any] | None] = [None, None]
    errors: list[str] = []

    def fire(slot: int) -> None:
        try:
            result = results[slot] = run.target.fire_cron(expression, scheduled)
        except Exception as error:
            errors.append(f"{expression} @ {scheduled:%H:%M:%S}: {type(error).__name__}: {error}")
            return
        if result is not None and result.get("status") == "failed":  # handled by the dispatcher
            errors.append(f"{expression} @ {scheduled:%H:%M:%S}: {result.get('error')}")

    threads = [threading.Thread(target=fire, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.cron["errors"] += len(errors)
    run.examples["cron_errors"].extend(errors)
    if expression == SWEEPER:
        for result in results:
            if result is not None and result.get("status") == "ok":
                run.resent_by_sweeper.extend(result.get("result", {}).get("resentJobs", []))
    if results[0] is None and results[1] is None and not errors:
        return  # the target cannot fire crons
    run.cron["pairs"] += 1
    if all(r is not None and r.get("status") == "ok" for r in results):
        run.cron["pairs_both_ran"] += 1


def feed(run: SoakRun, plan_load: LoadPlan) -> None:
    """Submit the plan paced and capped by `plan_load`; records why it stopped."""
    pacer = Pacer(plan_load.rate, run.clock, run.sleep) if plan_load.rate else None
    begun = run.clock()
    fed_jobs = 0
    try:
        for slot, job in enumerate(run.plan):
            if pacer is not None:
                pacer.wait(slot)
            with run.lock:
                spend = counted_spend(run.submitted_jobs, plan_load.cost_per_job_usd)
            if run.halt.is_set():
                reason: str | None = "deadline"
            elif job.kind == CLASSIFY:  # the cap counts jobs: the calls mixed in do not use it up
                reason = None
            else:
                reason = plan_load.stop_reason(fed_jobs, spend, run.clock() - begun)
            if reason is not None:
                run.stopped.append(reason)
                return
            with run.lock:
                run.submitted_jobs.append(job)
                run.futures.append(run.pool.submit(submit, run, job))
            fed_jobs += job.kind != CLASSIFY
        run.stopped.append("max_jobs")
    finally:
        run.fed.set()


def take_reruns(run: SoakRun) -> None:
    """Act on the re-runs' answers: check them, put the re-run jobs back in play, and send a
    late copy of each one's old dead letter (it must be acknowledged as stray)."""
    with run.lock:
        answers = list(run.rerun_answers)
        run.rerun_answers.clear()
    examples = run.examples
    for final, dry, done in answers:
        if done is None or done.status != 200:
            status = "no answer" if done is None else f"{done.status} {done.body}"
            examples["rerun_mismatches"].append(f"batch re-run answered {status}")
            continue
        run.reruns["pages"] += 1
        if final and (dry is None or dry.status != 200 or dry.body["matched"] != done.body["matched"]):
            counted = None if dry is None else dry.body.get("matched")
            took = done.body["matched"]
            examples["rerun_mismatches"].append(f"dry run counted {counted}, re-run took {took}")
        for job_id in done.body["rerun"]:
            job = run.by_id.get(job_id)
            if job is None:
                continue  # an older run's job (moto's state outlives a stack in one process)
            run.reruns["jobs"] += 1
            job.reruns += 1
            if job.last_error_class == CANCELLED:
                examples["rerun_mismatches"].append(f"{job_id}: re-ran a job its owner cancelled")
            if job.dead_lettered and run.target.send_dead_letter(job):
                run.injected["dead_letter_queue_after_rerun"] += 1
            run.finished.discard(job_id)
