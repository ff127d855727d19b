"""`aijobs soak`: a chaos soak that ends with an invariant report.

N jobs across several users and kinds, each with a magic-input fault of the `local` provider
(transient and throttled failures that recover, permanent failures, an outage that dead-letters,
an asynchronous provider still running, a slow provider, an attempt killed mid-way by `#crash`),
while the soak injects what at-least-once delivery and schedules do in production:

- copies of job messages on the main queues, some while the job is in flight, some after it
  finished (the row is the source of truth: a copy must change nothing);
- copies of succeeded jobs' messages on the dead-letter queues (must not become dead letters);
- overlapping double cron fires: each round fires `*/10` and `*/5` from two threads with the same
  scheduled time (must act once: expire, refund or re-queue once);
- short-lived credit grants that expire during the run;
- owners cancelling jobs mid-run (plain jobs and `image-batch` workflows), and `POST /classify`
  calls among the jobs (billed like jobs);
- batch re-runs by an operator (`POST /admin/reruns`), one during the run and a final round once
  every job finished, each final page counted by a dry run first; after each re-run, a late copy
  of the re-run jobs' old dead letters on their dead-letter queues (must be acknowledged as
  stray: the row decides whether a job is dead);
- a tenant with a running cap (its jobs wait held; the sweeper must not re-send a held row).

The report counts invariant violations (every one must be 0) next to plain figures. By default
the soak runs its own in-process local stack (stage `local`), wrapping every consumer's provider to
count provider runs per job. Against a deployed stage (`api_url`/`api_key`, plus `stack` for AWS
access) provider runs cannot be observed: they are approximated from the rows, and the report says
which checks were not measured.

With a `LoadPlan` the same soak is a load test: submissions paced at a rate, stopped by a duration
or a hard cap on jobs or spend, and a report of the throttles seen (API 429s, the rows' error
classes, CloudWatch's Lambda/DynamoDB/SQS metrics on a deployed stage) next to the capacity
model's prediction for the rate (`aijobs_cli.capacity`).
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

from aijobs import aws, runtime
from aijobs.consumer.attempts import Consumer
from aijobs.domain import QueueMessage, utcnow
from aijobs.providers.base import (
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    Provider,
    ProviderResult,
    SpeechRequest,
    TextRequest,
    TextResult,
    VideoRequest,
)
from aijobs.providers.local_directives import SimulatedCrash
from aijobs.settings import ConsumerSettings
from aijobs.store.jobs import JobStore
from aijobs.store.tenants import Directory
from aijobs_cli.target import Target, TargetError

SUCCEEDED = "succeeded"
FAILED_FINAL = "failed_final"
DEAD_LETTERED = "dead_lettered"
# A job its owner cancelled that ended `failed_final` / `cancelled` (one cancelled while its attempt
# ran may instead end `succeeded`: that attempt finished and was charged).
CANCELLED = "cancelled"
# Synchronous calls (`POST /classify`) mixed into the run: billed like jobs, answered at once.
CLASSIFY = "classify"
CLASSIFY_SHARE = 40  # one call per this many jobs
CRONS = ("*/10 * * * *", "*/5 * * * *")
SWEEPER = "*/5 * * * *"
# A workflow whose parent the soak cancels at a random moment: its children that succeeded are
# charged, the rest refunded (docs/concepts/credits.md).
WORKFLOW_KIND = "image-batch"
WORKFLOW_CHILD_KIND = "image-generate"
BATCH_CANCELLED = "batch-cancelled"
WORKFLOW_PARTS = 4
# The soak's tenant with a running cap (user index 1): its jobs of a kind run at most this many at
# once, the rest wait held (TENANT_HOLD_SECONDS, short in the soak so they come back in the run).
CAPPED_USER, RUNNING_CAP = 1, 2
SOAK_TENANT_HOLD_SECONDS = "3"
# A batch re-run page: the admin API sends re-runs at 5 per second, so a page must stay well under
# the client's 30 s timeout (the API's largest page, 200, takes 40 s and timed out in a 10,000-job
# run).
RERUN_PAGE = 50
# image-caption needs an uploaded image; every other kind takes text.
SOAK_KINDS = ("summary", "embedding", "image-generate", "tts-generate", "video-generate")
TEXTS = {
    "summary": "Queues decouple accepting work from doing it. The producer answers at once. "
    "A consumer does the slow part. Retries are classified by error.",
    "embedding": "vectors for a search index of queue design notes",
    "image-generate": "a red lighthouse at dusk",
    "tts-generate": "welcome to the chaos soak",
    "video-generate": "waves on a beach",
}
#: Seconds between a submission's tries when it got no answer (the last is not waited for).
SUBMIT_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 0.0)
#: An accepted job whose row is absent this long after its 202, at this many polls in a row, is lost.
MISSING_AFTER_SECONDS = 10.0
MISSING_POLLS = 3
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


@dataclass(frozen=True)
class Fault:
    name: str
    directive: str
    expect: str
    weight: int


FAULTS = (
    Fault("plain", "", SUCCEEDED, 34),
    Fault("transient-x2", "#fail:503x2", SUCCEEDED, 10),
    Fault("throttled-x1", "#fail:429x1", SUCCEEDED, 8),
    Fault("invalid-400", "#fail:400", FAILED_FINAL, 6),
    Fault("too-large-413", "#fail:413", FAILED_FINAL, 4),
    Fault("outage-503", "#fail:503", DEAD_LETTERED, 4),
    Fault("running-2", "#running:2", SUCCEEDED, 10),
    Fault("crash", "#crash", SUCCEEDED, 6),
    Fault("slow", "#sleep:0.2", SUCCEEDED, 8),
    # Reports a cost, so the spend the brake counts is checked against what the provider said.
    Fault("priced", "#cost:0.0125", SUCCEEDED, 6),
    # Cancelled by its owner at a random moment: queued (refunded) or mid-call (charged, succeeded).
    Fault("cancelled", "#sleep:1 #cost:0.002", CANCELLED, 5),
    # Dead-lettered by an outage that ends with an operator's re-run (`#outage`): the soak's batch
    # re-run brings it back, on the house, and it succeeds.
    Fault("outage-rerun", "#outage", SUCCEEDED, 3),
    # An `image-batch` of WORKFLOW_PARTS prompts its owner cancels within two seconds.
    Fault(BATCH_CANCELLED, "#sleep:0.4 #cost:0.001", CANCELLED, 3),
)


# The fault of a `POST /classify` call (not drawn into the job mix: there is one call per
# CLASSIFY_SHARE jobs, answered 200 and charged once).
CLASSIFY_CALL = Fault("classify-call", "", SUCCEEDED, 0)


@dataclass
class SoakJob:
    index: int
    user_id: str
    kind: str
    fault: Fault
    price: int
    job_id: str = ""
    accepted_at: float = 0.0
    finished_at: float | None = None
    status: str | None = None
    attempts: int = 0
    dead_lettered: bool = False
    missing: bool = False
    # Polls in a row that found no row for it (a row that vanishes must not stall the run).
    missing_polls: int = 0
    early_copy: float | None = None
    late_copy: bool = False
    dlq_copy: bool = False
    cost: float | None = None
    last_error_class: str | None = None
    usage_recorded: bool = False
    # Seconds after acceptance at which the soak cancels the job (the `cancelled` fault), and
    # the status the cancel was answered with.
    cancel_after: float | None = None
    cancel_status: int | None = None
    # From the row: what it reserved, whether an operator's re-run ran it on the house.
    reserved: int | None = None
    charge_waived: bool = False
    # How often the soak's batch re-runs took it, and its outcome when it was last re-run.
    reruns: int = 0
    # Seconds from its row's creation to its first attempt's start, for a job tried once.
    first_wait: float | None = None
    # A workflow parent's children, as their rows ended.
    children: list[ChildState] = field(default_factory=list)

    @property
    def outcome(self) -> str | None:
        if self.status == FAILED_FINAL and self.dead_lettered:
            return DEAD_LETTERED
        if self.status == FAILED_FINAL and self.last_error_class == CANCELLED:
            return CANCELLED
        return self.status

    def outcome_expected(self) -> bool:
        if self.fault.expect == CANCELLED:
            return self.outcome in (CANCELLED, SUCCEEDED)
        return self.outcome == self.fault.expect


@dataclass
class SoakUser:
    user_id: str
    api_key: str
    granted: int = 0
    short_grants: list[str] = field(default_factory=list)
    short_expiry: datetime | None = None
    # When the final cron round began: every short grant due by then must be expired.
    swept_at: datetime | None = None
    # Its own running cap (the capped tenant), else None.
    running_cap: int | None = None


@dataclass
class RowState:
    status: str
    attempts: int
    dead_lettered: bool
    #: The model spend recorded on the row (USD), when the target can read it.
    cost: float | None = None
    last_error_class: str | None = None
    usage_recorded: bool = False
    price: int | None = None
    charge_waived: bool = False
    #: Seconds from the row's creation to its attempt's start, when it was tried once (its wait in
    #: the queue: the backlog a message met), else None.
    first_wait: float | None = None


@dataclass(frozen=True)
class ChildState:
    job_id: str
    status: str
    cost: float | None
    usage_recorded: bool


@dataclass(frozen=True)
class DeadLetterState:
    """A dead-letter entry as an operator sees it: what became of it, and whether the default
    (open) list and count include it."""

    resolution: str
    listed_open: bool


@dataclass
class LedgerView:
    balance: int
    api_balance: int | None
    # type -> total, including transactions folded into the account by retention
    totals: dict[str, int]
    expired_since: int
    per_job: dict[str, Counter[str]]
    refund_amounts: dict[str, int]
    short_grants_unexpired: int
    debit_amounts: dict[str, int] = field(default_factory=dict)


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


# --- counting provider runs (local stack only) ------------------------------------------------------


class ProviderRuns:
    """Provider calls per job and how they ended, across every consumer thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        # The cost each successful call reported (USD), summed per job.
        self.costs: dict[str, float] = defaultdict(float)

    def record(self, job_id: str, outcome: str, cost: float | None = None) -> None:
        with self._lock:
            self.calls[job_id] += 1
            if outcome == SUCCEEDED:
                self.successes[job_id] += 1
                self.costs[job_id] += cost or 0.0
            elif outcome == "crash":
                self.crashes[job_id] += 1


class CountingProvider:
    """Wraps a consumer's provider: every run is counted per job, with its outcome."""

    def __init__(self, inner: Provider, runs: ProviderRuns) -> None:
        self.name = inner.name
        self.capabilities = inner.capabilities
        self._inner = inner
        self._runs = runs

    def _counted(self, method: str, request: Any) -> Any:
        job_id = request.call.job_id
        try:
            result = getattr(self._inner, method)(request)
        except SimulatedCrash:
            self._runs.record(job_id, "crash")
            raise
        except Exception:
            self._runs.record(job_id, "error")
            raise
        self._runs.record(job_id, getattr(result, "status", "succeeded"), getattr(result, "cost", None))
        return result

    def generate_text(self, request: TextRequest) -> TextResult:
        return cast(TextResult, self._counted("generate_text", request))

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return cast(EmbeddingResult, self._counted("embed", request))

    def generate_image(self, request: ImageRequest) -> ImageResult:
        return cast(ImageResult, self._counted("generate_image", request))

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("synthesize_speech", request))

    def start_video(self, request: VideoRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("start_video", request))

    def check_video(self, request: VideoRequest) -> ProviderResult:
        return cast(ProviderResult, self._counted("check_video", request))


@contextmanager
def counting_consumers(runs: ProviderRuns) -> Iterator[None]:
    """Every consumer the local stack builds meanwhile gets its provider wrapped."""
    original = runtime.build_consumer

    def build(settings: ConsumerSettings, clock: Callable[[], datetime] = utcnow) -> Consumer:
        consumer = original(settings, clock)
        consumer.provider = CountingProvider(consumer.provider, runs)
        return consumer

    runtime.build_consumer = build
    try:
        yield
    finally:
        runtime.build_consumer = original


# --- where the soak runs ------------------------------------------------------------------------


class SoakTarget(Protocol):
    label: str
    kinds: tuple[str, ...]
    prices: dict[str, int]
    max_attempts: int
    runs: ProviderRuns | None
    notes: list[str]

    def make_users(self, count: int, needs: dict[int, int], rng: random.Random) -> list[SoakUser]: ...
    def api(self, user: SoakUser) -> Target: ...
    def rows(self, jobs: list[SoakJob]) -> dict[str, RowState]: ...
    def send_copy(self, job: SoakJob, *, dead_letter_queue: bool) -> bool: ...
    def fire_cron(self, expression: str, scheduled: datetime) -> dict[str, Any] | None: ...
    def ledger(self, user: SoakUser) -> LedgerView | None: ...
    def dead_letters(self, job_ids: set[str]) -> dict[str, DeadLetterState] | None: ...
    def children(self, job: SoakJob) -> list[ChildState] | None: ...
    def operator_api(self) -> Target | None: ...
    def send_dead_letter(self, job: SoakJob) -> bool: ...
    def spend_counted(self, since: datetime) -> float | None: ...
    def messages_left(self) -> int | None: ...
    def stuck_after_seconds(self) -> int | None: ...
    def metrics(self, start: datetime, end: datetime) -> dict[str, float] | None: ...


class _StageAccess:
    """What the soak reads and injects through AWS APIs (moto locally, the account when deployed)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.directory: Directory = target.directory()

    def store(self, user_id: str) -> JobStore:
        table = self.directory.shard_for(user_id)
        if table is None:
            raise TargetError(f"user {user_id} has no shard")
        return self.directory.job_store(table)

    def rows(self, jobs: list[SoakJob]) -> dict[str, RowState]:
        """The rows of `jobs` that exist (one consistent read each: cheap for the few in flight)."""
        states: dict[str, RowState] = {}
        for job in jobs:
            row = self.store(job.user_id).get(job.user_id, job.job_id)
            if row is not None:
                states[job.job_id] = RowState(
                    row.status.value,
                    row.attempts,
                    row.dead_lettered,
                    row.cost,
                    row.last_error_class,
                    usage_recorded=bool(row.usage),
                    price=row.price,
                    charge_waived=row.charge_waived,
                    first_wait=(
                        (row.started_at - row.created_at).total_seconds()
                        if row.attempts == 1 and row.started_at is not None
                        else None
                    ),
                )
        return states

    def children(self, job: SoakJob) -> list[ChildState]:
        found = self.store(job.user_id).list_children(job.user_id, job.job_id, limit=None).jobs
        return [ChildState(c.job_id, c.status.value, c.cost, bool(c.usage)) for c in found]

    def send_copy(self, job: SoakJob, *, dead_letter_queue: bool, moved_by_consumer: bool = False) -> bool:
        urls = self.target.dlq_urls if dead_letter_queue else self.target.queue_urls
        if job.kind not in urls:
            return False
        body = QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind).model_dump_json()
        if moved_by_consumer:  # as our consumer moves a job whose budget is spent
            self.target.queues().send_to_dlq(body, kind=job.kind)
        else:
            aws.sqs().send_message(QueueUrl=urls[job.kind], MessageBody=body)
        return True

    def ledger(self, user: SoakUser, api_balance: int | None, since: datetime | None = None) -> LedgerView:
        """The user's ledger; `expired_since` counts expiry from `since` on (every one without)."""
        ledger = self.store(user.user_id).ledger
        account = ledger.account(user.user_id)
        totals = Counter(account.archived)
        per_job: dict[str, Counter[str]] = defaultdict(Counter)
        refunds: dict[str, int] = {}
        debits: dict[str, int] = {}
        expired_since = account.archived["expire"] if since is None else 0
        for tx in ledger.transactions(user.user_id):
            if not tx.folded:  # a folded row's amount is in the archived totals already
                totals[tx.type] += tx.amount
            if tx.type == "expire" and (tx.created_at >= since if since is not None else not tx.folded):
                expired_since += tx.amount
            if tx.job_id and tx.type in ("debit", "refund"):
                per_job[tx.job_id][tx.type] += 1
                if tx.type == "refund":
                    refunds[tx.job_id] = tx.amount
                else:
                    debits[tx.job_id] = tx.amount
        cutoff = user.swept_at or datetime.now(UTC)
        unexpired = sum(
            1
            for grant in ledger.grants(user.user_id)
            if grant.grant_id in user.short_grants and not grant.expired and grant.expires_at < cutoff
        )
        return LedgerView(
            account.balance, api_balance, dict(totals), expired_since, per_job, refunds, unexpired, debits
        )

    def dead_letters(self, job_ids: set[str]) -> dict[str, DeadLetterState]:
        """The entries of `job_ids` as the operator's list shows them: every one with what became
        of it (the listing settles each against its row), then which the default list still shows
        as open (what the console counts)."""
        operator = self.target.operator()
        kinds = list(self.target.queue_urls)
        every = operator.dead_letters(kinds, include_resolved=True, limit=10_000)
        still_open = {
            status.entry.job_id
            for status in operator.dead_letters(kinds, include_resolved=False, limit=10_000)
        }
        return {
            status.entry.job_id: DeadLetterState(status.resolution.value, status.entry.job_id in still_open)
            for status in every
            if status.entry.job_id in job_ids
        }

    def spend_counted(self, since: datetime, zone_name: str) -> float:
        """What the spend brake counted for the stage (USD) on the days from `since` to now, days
        as the brake counts them (midnight in the stage's SPEND_TIME_ZONE)."""
        from aijobs.bindings import time_zone
        from aijobs.spend import day_of
        from aijobs.store.spend import SpendRecords

        zone = time_zone(zone_name)
        days = {day_of(since, zone), day_of(datetime.now(UTC), zone)}
        records = SpendRecords(self.directory.meta)
        return float(sum(records.day_state(day).stage_usd for day in days))

    def messages_left(self) -> int:
        sqs, left = aws.sqs(), 0
        for url in (*self.target.queue_urls.values(), *self.target.dlq_urls.values()):
            attributes = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            left += sum(int(value) for value in attributes.values())
        return left


class LocalSoakTarget:
    """An in-process local stack started for the soak, with every consumer's provider counted.

    Use it as a context manager: it starts the stack, and stops it and restores the process
    environment (endpoint, credentials) when done.
    """

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        from aijobs_cdk.stage import load_stage_config
        from aijobs_cli.local_stack import LocalStack

        # A spend cap no soak reaches: the brake counts every job's cost, which the soak checks.
        # Short tenant holds: the capped tenant's held jobs come back within the run.
        defaults = {"SPEND_DAILY_CAP_USD": "1000000", "TENANT_HOLD_SECONDS": SOAK_TENANT_HOLD_SECONDS}
        self.config = load_stage_config("local", {**defaults, **(overrides or {})})
        self.label = "local stack (functions in-process, moto in its own process; stage local)"
        self.kinds = tuple(kind for kind in (*SOAK_KINDS, WORKFLOW_KIND) if kind in self.config.queue_names)
        self.prices = self.config.prices
        self.max_attempts = self.config.max_retries + 1
        self.runs: ProviderRuns | None = ProviderRuns()
        self.notes: list[str] = []
        # What the stack's pollers report (a crashed invocation is one line each).
        self.stack_log: list[str] = []
        self.stack = LocalStack(self.config, port=0, log=self.stack_log.append)
        self._exit = ExitStack()

    def __enter__(self) -> LocalSoakTarget:
        saved_env = dict(os.environ)

        def restore() -> None:
            os.environ.clear()
            os.environ.update(saved_env)
            runtime.reset_runtime()

        self._exit.callback(restore)
        assert self.runs is not None
        self._exit.enter_context(counting_consumers(self.runs))
        try:
            self._exit.enter_context(self.stack)
        except BaseException:
            self._exit.close()
            raise
        resources = self.stack.resources
        assert resources is not None
        self.target = Target(
            stage="local",
            api_url=self.stack.api_url,
            endpoint_url=self.stack.endpoint_url,
            meta_table=resources.meta_table,
            shard_tables=list(resources.shard_tables),
            queue_urls=dict(resources.queue_urls),
            dlq_urls=dict(resources.dlq_urls),
        )
        self.access = _StageAccess(self.target)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._exit.close()

    def make_users(self, count: int, needs: dict[int, int], rng: random.Random) -> list[SoakUser]:
        users = []
        for index in range(count):
            # Read per user: making twenty users on a busy machine took longer than a short grant
            # lives (5 s at least), and a grant that expired before it was made is refused.
            now = datetime.now(UTC)
            # Unique per run: the seed fixes the mix, not the ids (moto's state outlives a stack
            # started in the same process, and idempotency keys would return the old jobs).
            user_id = f"soak-{uuid.uuid4().hex[:8]}-{index:03d}"
            user = SoakUser(user_id, self.access.directory.create_api_key(user_id, label="soak"))
            ledger = self.access.store(user_id).ledger
            # Enough for every planned job on the long grant alone, so expiry never causes a 402.
            user.granted = needs.get(index, 0) + 10
            ledger.grant(user_id, user.granted, now + timedelta(days=1))
            if index % 3 == 0:  # some users also get credit that expires during the run
                amount = 10 + rng.randrange(20)
                expires = now + timedelta(seconds=5 + rng.uniform(0, 15))
                user.short_grants.append(ledger.grant(user_id, amount, expires))
                user.short_expiry = expires
                user.granted += amount
            if index == CAPPED_USER:
                self.access.directory.set_max_running(user_id, RUNNING_CAP)
                user.running_cap = RUNNING_CAP
            users.append(user)
        return users

    def api(self, user: SoakUser) -> Target:
        return Target(stage="local", api_url=self.target.api_url, api_key=user.api_key)

    def rows(self, jobs: list[SoakJob]) -> dict[str, RowState]:
        return self.access.rows(jobs)

    def send_copy(self, job: SoakJob, *, dead_letter_queue: bool) -> bool:
        return self.access.send_copy(job, dead_letter_queue=dead_letter_queue)

    def fire_cron(self, expression: str, scheduled: datetime) -> dict[str, Any] | None:
        return self.stack.fire_cron(expression, scheduled)

    def ledger(self, user: SoakUser) -> LedgerView | None:
        credits = self.api(user).request("GET", "/credits")
        api_balance = int(credits.body["balance"]) if credits.status == 200 else None
        return self.access.ledger(user, api_balance)

    def dead_letters(self, job_ids: set[str]) -> dict[str, DeadLetterState] | None:
        return self.access.dead_letters(job_ids)

    def children(self, job: SoakJob) -> list[ChildState] | None:
        return self.access.children(job)

    def operator_api(self) -> Target | None:
        return Target(stage="local", api_url=self.target.api_url, api_key=self.stack.admin_key)

    def send_dead_letter(self, job: SoakJob) -> bool:
        return self.access.send_copy(job, dead_letter_queue=True, moved_by_consumer=True)

    def messages_left(self) -> int | None:
        return self.access.messages_left()

    def stuck_after_seconds(self) -> int | None:
        return self.config.stuck_queued_seconds

    def spend_counted(self, since: datetime) -> float | None:
        return self.access.spend_counted(since, self.config.spend_time_zone)

    def metrics(self, start: datetime, end: datetime) -> dict[str, float] | None:
        return None  # the local stack publishes no Lambda, DynamoDB or SQS metrics


class DeployedSoakTarget:
    """A deployed stage through its HTTP API; with `stack`, also through AWS APIs.

    Not verified here (no AWS account in this project's test runs): keep it small and read the
    notes it adds to the report.
    """

    def __init__(self, api_url: str, api_key: str, stack: Target | None, max_retries: int) -> None:
        self.label = f"deployed stage at {api_url}"
        self.started_at = datetime.now(UTC)
        self.stack = stack
        self.caller = Target(stage="remote", api_url=api_url, api_key=api_key)
        credits = self.caller.request("GET", "/credits")
        if credits.status != 200:
            raise TargetError(f"GET /credits answered {credits.status}: check --api-url and --api-key")
        self.prices = {k: int(v) for k, v in credits.body["prices"].items()}
        self.kinds = tuple(kind for kind in SOAK_KINDS if kind in self.prices)
        self.max_attempts = max_retries + 1
        self.runs: ProviderRuns | None = None
        self.start_balance = int(credits.body["balance"])
        self.access = _StageAccess(stack) if stack is not None else None
        self.notes = [
            "deployed: provider runs are not observed; provider checks are not measured (n/a), "
            "and 'provider runs' figures are the rows' attempts",
            "deployed: one user (the API key's); no grants are made, the balance check compares "
            "the balance before and after the run (valid only if nothing else uses the account)",
        ]
        self.notes.append("deployed: no batch re-runs (the soak holds no operator key), no capped tenant")
        if self.access is None:
            self.notes.append(
                "deployed without --stack: no injected copies, no cron fires, no ledger or DLQ checks"
            )
        self.user_id = "caller"
        if self.access is not None:
            principal = self.access.directory.authenticate(api_key)
            if principal is None:
                raise TargetError("the API key is unknown to the stack's meta table")
            self.user_id = principal.user_id

    def make_users(self, count: int, needs: dict[int, int], rng: random.Random) -> list[SoakUser]:
        return [SoakUser(self.user_id, self.caller.api_key or "", granted=self.start_balance)]

    def api(self, user: SoakUser) -> Target:
        return self.caller

    def rows(self, jobs: list[SoakJob]) -> dict[str, RowState]:
        if self.access is not None:  # the rows themselves: they carry the recorded spend
            return self.access.rows(jobs)
        states: dict[str, RowState] = {}
        for job in jobs:
            response = self.caller.request("GET", f"/jobs/{job.job_id}")
            if response.status == 200:
                body = response.body
                states[job.job_id] = RowState(
                    body["status"], body["attempts"], body["deadLettered"], None, body.get("lastErrorClass")
                )
        return states

    def send_copy(self, job: SoakJob, *, dead_letter_queue: bool) -> bool:
        return self.access is not None and self.access.send_copy(job, dead_letter_queue=dead_letter_queue)

    def fire_cron(self, expression: str, scheduled: datetime) -> dict[str, Any] | None:
        if self.stack is None or not self.stack.cron_function:
            return None
        import json

        from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_SCHEDULED_TIME

        payload = {PAYLOAD_CRON: expression, PAYLOAD_SCHEDULED_TIME: scheduled.strftime("%Y-%m-%dT%H:%M:%SZ")}
        response = aws.lambda_().invoke(FunctionName=self.stack.cron_function, Payload=json.dumps(payload))
        result: dict[str, Any] = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            raise RuntimeError(f"cron function error: {result}")
        return result

    def ledger(self, user: SoakUser) -> LedgerView | None:
        credits = self.caller.request("GET", "/credits")
        api_balance = int(credits.body["balance"]) if credits.status == 200 else None
        if self.access is None:
            return None
        return self.access.ledger(user, api_balance, since=self.started_at)

    def dead_letters(self, job_ids: set[str]) -> dict[str, DeadLetterState] | None:
        return self.access.dead_letters(job_ids) if self.access is not None else None

    def children(self, job: SoakJob) -> list[ChildState] | None:
        return self.access.children(job) if self.access is not None else None

    def operator_api(self) -> Target | None:
        return None  # the soak holds a tenant's key only: no batch re-runs against a deployed stage

    def send_dead_letter(self, job: SoakJob) -> bool:
        return False

    def messages_left(self) -> int | None:
        # A deployed stage has other traffic; its queues never need to be empty for the soak.
        return None

    def stuck_after_seconds(self) -> int | None:
        return None  # the stage's setting is not read from here

    def spend_counted(self, since: datetime) -> float | None:
        return None  # other traffic counts too, and provider costs are not observed

    def metrics(self, start: datetime, end: datetime) -> dict[str, float] | None:
        """Throttles and peaks CloudWatch saw in the window (needs `stack`)."""
        if self.stack is None:
            return None
        import boto3

        queries = throttle_queries(self.stack)
        return fetch_metrics(boto3.client("cloudwatch", region_name=self.stack.region), queries, start, end)


# --- a paced load with hard caps ----------------------------------------------------------------


@dataclass(frozen=True)
class LoadPlan:
    """Submit at `rate` jobs/s (None: as fast as the workers go) for `duration_seconds`, never more
    than `max_jobs` jobs, and stop before the spend counted reaches `max_spend_usd`.

    The spend counted is, per submitted job, the larger of `cost_per_job_usd` (the operator's upper
    bound of one job's model spend) and the spend recorded on its row: it never goes down, so the
    cap holds whatever the jobs in flight turn out to cost, provided the bound holds.
    """

    max_jobs: int
    max_spend_usd: float | None = None
    cost_per_job_usd: float = 0.0
    rate: float | None = None
    duration_seconds: float | None = None

    def stop_reason(self, submitted: int, spend: float, elapsed: float) -> str | None:
        """Why no further job may be submitted (None: the next one may go)."""
        if submitted >= self.max_jobs:
            return "max_jobs"
        if self.max_spend_usd is not None and spend + self.cost_per_job_usd > self.max_spend_usd:
            return "max_spend"
        if self.duration_seconds is not None and elapsed >= self.duration_seconds:
            return "duration"
        return None


def counted_spend(jobs: list[SoakJob], cost_per_job_usd: float) -> float:
    """What the spend cap counts: each submitted job at the larger of the bound and its recorded cost."""
    return sum(max(cost_per_job_usd, job.cost or 0.0) for job in jobs)


class Pacer:
    """Submission slots at a fixed rate: slot n is due `n / rate` seconds after the first."""

    def __init__(self, rate: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()

    def wait(self, slot: int) -> None:
        due = self.start + slot / self.rate
        now = self.clock()
        if due > now:
            self.sleep(due - now)


def throttle_queries(target: Target) -> list[dict[str, Any]]:
    """CloudWatch `MetricDataQueries` for what throttles or piles up during a load test: Lambda
    `Throttles` per consumer and cron function and the account's peak `ConcurrentExecutions`,
    DynamoDB read/write throttle events per table and per global secondary index (the indexes the
    call profile writes), SQS peak in-flight messages and oldest message age per queue."""
    from aijobs_cdk.stage_config import queue_name_of
    from aijobs_cli.sizing.call_profile import default_profile

    indexes: dict[str, set[str]] = defaultdict(set)
    for path in default_profile().paths.values():
        for call in path.calls:
            for item in call.items:
                for entry in item.index_writes:
                    indexes[item.table].add(entry.index)
    metrics: list[tuple[str, str, str, list[dict[str, str]], str]] = []
    functions = [
        *target.consumer_functions.values(),
        *([target.cron_function] if target.cron_function else []),
    ]
    for function in functions:
        metrics.append(
            ("AWS/Lambda", "Throttles", "Sum", [{"Name": "FunctionName", "Value": function}], function)
        )
    metrics.append(("AWS/Lambda", "ConcurrentExecutions", "Maximum", [], "account"))
    tables = [("meta", target.meta_table)] if target.meta_table else []
    tables += [("shard", name) for name in target.shard_tables]
    for role, table in tables:
        for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
            metrics.append(("AWS/DynamoDB", metric, "Sum", [{"Name": "TableName", "Value": table}], table))
        for index in sorted(indexes.get(role, ())):
            dims = [
                {"Name": "TableName", "Value": table},
                {"Name": "GlobalSecondaryIndexName", "Value": index},
            ]
            metrics.append(("AWS/DynamoDB", "WriteThrottleEvents", "Sum", dims, f"{table}/{index}"))
    for url in [*target.queue_urls.values(), *target.dlq_urls.values()]:
        queue = queue_name_of(url)
        dims = [{"Name": "QueueName", "Value": queue}]
        for metric in ("ApproximateNumberOfMessagesNotVisible", "ApproximateAgeOfOldestMessage"):
            metrics.append(("AWS/SQS", metric, "Maximum", dims, queue))
    return [
        {
            "Id": f"m{number}",
            "Label": f"{namespace.removeprefix('AWS/')} {metric} {stat} {what}",
            "MetricStat": {
                "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
                "Period": 60,
                "Stat": stat,
            },
            "ReturnData": True,
        }
        for number, (namespace, metric, stat, dims, what) in enumerate(metrics)
    ]


def fetch_metrics(
    cloudwatch: Any, queries: list[dict[str, Any]], start: datetime, end: datetime
) -> dict[str, float]:
    """Each query's value over the window (a Sum adds the periods up, a Maximum takes the largest),
    by label; every page of `GetMetricData` is read, 500 queries per request."""
    stats = {query["Id"]: query["MetricStat"]["Stat"] for query in queries}
    labels = {query["Id"]: query["Label"] for query in queries}
    values: dict[str, list[float]] = defaultdict(list)
    for first in range(0, len(queries), 500):
        token: str | None = None
        while True:
            request: dict[str, Any] = {
                "MetricDataQueries": queries[first : first + 500],
                "StartTime": start,
                "EndTime": end,
                "ScanBy": "TimestampAscending",
            }
            if token:
                request["NextToken"] = token
            page = cloudwatch.get_metric_data(**request)
            for result in page.get("MetricDataResults", []):
                values[result["Id"]].extend(float(v) for v in result.get("Values", []))
            token = page.get("NextToken")
            if not token:
                break
    return {
        labels[key]: (sum(found) if stats[key] == "Sum" else max(found, default=0.0))
        for key, found in ((key, values.get(key, [])) for key in labels)
    }


# --- the soak -----------------------------------------------------------------------------------


@dataclass
class _Api:
    """HTTP answers, counted: every 5xx is an invariant violation."""

    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, target: Target, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        try:
            response = target.request(method, path, body, headers)
        except (TargetError, OSError) as error:  # no answer at all (a read timeout included)
            with self.lock:
                self.statuses[0] += 1
                self.errors.append(f"{method} {path}: {error}")
            return None
        with self.lock:
            self.statuses[response.status] += 1
            if response.status >= 500:
                self.errors.append(f"{method} {path}: {response.status} {response.body}")
        return response


def plan_jobs(
    count: int, users: int, kinds: tuple[str, ...], prices: dict[str, int], seed: int
) -> list[SoakJob]:
    """The seeded mix: every fault at least once (when count allows), then weighted at random."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible mix, not a secret
    weights = [fault.weight for fault in FAULTS]
    workflows = WORKFLOW_KIND in kinds
    kinds = tuple(kind for kind in kinds if kind != WORKFLOW_KIND)  # a workflow takes prompts
    jobs = []
    for index in range(count):
        fault = FAULTS[index] if index < len(FAULTS) else rng.choices(FAULTS, weights)[0]
        kind = kinds[index % len(kinds)] if index < len(kinds) else rng.choice(kinds)
        if fault.name == BATCH_CANCELLED:
            if not workflows:
                fault = next(f for f in FAULTS if f.name == "cancelled")
            else:
                kind = WORKFLOW_KIND
        price = prices.get(kind, 1)
        if kind == WORKFLOW_KIND:  # at most its base and one child price per prompt
            price += prices.get(WORKFLOW_CHILD_KIND, 1) * WORKFLOW_PARTS
        job = SoakJob(index=index, user_id="", kind=kind, fault=fault, price=price)
        job.user_id = str(index % users)  # the user's index until users exist
        if fault.name == BATCH_CANCELLED:
            # Before its split, between it and its children's calls, or while they run.
            job.cancel_after = rng.uniform(0.0, 2.0)
        elif fault.expect == CANCELLED:
            # Within the call's second: mid-call mostly (then charged), or while it still waits in
            # its batch behind others (then refunded).
            job.cancel_after = rng.uniform(0.0, 0.8)
        roll = rng.random()
        if roll < 0.15:
            job.early_copy = rng.uniform(0.05, 1.5)
        elif roll < 0.30:
            job.late_copy = True
        elif roll < 0.40 and fault.expect == SUCCEEDED:
            job.dlq_copy = True
        jobs.append(job)
    # Make sure every kind of injection happens at least once.
    if count >= 3:
        jobs[0].early_copy, jobs[1].late_copy, jobs[0].dlq_copy = 0.1, True, True
    return jobs


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
    say = progress or (lambda _line: None)
    rng = random.Random(seed ^ 0x5EED)  # noqa: S311 - reproducible, not a secret
    if load is not None:
        jobs = load.max_jobs
    plan = plan_jobs(jobs, users, target.kinds, target.prices, seed)
    if CLASSIFY in target.prices:
        # One call after every CLASSIFY_SHARE jobs, mixed into the run (a paced run that stops
        # at its cap of jobs must not cut them off at the end).
        calls = [
            SoakJob(index=jobs + n, user_id=str(n % users), kind=CLASSIFY, fault=CLASSIFY_CALL,
                    price=target.prices[CLASSIFY])
            for n in range(max(1, jobs // CLASSIFY_SHARE))
        ]  # fmt: skip
        for n, call in reversed(list(enumerate(calls))):
            plan.insert(min(len(plan), (n + 1) * CLASSIFY_SHARE), call)
    needs: dict[int, int] = Counter()
    for job in plan:
        needs[int(job.user_id)] += job.price
    people = target.make_users(users, dict(needs), rng)
    for job in plan:
        job.user_id = people[int(job.user_id) % len(people)].user_id
    by_user = {user.user_id: user for user in people}
    api = _Api()
    accepted: list[SoakJob] = []
    lock = threading.Lock()
    injected: Counter[str] = Counter()
    cron: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)

    timers: list[threading.Timer] = []
    resent_by_sweeper: list[str] = []
    operator = target.operator_api()
    # Answers of the batch re-runs (from their own thread during the run), for the loop to act on.
    rerun_answers: list[tuple[bool, Any, Any]] = []
    reruns: Counter[str] = Counter()

    def rerun_round(final: bool) -> None:
        """An operator's batch re-run of every soak kind's failed jobs (changed before now), page
        by page; in the final round each page is counted by a dry run first."""
        assert operator is not None
        until = datetime.now(UTC).isoformat()
        for kind in target.kinds:
            for _page in range(1000):
                body = {"kind": kind, "until": until, "limit": RERUN_PAGE}
                dry = api.call(operator, "POST", "/admin/reruns", {**body, "dryRun": True}) if final else None
                done = api.call(operator, "POST", "/admin/reruns", {**body, "dryRun": False})
                with lock:
                    rerun_answers.append((final, dry, done))
                if done is None or done.status != 200:
                    break
                # A page the API could not finish in its time names what it left: ask again.
                if done.body["matched"] < RERUN_PAGE and not done.body.get("notReached"):
                    break

    def cancel(job: SoakJob) -> None:
        response = api.call(target.api(by_user[job.user_id]), "POST", f"/jobs/{job.job_id}/cancel")
        job.cancel_status = response.status if response is not None else 0

    def submit(job: SoakJob) -> None:
        headers = {"Idempotency-Key": f"{job.user_id}-{job.index}"}
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
        # A client with an Idempotency-Key retries what got no answer (a timeout on a busy machine):
        # the same key must give the same job, or the same refusal, and charge once.
        for backoff in SUBMIT_BACKOFF:
            response = api.call(target.api(by_user[job.user_id]), "POST", path, body, headers)
            if response is not None and response.status == accepted_status:
                job.job_id, job.accepted_at = str(response.body["jobId"]), time.monotonic()
                with lock:
                    accepted.append(job)
                    if job.cancel_after is not None:
                        # On its own timer: a cancel due now must not wait for the soak's loop.
                        timer = threading.Timer(job.cancel_after, cancel, args=(job,))
                        timer.daemon = True
                        timers.append(timer)
                        timer.start()
                return
            if response is not None and response.status < 500:
                examples["api_rejections"].append(f"job #{job.index}: {response.status} {response.body}")
                return
            if halt.wait(backoff):
                return

    def fire_pair(expression: str) -> None:
        """Two overlapping fires of one scheduled run, as an at-least-once scheduler may deliver."""
        scheduled = datetime.now(UTC).replace(microsecond=0)
        results: list[dict[str, Any] | None] = [None, None]
        errors: list[str] = []

        def fire(slot: int) -> None:
            try:
                result = results[slot] = target.fire_cron(expression, scheduled)
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
        cron["errors"] += len(errors)
        examples["cron_errors"].extend(errors)
        if expression == SWEEPER:
            for result in results:
                if result is not None and result.get("status") == "ok":
                    resent_by_sweeper.extend(result.get("result", {}).get("resentJobs", []))
        if results[0] is None and results[1] is None and not errors:
            return  # the target cannot fire crons
        cron["pairs"] += 1
        if all(r is not None and r.get("status") == "ok" for r in results):
            cron["pairs_both_ran"] += 1

    started = time.monotonic()
    window_start = datetime.now(UTC)
    deadline = started + timeout_seconds
    say(f"soak: {jobs} jobs, {len(people)} users, seed {seed}, against {target.label}")
    pool = ThreadPoolExecutor(max_workers=submit_workers, thread_name_prefix="soak-submit")
    futures: list[Future[None]] = []
    submitted_jobs: list[SoakJob] = []
    stopped: list[str] = []
    fed, halt = threading.Event(), threading.Event()

    def feed(plan_load: LoadPlan) -> None:
        """Submit the plan paced and capped by `plan_load`; records why it stopped."""
        pacer = Pacer(plan_load.rate, clock, sleep) if plan_load.rate else None
        begun = clock()
        fed_jobs = 0
        try:
            for slot, job in enumerate(plan):
                if pacer is not None:
                    pacer.wait(slot)
                with lock:
                    spend = counted_spend(submitted_jobs, plan_load.cost_per_job_usd)
                if halt.is_set():
                    reason: str | None = "deadline"
                elif job.kind == CLASSIFY:  # the cap counts jobs: the calls mixed in do not use it up
                    reason = None
                else:
                    reason = plan_load.stop_reason(fed_jobs, spend, clock() - begun)
                if reason is not None:
                    stopped.append(reason)
                    return
                with lock:
                    submitted_jobs.append(job)
                    futures.append(pool.submit(submit, job))
                fed_jobs += job.kind != CLASSIFY
            stopped.append("max_jobs")
        finally:
            fed.set()

    feeder: threading.Thread | None = None
    if load is None:
        futures.extend(pool.submit(submit, job) for job in plan)
        fed.set()
    else:
        feeder = threading.Thread(target=feed, args=(load,), name="soak-feed", daemon=True)
        feeder.start()
    next_cron = started + cron_interval_seconds
    next_poll = started
    last_finished = started
    finished: set[str] = set()
    pending_early: set[str] = set()

    by_id: dict[str, SoakJob] = {}
    rerun_thread: threading.Thread | None = None
    final_rerun_done = operator is None

    def take_reruns() -> None:
        """Act on the re-runs' answers: check them, put the re-run jobs back in play, and send a
        late copy of each one's old dead letter (it must be acknowledged as stray)."""
        with lock:
            answers = list(rerun_answers)
            rerun_answers.clear()
        for final, dry, done in answers:
            if done is None or done.status != 200:
                status = "no answer" if done is None else f"{done.status} {done.body}"
                examples["rerun_mismatches"].append(f"batch re-run answered {status}")
                continue
            reruns["pages"] += 1
            if final and (dry is None or dry.status != 200 or dry.body["matched"] != done.body["matched"]):
                counted = None if dry is None else dry.body.get("matched")
                took = done.body["matched"]
                examples["rerun_mismatches"].append(f"dry run counted {counted}, re-run took {took}")
            for job_id in done.body["rerun"]:
                job = by_id.get(job_id)
                if job is None:
                    continue  # an older run's job (moto's state outlives a stack in one process)
                reruns["jobs"] += 1
                job.reruns += 1
                if job.last_error_class == CANCELLED:
                    examples["rerun_mismatches"].append(f"{job_id}: re-ran a job its owner cancelled")
                if job.dead_lettered and target.send_dead_letter(job):
                    injected["dead_letter_queue_after_rerun"] += 1
                finished.discard(job_id)

    last_line, next_say = "", started
    while time.monotonic() < deadline:
        now = time.monotonic()
        with lock:
            current = list(accepted)
        for job in current:
            by_id.setdefault(job.job_id, job)
        take_reruns()
        if operator is not None and rerun_thread is None and len(current) >= len(plan) // 2 and finished:
            rerun_thread = threading.Thread(target=rerun_round, args=(False,), name="soak-rerun", daemon=True)
            rerun_thread.start()
        for job in current:
            if (
                job.early_copy is not None
                and job.job_id not in pending_early
                and now >= job.accepted_at + job.early_copy
            ):
                pending_early.add(job.job_id)
                if target.send_copy(job, dead_letter_queue=False):
                    injected["main_queue_early"] += 1
        if now >= next_cron:
            for expression in CRONS:
                fire_pair(expression)
            next_cron = time.monotonic() + cron_interval_seconds
        if now >= next_poll:
            rows = target.rows([job for job in current if job.job_id not in finished])
            for job in current:
                row = rows.get(job.job_id)
                if job.job_id in finished:
                    continue
                if row is None and now - job.accepted_at > MISSING_AFTER_SECONDS:
                    # An accepted job has a row from before its 202: one gone for several polls is
                    # lost (reported as such), and the run goes on without it.
                    job.missing_polls += 1
                    if job.missing_polls >= MISSING_POLLS:
                        job.missing = True
                        finished.add(job.job_id)
                        say(f"  {job.job_id}: its row is gone (counted as lost)")
                    continue
                job.missing_polls = 0
                if row is None or row.status not in (SUCCEEDED, FAILED_FINAL):
                    continue
                finished.add(job.job_id)
                job.cost, job.status, job.last_error_class = row.cost, row.status, row.last_error_class
                job.dead_lettered = row.dead_lettered
                job.finished_at = last_finished = time.monotonic()
                if job.late_copy and target.send_copy(job, dead_letter_queue=False):
                    injected["main_queue_late"] += 1
                if job.dlq_copy and row.status == SUCCEEDED and target.send_copy(job, dead_letter_queue=True):
                    injected["dead_letter_queue"] += 1
            with lock:
                submitted = sum(future.done() for future in futures)
            line = f"  {len(finished)}/{len(current)} accepted jobs finished ({submitted}/{jobs} submitted)"
            if line != last_line and time.monotonic() >= next_say:
                say(line)
                last_line, next_say = line, time.monotonic() + 5.0
            next_poll = time.monotonic() + 2.0
        with lock:
            all_done = fed.is_set() and all(f.done() for f in futures)
        idle = rerun_thread is None or not rerun_thread.is_alive()
        if all_done and idle and not rerun_answers and len(finished) == len(accepted):
            if final_rerun_done:
                break
            say("  every job finished: a final batch re-run of the failed ones")
            rerun_round(final=True)
            final_rerun_done = True
            continue
        time.sleep(0.1)
    halt.set()
    if rerun_thread is not None:
        rerun_thread.join(timeout=60)
    take_reruns()
    if feeder is not None:
        feeder.join()
    pool.shutdown(wait=True, cancel_futures=True)
    for timer in list(timers):
        timer.join(timeout=30)
    for future in futures:  # a submission that raised is a bug of the soak itself: say so
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error
    finish_line = last_finished
    # A last double round after every job finished and every short grant fell due (it must
    # expire them), then let every injected copy be consumed before the checks.
    due = max((user.short_expiry for user in people if user.short_expiry), default=None)
    while due is not None and datetime.now(UTC) <= due and time.monotonic() < deadline:
        time.sleep(0.5)
    swept_at = datetime.now(UTC)
    for user in people:
        user.swept_at = swept_at
    for expression in CRONS:
        fire_pair(expression)
    left = target.messages_left()
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = target.messages_left()
    say(f"  queues settled ({left} message(s) left)" if left is not None else "  (queues not checked)")

    # --- the report --------------------------------------------------------------------------
    rows = target.rows(list(accepted))
    for job in accepted:
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
                job.children = target.children(job) or []
    invariants: dict[str, int | None] = dict.fromkeys(INVARIANTS, 0)

    def violate(name: str, what: str) -> None:
        count = invariants[name]
        invariants[name] = (count or 0) + 1
        if len(examples[name]) < 20:
            examples[name].append(what)

    for job in accepted:
        label = f"{job.job_id} ({job.kind}, {job.fault.name}, user {job.user_id})"
        if job.missing or job.status not in (SUCCEEDED, FAILED_FINAL):
            violate("jobs_lost", f"{label}: {'row missing' if job.missing else job.status}")
            continue
        if not job.outcome_expected():
            violate("wrong_terminal_status", f"{label}: {job.outcome}, expected {job.fault.expect}")
        if job.attempts > target.max_attempts:
            violate("attempts_over_budget", f"{label}: {job.attempts} attempts")
    runs = target.runs
    if runs is not None:
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
        _check_spend(target, accepted, runs, window_start, violate, invariants)
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
    capped = {user.user_id for user in people if user.running_cap is not None}
    for job_id in resent_by_sweeper:
        resent = by_id.get(job_id)
        if resent is not None and resent.user_id in capped:
            violate("held_rows_resent", f"{job_id} ({resent.kind}, {resent.fault.name}) of the capped tenant")
    invariants["api_5xx"] = sum(n for status, n in api.statuses.items() if status >= 500 or status == 0)
    examples["api_5xx"] = api.errors[:20]
    invariants["api_rejections"] = len(examples["api_rejections"])
    invariants["cron_errors"] = cron["errors"]
    _check_ledgers(target, people, accepted, invariants, violate)
    entries = target.dead_letters({job.job_id for job in accepted})
    if entries is None:
        invariants["dead_letter_mismatches"] = None
    else:
        _check_dead_letters(accepted, entries, violate)

    elapsed = max(finish_line - started, 1e-6)
    outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in plan:
        outcomes[job.fault.name][(job.outcome or ("not accepted" if not job.job_id else "unfinished"))] += 1
    plain = [job for job in accepted if job.kind != WORKFLOW_KIND]
    figures: dict[str, Any] = {
        "jobs_planned": jobs,
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
        "sweeper_resends": len(resent_by_sweeper),
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
        "short_grants": sum(len(user.short_grants) for user in people),
        "api_answers": {str(status): n for status, n in sorted(api.statuses.items())},
        "messages_left": left,
    }
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
        target=target.label,
        seed=seed,
        jobs=figures["jobs_accepted"],
        users=len(people),
        duration_seconds=round(time.monotonic() - started, 1),
        jobs_per_second=round(figures["jobs_accepted"] / elapsed, 2),
        invariants=invariants,
        figures=figures,
        outcomes={name: dict(counts) for name, counts in outcomes.items()},
        examples={name: lines for name, lines in examples.items() if lines},
        notes=[*target.notes, *_backlog_note(target, figures["longest_queue_wait_seconds"])],
    )
    if load is not None:
        report.load = _load_report(
            target, load, stopped[0] if stopped else "deadline", submitted_jobs, accepted, api,
            window_start, capacity_inputs, len(people), report.jobs_per_second,
        )  # fmt: skip
    return report


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
    api: _Api,
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
