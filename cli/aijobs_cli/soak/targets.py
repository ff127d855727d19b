"""Where the soak runs: the `SoakTarget` protocol the run loop talks to, what it reads and injects
through AWS APIs (moto locally, the account when deployed), the in-process local stack started for
the soak (`LocalSoakTarget`) and a deployed stage (`DeployedSoakTarget`)."""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aijobs import aws, runtime
from aijobs.domain import QueueMessage
from aijobs.store.jobs import JobStore
from aijobs.store.tenants import Directory
from aijobs_cli.soak.counting import ProviderRuns, counting_consumers
from aijobs_cli.soak.load import fetch_metrics, throttle_queries
from aijobs_cli.soak.observed import ChildState, DeadLetterState, LedgerView, RowState
from aijobs_cli.soak.workload import (
    CAPPED_USER,
    RUNNING_CAP,
    SOAK_KINDS,
    SOAK_TENANT_HOLD_SECONDS,
    WORKFLOW_KIND,
    SoakJob,
    SoakUser,
)
from aijobs_cli.target import Target, TargetError


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
        from aijobs_cli.local.stack import LocalStack

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
