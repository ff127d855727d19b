"""Operator actions (docs/design.md §5): re-run one job, re-run a filtered batch, mark a job failed_final,
and the dead-letter list with what became of each entry.

A re-run resets the attempt budget, sets `queued` and re-sends the reference; nothing else ever
executes a `failed_final` job again. It never charges the tenant again: a job refunded at its
final failure runs on the house, and its row says so (`charge_waived`). The CLI and the admin API
wrap these functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from botocore.exceptions import ClientError

from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import CANCELLED, FAILED_BY_OPERATOR, NotFoundError, TransitionConflict
from aijobs.job_end import job_ended
from aijobs.observability import logger
from aijobs.provider_plan import CLASSIFY
from aijobs.queues import JobQueues
from aijobs.store.dead_letter_records import (
    DeadLetter,
    DeadLetterStatus,
    ListPart,
    count_dead_letters,
    list_dead_letters,
    mark_rerun,
    settle,
)
from aijobs.store.job_items import PHASE_CHILDREN
from aijobs.store.jobs import JobStore
from aijobs.store.tenants import Directory
from aijobs.workflows.fanin import MERGE_HOLD, try_merge

# Statuses an operator may re-run. `failed_retryable` covers a job stranded between attempts.
RERUNNABLE = (JobStatus.FAILED_FINAL, JobStatus.FAILED_RETRYABLE)
# Somebody ended these on purpose: a batch re-run leaves them alone unless its error class names them.
DELIBERATE_ENDS = (CANCELLED, FAILED_BY_OPERATOR)
# A batch re-run passes over a workflow child whose parent no longer waits (re-run the parent).
PARENT_NOT_WAITING = "parent_not_waiting"
# A dead-letter view that settles entries re-reads the list to fill its page, at most this often.
_LIST_ROUNDS = 3


@dataclass(frozen=True)
class RerunSelection:
    """The jobs a batch re-run takes, oldest change first, and how many it passed over, by reason
    (an error class in DELIBERATE_ENDS, or PARENT_NOT_WAITING), on its way to the limit."""

    jobs: list[Job]
    left_alone: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchRerun:
    """What a batch re-run matched and did (with `dry_run`, only `matched` and `left_alone`).

    `waived`: the re-run jobs that run on the house (their price was refunded when they failed).
    `not_reached`: selected, but left as they are because the caller's time ran out first (the
    API's function must answer before its timeout): the same request takes them next time."""

    matched: int
    rerun: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dry_run: bool = False
    left_alone: dict[str, int] = field(default_factory=dict)
    waived: list[str] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)


#: A batch re-run stops while this much of its caller's time is left: one more re-run (a few
#: DynamoDB writes and a send) and the answer fit in it.
RERUN_MARGIN_SECONDS = 3.0


@dataclass
class Operator:
    directory: Directory
    queues: JobQueues
    clock: Callable[[], datetime]
    sleep: Callable[[float], None] = time.sleep

    def _store(self, user_id: str) -> JobStore:
        table = self.directory.shard_for(user_id)
        if table is None:
            raise NotFoundError(f"no user {user_id!r}")
        return self.directory.job_store(table, self.clock)

    def _job(self, user_id: str, job_id: str) -> tuple[JobStore, Job]:
        store = self._store(user_id)
        job = store.get(user_id, job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r} for user {user_id!r}")
        return store, job

    def rerun(self, user_id: str, job_id: str) -> Job:
        """Re-run one job: fresh attempt budget, `queued`, reference re-sent.

        A workflow parent re-runs only its failed children, then merges again; a child alone is
        re-run only while its parent still waits for children (else re-run the parent).
        """
        store, job = self._job(user_id, job_id)
        if job.kind == CLASSIFY:  # its caller was answered (or refunded) already; it has no queue
            raise TransitionConflict(f"job {job_id} is a synchronous {CLASSIFY} call: it cannot be re-run")
        if job.is_parent and job.children_failed and job.status in (*RERUNNABLE, JobStatus.SUCCEEDED):
            return self._rerun_parent(store, job)
        if job.parent_id is not None:
            child = store.requeue_child(job, now=self.clock(), parent_must_wait=True)
            self.queues.send(QueueMessage(jobId=job.job_id, userId=user_id, kind=job.kind), kind=job.kind)
            self._mark_rerun(child)
            logger.info("operator re-run of a child", extra={"jobId": job_id, "parentId": job.parent_id})
            return child
        queued = store.requeue(job, now=self.clock(), allowed_from=RERUNNABLE)
        try:
            self.queues.send(QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind), kind=job.kind)
        except Exception:
            store.fail_final(
                queued, now=self.clock(), error_class="enqueue_failed", message="re-run could not be queued",
                own_claim=False,
            )  # fmt: skip
            raise
        self._mark_rerun(queued)
        logger.info(
            "operator re-run",
            extra={"jobId": job.job_id, "userId": user_id, "kind": job.kind, **_charge(queued)},
        )
        return queued

    def _rerun_parent(self, store: JobStore, parent: Job) -> Job:
        """Re-run a parent's `failed_final` children (each no longer counted as failed, in its own
        transaction), reopen the parent to wait for them, send them, and merge again."""
        now = self.clock()
        failed = store.list_children(
            parent.user_id, parent.job_id, status=JobStatus.FAILED_FINAL, limit=None
        ).jobs
        requeued: list[Job] = []
        for child in failed:
            try:
                requeued.append(store.requeue_child(child, now=now, parent_must_wait=False))
            except TransitionConflict:
                continue  # re-run or finished meanwhile
        reopened = store.reopen_parent(
            parent, now=now, phase=PHASE_CHILDREN, hold=MERGE_HOLD,
            allowed_from=(*RERUNNABLE, JobStatus.SUCCEEDED),
        )  # fmt: skip
        if requeued:
            self.queues.send_batch(
                [QueueMessage(jobId=c.job_id, userId=c.user_id, kind=c.kind) for c in requeued],
                kind=requeued[0].kind,
            )
        for job in (*requeued, reopened):
            self._mark_rerun(job)
        # Nothing left to wait for (the failed children finished meanwhile): merge now.
        try_merge(store, self.queues, parent.user_id, parent.job_id, self.clock())
        logger.info(
            "operator re-run of a workflow",
            extra={
                "jobId": parent.job_id, "userId": parent.user_id, "childrenRerun": len(requeued),
                **_charge(reopened),
            },
        )  # fmt: skip
        return reopened

    def _mark_rerun(self, job: Job) -> None:
        """Move the job's dead-letter entry (if it has one) to the re-run part of the list. The
        re-run has happened by now: a failed write only delays the list, whose next read of the
        row moves the entry all the same."""
        try:
            mark_rerun(self.directory.meta, job, self.clock())
        except ClientError as error:
            logger.warning(
                "dead-letter entry not marked re-run; the list settles it from the row",
                extra={"jobId": job.job_id, "error": error.response["Error"]["Code"]},
            )

    def fail_final(self, user_id: str, job_id: str, reason: str) -> Job:
        """Give up on a job for good (worthless or clearly bad input)."""
        store, job = self._job(user_id, job_id)
        finished = store.fail_final(
            job, now=self.clock(), error_class=FAILED_BY_OPERATOR, message=reason, own_claim=False
        )
        job_ended(store, self.queues, finished, self.clock())
        logger.info("operator marked job failed_final", extra={"jobId": job_id, "userId": user_id})
        return finished

    def find(
        self,
        kind: str,
        *,
        statuses: Sequence[JobStatus] = (JobStatus.FAILED_FINAL,),
        error_class: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[Job]:
        """Jobs of a kind across every active shard, by status, error class and last-change window."""
        jobs: list[Job] = []
        for index in self.directory.active_shards():
            store = self.directory.job_store(self.directory.shard_tables[index], self.clock)
            for status in statuses:
                found = store.query_kind_status(kind, status, after=since, before=until)
                jobs.extend(
                    job for job in found if error_class is None or job.last_error_class == error_class
                )
        return sorted(jobs, key=lambda job: job.updated_at)

    def select_for_rerun(
        self,
        kind: str,
        *,
        error_class: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
    ) -> RerunSelection:
        """The `failed_final` jobs a batch re-run takes: its dry run counts exactly these.

        Without `error_class`, jobs ended on purpose (cancelled by their owner, failed by an
        operator) are left alone; naming their class re-runs them. A workflow child is taken only
        while its parent still waits for children (one read per distinct parent): else its own
        re-run would be refused, and its parent's re-run is the one that re-runs it.
        """
        selected: list[Job] = []
        left_alone: dict[str, int] = {}
        waiting: dict[tuple[str, str], bool] = {}
        for job in self.find(kind, error_class=error_class, since=since, until=until):
            if limit is not None and len(selected) >= limit:
                break
            reason: str | None = None
            if error_class is None and job.last_error_class in DELIBERATE_ENDS:
                reason = job.last_error_class
            elif job.parent_id is not None and not self._parent_waits(job, waiting):
                reason = PARENT_NOT_WAITING
            if reason is None:
                selected.append(job)
            else:
                left_alone[reason] = left_alone.get(reason, 0) + 1
        return RerunSelection(jobs=selected, left_alone=left_alone)

    def _parent_waits(self, child: Job, seen: dict[tuple[str, str], bool]) -> bool:
        assert child.parent_id is not None
        key = (child.user_id, child.parent_id)
        if key not in seen:
            parent = self._store(child.user_id).get(child.user_id, child.parent_id)
            seen[key] = (
                parent is not None and parent.status is JobStatus.RUNNING and parent.phase == PHASE_CHILDREN
            )
        return seen[key]

    def rerun_batch(
        self,
        kind: str,
        *,
        error_class: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        dry_run: bool = True,
        rate_per_second: float = 5.0,
        limit: int | None = None,
        seconds_left: Callable[[], float] | None = None,
    ) -> BatchRerun:
        """Re-run the jobs `select_for_rerun` takes, after a fix; a dry run only counts them.

        Sends are spaced to `rate_per_second` so a large replay does not stampede the provider.
        With `seconds_left` (the caller's remaining time), it stops RERUN_MARGIN_SECONDS before the
        end and reports the jobs it did not reach, untouched, instead of being cut off mid-way
        with no answer (the API's function times out at 25 s, API Gateway at 29 s).
        """
        if rate_per_second <= 0:
            raise ValueError("rate_per_second must be positive")
        selection = self.select_for_rerun(
            kind, error_class=error_class, since=since, until=until, limit=limit
        )
        jobs = selection.jobs
        if dry_run:
            return BatchRerun(matched=len(jobs), dry_run=True, left_alone=selection.left_alone)
        report = BatchRerun(matched=len(jobs), left_alone=selection.left_alone)
        for index, job in enumerate(jobs):
            if index:
                self.sleep(1.0 / rate_per_second)
            if seconds_left is not None and seconds_left() < RERUN_MARGIN_SECONDS:
                report.not_reached.extend(later.job_id for later in jobs[index:])
                break
            try:
                queued = self.rerun(job.user_id, job.job_id)
            except TransitionConflict:
                report.skipped.append(job.job_id)  # changed since it was listed
                continue
            report.rerun.append(job.job_id)
            if queued.charge_waived:
                report.waived.append(job.job_id)
        return report

    # --- the dead-letter list ----------------------------------------------------------------------

    def dead_letters(
        self, kinds: Sequence[str], *, include_resolved: bool = False, limit: int = 50
    ) -> list[DeadLetterStatus]:
        """Dead letters of `kinds`, newest first, each with its job's row now and what became of
        it; only the open ones unless `include_resolved`.

        Reads the row of each entry it shows (at most `limit` per round), and moves entries whose
        row resolved them out of the open part of the list; when that leaves the page short, it
        reads the list again, at most _LIST_ROUNDS times (so at most _LIST_ROUNDS x `limit` rows).
        """
        parts = tuple(ListPart) if include_resolved else (ListPart.OPEN, ListPart.RERUN)
        shown: list[DeadLetterStatus] = []
        seen: set[tuple[str, str]] = set()
        for _round in range(_LIST_ROUNDS):
            entries: list[DeadLetter] = []
            full = False
            for kind in kinds:
                found = list_dead_letters(self.directory.meta, kind, limit=limit, parts=parts)
                full = full or len(found) == limit
                entries.extend(e for e in found if (e.kind, e.job_id) not in seen)
            entries.sort(key=lambda entry: entry.sort_key, reverse=True)
            full = full or len(entries) > limit
            dropped = False
            for entry in entries[:limit]:
                seen.add((entry.kind, entry.job_id))
                status = self._settle(entry)
                if include_resolved or status.resolution.is_open:
                    shown.append(status)
                    if len(shown) == limit:
                        return _newest_first(shown)
                else:
                    dropped = True
            if not (dropped and full):
                break
        return _newest_first(shown)

    def open_dead_letters(self, kind: str, *, cap: int = 100) -> int:
        """How many of a kind's dead letters are open, counted up to `cap`: the untouched ones by an
        index count (no row read: only a re-run changes a dead-lettered row), plus the re-run ones
        whose row (read, at most `cap` of them) has not resolved them yet."""
        rerun = list_dead_letters(self.directory.meta, kind, limit=cap, parts=(ListPart.RERUN,))
        still_open = sum(1 for entry in rerun if self._settle(entry).resolution.is_open)
        return min(cap, still_open + count_dead_letters(self.directory.meta, kind, ListPart.OPEN, cap=cap))

    def _settle(self, entry: DeadLetter) -> DeadLetterStatus:
        job = None
        if entry.user_id is not None:
            table = self.directory.shard_for(entry.user_id)
            if table is not None:
                job = self.directory.job_store(table, self.clock).get(entry.user_id, entry.job_id)
        return settle(self.directory.meta, entry, job, self.clock())


def _newest_first(statuses: list[DeadLetterStatus]) -> list[DeadLetterStatus]:
    return sorted(statuses, key=lambda status: status.entry.sort_key, reverse=True)


def _charge(job: Job) -> dict[str, object]:
    """A re-run's charge as logged (billing reconciles from it): on the house, or as reserved."""
    return {"chargeState": job.charge_state, "chargeWaived": job.charge_waived, "price": job.price}
