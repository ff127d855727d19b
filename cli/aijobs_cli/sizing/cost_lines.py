"""The per-line pricing steps of `aijobs cost` (`aijobs_cli.sizing.cost.estimate`): one step per
service, each adding its billable lines, in the order the estimate prints them, to the month's
`Ledger`; and the arithmetic they share with the estimate (SQS's 64 KB chunks, batched calls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from aijobs_cli.sizing.call_profile import PathProfile

if TYPE_CHECKING:
    from aijobs_cli.sizing.call_profile import CallProfile
    from aijobs_cli.sizing.cost import PriceTable, Workload

#: SQS bills each 64 KB chunk of a request's payload as one request; Cloudflare Queues bills each
#: 64 KB written, read or deleted as one operation.
CHUNK_KB = 64
#: Messages one ReceiveMessage call can return, and entries one DeleteMessageBatch can hold.
SQS_MAX_MESSAGES_PER_CALL = 10
#: WaitTimeSeconds of the event-source mapping's long polls (the SQS maximum; Lambda uses it).
LONG_POLL_SECONDS = 20
#: The price quantities are per this many units.
MILLION = 1_000_000
THOUSAND = 1_000
#: Services of the call profile the estimate prices (others are listed as unpriced calls).
PRICED_SERVICES = frozenset({"dynamodb", "sqs", "s3", "sns"})
KB_PER_GB = 1024 * 1024

#: (path name, its calls, runs per month, fixed cost?) -- every measured path the month runs.
Run = tuple[str, PathProfile, int, bool]


class CostLine(BaseModel):
    """One billable item: `monthly_usd = quantity / price_basis * unit_price`."""

    model_config = ConfigDict(frozen=True)

    service: str
    item: str
    quantity: float
    unit: str
    #: USD per `price_basis` units (the number as it appears on the pricing page).
    unit_price: float
    price_basis: int = 1
    monthly_usd: float
    how: str
    #: A cost that does not grow with the jobs (empty polls, crons).
    fixed: bool = False


# --- arithmetic helpers -----------------------------------------------------------------------


def share(total: int, rate: float) -> int:
    """`total * rate` rounded half up, in decimal so 20,000 x 0.05 is exactly 1,000."""
    return int((Decimal(total) * Decimal(str(rate))).to_integral_value(rounding=ROUND_HALF_UP))


def chunks(payload_kb: Decimal) -> int:
    """64 KB chunks billed for a payload (at least one)."""
    return max(1, math.ceil(payload_kb / CHUNK_KB))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def batched_calls(messages: int, per_call: int) -> int:
    return ceil_div(messages, per_call) if messages else 0


def receive_requests(messages: int, per_call: int, message_kb: float) -> int:
    """Billed requests of the ReceiveMessage calls returning `messages`, `per_call` at a time.

    Each call is billed per 64 KB chunk of its whole payload (all returned messages together).
    """
    kb = Decimal(str(message_kb))
    full, rest = divmod(messages, per_call)
    return full * chunks(kb * per_call) + (chunks(kb * rest) if rest else 0)


def poll_reads(wait_seconds: float) -> int:
    """Row reads of one `GET /jobs/{id}?wait=` that waits `wait_seconds` for its job: one at once,
    then one after each of the API's pauses (LONG_POLL_BACKOFF, the last repeating) that starts
    inside the wait (`JobService.wait_for`)."""
    from aijobs.api.service import LONG_POLL_BACKOFF

    reads, waited = 1, 0.0
    pauses = iter(LONG_POLL_BACKOFF)
    pause = LONG_POLL_BACKOFF[0]
    while waited < wait_seconds:
        pause = next(pauses, pause)
        waited += pause
        reads += 1
    return reads


def gb_seconds(count: int, seconds: float, memory_mb: int) -> float:
    return count * seconds * memory_mb / 1024


def derivation(parts: list[tuple[str, int, Any]], unit: str = "") -> str:
    """How a line's quantity adds up: `runs path x per run` for each part."""
    return " + ".join(f"{count:,} {name} x {each:g}{unit}" for name, count, each in parts) or "none"


# --- the month's runs and lines ------------------------------------------------------------------------


def path_counts(w: Workload) -> dict[str, int]:
    """How many times each measured path runs in the month (crons apart)."""
    idempotent = share(w.jobs_per_month, w.idempotency_key_rate)
    hooked = share(w.first_try_jobs, w.webhook_rate)
    return {
        "producer.submit": w.jobs_per_month - idempotent,
        "producer.submit_idempotent": idempotent,
        "producer.poll": share(w.jobs_per_month, w.status_polls_per_job) * poll_reads(w.poll_wait_seconds),
        "consumer.success": w.first_try_jobs - hooked,
        "consumer.success_webhook": hooked,
        "webhook.delivery": webhook_deliveries(w),
        "consumer.retry": w.retries,
        "consumer.success_after_retry": w.recovered_jobs,
        "consumer.dead_letter": w.dead_lettered_jobs,
        "consumer.failed_final": w.failed_final_jobs,
        "dlq.dead_letter": w.dead_lettered_jobs,
    }


def webhook_deliveries(w: Workload) -> int:
    """Webhook deliveries in the month: one per finished job that named a callbackUrl. Only a
    first-try success's send to the delivery queue is measured (`consumer.success_webhook`); the
    other fates' sends (a few percent of the jobs) are left out."""
    return share(w.jobs_per_month, w.webhook_rate)


def _cron_share(path: PathProfile, w: Workload) -> list[tuple[PathProfile, int, str]]:
    """A cron path split by how its calls repeat: (calls, repeats per run, why)."""
    per_run = [c for c in path.calls if c.table != "shard"]
    per_kind = [c for c in path.calls if c.table == "shard" and (c.partition or "").startswith("KIND#")]
    per_shard = [c for c in path.calls if c.table == "shard" and c not in per_kind]
    parts = [
        (per_run, 1, "per run"),
        (per_shard, w.shard_count, f"x {w.shard_count} shard(s)"),
        (per_kind, w.shard_count * w.queues, f"x {w.shard_count} shard(s) x {w.queues} kinds"),
    ]
    return [(PathProfile(description=why, calls=tuple(calls)), n, why) for calls, n, why in parts if calls]


def month_runs(w: Workload, profile: CallProfile) -> tuple[list[Run], int, list[str]]:
    """Every measured path the month runs, the cron runs in all, and the crons the profile lacks."""
    # A path the month never runs may be missing from an older or hand-made profile (webhooks).
    runs: list[Run] = [
        (name, profile.path(name), count, False)
        for name, count in path_counts(w).items()
        if count or name in profile.paths
    ]
    cron_runs_total = 0
    estimated_crons = []
    for expression, per_hour in w.cron_runs.items():
        fired = round(per_hour * w.hours_per_month)
        cron_runs_total += fired
        path, estimated = profile.cron_or_estimate(expression)
        note = "estimated: the dispatcher's own calls, " if estimated else ""
        if estimated:
            estimated_crons.append(expression)
        for part, repeats, why in _cron_share(path, w):
            runs.append((f"cron {expression} ({note}{why})", part, fired * repeats, True))
    return runs, cron_runs_total, estimated_crons


@dataclass
class Ledger:
    """The month being priced: its workload, prices and path runs, and the lines added so far."""

    workload: Workload
    prices: PriceTable
    runs: list[Run]
    cron_runs_total: int
    lines: list[CostLine] = field(default_factory=list)

    @property
    def per_message(self) -> int:
        return chunks(Decimal(str(self.workload.message_kb)))

    @property
    def per_call(self) -> int:
        """Messages per ReceiveMessage, and entries per DeleteMessageBatch."""
        return min(self.workload.batch_size, SQS_MAX_MESSAGES_PER_CALL)

    @property
    def polls(self) -> int:
        return share(self.workload.jobs_per_month, self.workload.status_polls_per_job)

    @property
    def api_calls(self) -> int:
        return self.workload.jobs_per_month + self.polls

    @property
    def cron_note(self) -> str:
        return ", ".join(f"{e!r} {r:g}/h" for e, r in self.workload.cron_runs.items()) or "no CRONS"

    def add(
        self,
        service: str,
        item: str,
        quantity: float,
        unit: str,
        unit_price: float,
        basis: int,
        how: str,
        fixed: bool = False,
    ) -> None:
        self.lines.append(
            CostLine(
                service=service, item=item, quantity=quantity, unit=unit, unit_price=unit_price,
                price_basis=basis, monthly_usd=quantity / basis * unit_price, how=how, fixed=fixed,
            )
        )  # fmt: skip

    def tally(
        self, service: str, operation: str | None = None, role: str | None = None
    ) -> list[tuple[str, int, int]]:
        """(path, runs, requests per run) of every path calling `service` [`operation` on `role`]."""
        found = []
        per_message = self.per_message
        for name, path, count, _ in self.runs:
            calls = [
                c for c in path.calls
                if c.service == service and operation in (None, c.operation) and role in (None, c.table)
            ]  # fmt: skip
            chunked = sum(per_message if c.carries_message else c.requests for c in calls)
            if calls and count:
                found.append((name, count, chunked))
        return found


def sqs_lines(ledger: Ledger) -> None:
    """SQS: the functions' own requests, as measured."""
    w, sqs, per_message = ledger.workload, ledger.prices.sqs_standard_per_million_requests, ledger.per_message
    sends = ledger.tally("sqs", "SendMessage", "queue")
    ledger.add(
        "SQS", "SendMessage (submits, webhook deliveries, re-check re-sends)",
        sum(c * r for _, c, r in sends) + w.rechecks * per_message, "requests", sqs, MILLION,
        f"{derivation(sends)} + {w.rechecks:,} re-checks x {per_message}; each {w.message_kb:g} KB "
        f"message is {per_message} chunk(s) of 64 KB; retries re-receive, never re-send",
    )  # fmt: skip
    seen = {("SendMessage", "queue")}
    for _, path, _, _ in ledger.runs:
        for call in path.calls:
            key = (call.operation, call.table or "")
            if call.service != "sqs" or key in seen:
                continue
            seen.add(key)
            found = ledger.tally("sqs", call.operation, call.table)
            item = {
                ("ChangeMessageVisibility", "queue"): "ChangeMessageVisibility (retry back-off)",
                ("SendMessage", "dlq"): "SendMessage to DLQ",
            }.get(key, f"{call.operation} ({call.table})")
            ledger.add(
                "SQS", item, sum(c * r for _, c, r in found), "requests", sqs, MILLION, derivation(found)
            )


def sqs_mapping_lines(ledger: Ledger) -> None:
    """SQS: what the event-source mappings do (receives, acks, empty long polls)."""
    w, sqs, per_call = ledger.workload, ledger.prices.sqs_standard_per_million_requests, ledger.per_call
    jobs, dlq, deliveries, hours = w.jobs_per_month, w.dead_lettered_jobs, w.deliveries, w.hours_per_month
    ledger.add(
        "SQS", "ReceiveMessage (consumer, with messages)",
        receive_requests(deliveries, per_call, w.message_kb), "requests", sqs, MILLION,
        f"{deliveries:,} deliveries ({jobs:,} + {w.retries:,} retries + {w.rechecks:,} re-checks) / "
        f"{per_call} per call, each call billed per 64 KB of its payload",
    )  # fmt: skip
    deleted = jobs + w.rechecks
    ledger.add(
        "SQS", "DeleteMessageBatch (consumer acks)", batched_calls(deleted, per_call), "requests",
        sqs, MILLION,
        f"{deleted:,} messages deleted once each (dead-lettered ones too: acked after the DLQ send) / "
        f"{per_call} per call",
    )  # fmt: skip
    ledger.add(
        "SQS", "DLQ ReceiveMessage (DLQ consumer)", receive_requests(dlq, per_call, w.message_kb),
        "requests", sqs, MILLION, f"{dlq:,} DLQ messages / {per_call} per call",
    )  # fmt: skip
    ledger.add(
        "SQS", "DLQ DeleteMessageBatch", batched_calls(dlq, per_call), "requests", sqs, MILLION,
        f"{dlq:,} DLQ messages / {per_call} per call",
    )  # fmt: skip
    hooks = webhook_deliveries(w)
    if hooks:
        ledger.add(
            "SQS", "webhook ReceiveMessage + DeleteMessageBatch (webhook consumer)",
            receive_requests(hooks, per_call, w.message_kb) + batched_calls(hooks, per_call), "requests",
            sqs, MILLION, f"{hooks:,} deliveries / {per_call} per call, received and acked",
        )  # fmt: skip
    polls_per_poller = int(hours * 3600 // LONG_POLL_SECONDS)
    polled = 2 * w.queues + 1  # every kind's queue and DLQ, and the webhook delivery queue
    ledger.add(
        "SQS", "empty long polls (event-source mappings)", w.esm_pollers * polls_per_poller * polled,
        "requests", sqs, MILLION,
        f"{w.esm_pollers} pollers x {polls_per_poller:,} polls ({hours:g} h x 3600 / "
        f"{LONG_POLL_SECONDS} s) x {polled} queues ({w.queues} main + {w.queues} DLQ + webhooks); "
        "each empty ReceiveMessage is billed",
        fixed=True,
    )  # fmt: skip


def lambda_lines(ledger: Ledger) -> None:
    """Lambda: each function's invocations and duration (arm64)."""
    w, add = ledger.workload, ledger.add
    lam_req, lam_gbs = ledger.prices.lambda_per_million_requests, ledger.prices.lambda_arm64_per_gb_second
    jobs, dlq, deliveries, hours = w.jobs_per_month, w.dead_lettered_jobs, w.deliveries, w.hours_per_month
    polls, api_calls, cron_runs_total = ledger.polls, ledger.api_calls, ledger.cron_runs_total
    fate = (
        f"{jobs:,} jobs: {w.first_try_jobs:,} first try, {w.recovered_jobs:,} after 1 retry, "
        f"{dlq:,} dead-lettered after {w.max_retries} retries, {w.failed_final_jobs:,} failed for good"
    )
    add(
        "Lambda", "API (producer) invocations", api_calls, "requests", lam_req, MILLION,
        f"{jobs:,} submits + {polls:,} status polls ({w.status_polls_per_job:g} per job)",
    )  # fmt: skip
    add(
        "Lambda", "API (producer) duration", gb_seconds(api_calls, w.api_avg_ms / 1000, w.api_memory_mb),
        "GB-seconds", lam_gbs, 1,
        f"{api_calls:,} x {w.api_avg_ms:g} ms x {w.api_memory_mb} MB / 1024 (arm64)",
    )  # fmt: skip
    add(
        "Lambda", "API long-poll waits", gb_seconds(polls, w.poll_wait_seconds, w.api_memory_mb),
        "GB-seconds", lam_gbs, 1,
        f"{polls:,} status polls x {w.poll_wait_seconds:g} s waiting (GET /jobs/{{id}}?wait=) x "
        f"{w.api_memory_mb} MB / 1024; webhooks instead of polls (--polls-per-job 0) remove it",
    )  # fmt: skip
    add(
        "Lambda", "consumer invocations", batched_calls(deliveries, w.batch_size), "requests", lam_req,
        MILLION,
        f"{deliveries:,} deliveries / batch of {w.batch_size} (window {w.batch_window_seconds} s); {fate}",
    )  # fmt: skip
    add(
        "Lambda", "consumer duration",
        gb_seconds(deliveries, w.consumer_avg_seconds, w.consumer_memory_mb), "GB-seconds", lam_gbs, 1,
        f"{deliveries:,} deliveries x {w.consumer_avg_seconds:g} s x {w.consumer_memory_mb} MB / 1024",
    )  # fmt: skip
    add(
        "Lambda", "DLQ consumer invocations", batched_calls(dlq, w.batch_size), "requests", lam_req,
        MILLION, f"{dlq:,} DLQ messages / batch of {w.batch_size}",
    )  # fmt: skip
    add(
        "Lambda", "DLQ consumer duration",
        gb_seconds(dlq, w.dlq_consumer_avg_ms / 1000, w.dlq_consumer_memory_mb), "GB-seconds", lam_gbs, 1,
        f"{dlq:,} messages x {w.dlq_consumer_avg_ms:g} ms x {w.dlq_consumer_memory_mb} MB / 1024",
    )  # fmt: skip
    hooks = webhook_deliveries(w)
    if hooks:
        add(
            "Lambda", "webhook consumer", batched_calls(hooks, w.batch_size), "requests", lam_req, MILLION,
            f"{hooks:,} deliveries ({w.webhook_rate:g} of the jobs) / batch of {w.batch_size}",
        )  # fmt: skip
        add(
            "Lambda", "webhook consumer duration", gb_seconds(hooks, w.webhook_post_seconds, 256),
            "GB-seconds", lam_gbs, 1, f"{hooks:,} POSTs x {w.webhook_post_seconds:g} s x 256 MB / 1024",
        )  # fmt: skip
    add(
        "Lambda", "cron dispatcher invocations", cron_runs_total, "requests", lam_req, MILLION,
        f"{ledger.cron_note} x {hours:g} h", fixed=True,
    )  # fmt: skip
    add(
        "Lambda", "cron dispatcher duration",
        gb_seconds(cron_runs_total, w.cron_avg_seconds, w.cron_memory_mb), "GB-seconds", lam_gbs, 1,
        f"{cron_runs_total:,} runs x {w.cron_avg_seconds:g} s x {w.cron_memory_mb} MB / 1024", fixed=True,
    )  # fmt: skip


def dynamodb_lines(ledger: Ledger, job_row_bytes: int) -> None:
    """DynamoDB: the measured units per path, the jobs' paths first, then the crons'."""
    w, prices = ledger.workload, ledger.prices
    row = None if w.job_row_kb is None else math.ceil(w.job_row_kb * 1024)
    row_note = (
        f"job rows re-priced at {w.job_row_kb:g} KB" if row else f"job rows as measured ({job_row_bytes:,} B)"
    )
    for fixed in (False, True):
        read_parts, write_parts = [], []
        for name, path, count, is_fixed in ledger.runs:
            if is_fixed != fixed or not count:
                continue
            reads, writes = path.units(row)
            if reads:
                read_parts.append((name, count, reads))
            if writes:
                write_parts.append((name, count, writes))
        suffix = " (crons)" if fixed else ""
        ledger.add(
            "DynamoDB", f"write request units{suffix}", math.fsum(c * u for _, c, u in write_parts), "WRU",
            prices.dynamodb_per_million_write_units, MILLION,
            f"{derivation(write_parts)} (index writes included; {row_note})", fixed=fixed,
        )  # fmt: skip
        ledger.add(
            "DynamoDB", f"read request units{suffix}", math.fsum(c * u for _, c, u in read_parts), "RRU",
            prices.dynamodb_per_million_read_units, MILLION, derivation(read_parts), fixed=fixed,
        )  # fmt: skip


def gateway_and_scheduler_lines(ledger: Ledger) -> None:
    """API Gateway's requests and EventBridge Scheduler's invocations."""
    jobs, hours, prices = ledger.workload.jobs_per_month, ledger.workload.hours_per_month, ledger.prices
    ledger.add(
        "API Gateway", "HTTP API requests", ledger.api_calls, "requests",
        prices.apigw_http_per_million_requests, MILLION,
        f"{jobs:,} POST /jobs + {ledger.polls:,} GET /jobs/{{id}} (each < 512 KB)",
    )  # fmt: skip
    ledger.add(
        "EventBridge Scheduler", "schedule invocations", ledger.cron_runs_total, "invocations",
        prices.scheduler_per_million_invocations, MILLION, f"{ledger.cron_note} x {hours:g} h", fixed=True,
    )  # fmt: skip


def s3_and_sns_lines(ledger: Ledger) -> None:
    """S3's requests and storage, SNS's alerts."""
    w, prices, add = ledger.workload, ledger.prices, ledger.add
    ok = w.succeeded_jobs
    puts = ledger.tally("s3", "PutObject")
    add(
        "S3", "PUT requests", sum(c * r for _, c, r in puts) + ok * w.artifact_puts_per_job, "requests",
        prices.s3_put_per_thousand, THOUSAND,
        f"{derivation(puts)} + {ok:,} succeeded jobs x {w.artifact_puts_per_job} artifacts",
    )  # fmt: skip
    gets = ledger.tally("s3", "GetObject")
    add(
        "S3", "GET requests", sum(c * r for _, c, r in gets) + ok * w.result_gets_per_job, "requests",
        prices.s3_get_per_thousand, THOUSAND,
        f"{derivation(gets)} + {ok:,} succeeded jobs x {w.result_gets_per_job} downloads",
    )  # fmt: skip
    stored_gb = ok * w.result_kb_per_job * w.result_retention_months / KB_PER_GB
    add(
        "S3", "storage", stored_gb, "GB-month", prices.s3_storage_per_gb_month, 1,
        f"{ok:,} jobs x {w.result_kb_per_job:g} KB x {w.result_retention_months:g} month(s) kept",
    )  # fmt: skip
    alerts = ledger.tally("sns")
    add(
        "SNS", "Publish (alerts)", sum(c * r for _, c, r in alerts), "requests",
        prices.sns_per_million_requests, MILLION, derivation(alerts),
    )  # fmt: skip


def unpriced_calls(runs: list[Run]) -> dict[str, int]:
    """Calls of services the estimate does not price, counted per `service:operation`."""
    unpriced: dict[str, int] = {}
    for _, path, count, _ in runs:
        for call in path.calls:
            if call.service not in PRICED_SERVICES and count:
                name = f"{call.service}:{call.operation}"
                unpriced[name] = unpriced.get(name, 0) + count
    return unpriced
