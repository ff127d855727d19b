"""The soak's workload: the outcomes a job may end in, the faults of the job mix and their weights,
the kinds and inputs submitted, a planned job and a user as the run tracks them, and the seeded
plan (every fault at least once, the `POST /classify` calls mixed in, what each user must be granted).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from aijobs_cli.soak.observed import ChildState

SUCCEEDED = "succeeded"
FAILED_FINAL = "failed_final"
DEAD_LETTERED = "dead_lettered"
# A job its owner cancelled that ended `failed_final` / `cancelled` (one cancelled while its attempt
# ran may instead end `succeeded`: that attempt finished and was charged).
CANCELLED = "cancelled"
# Synchronous calls (`POST /classify`) mixed into the run: billed like jobs, answered at once.
CLASSIFY = "classify"
CLASSIFY_SHARE = 40  # one call per this many jobs
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


def mix_in_calls(plan: list[SoakJob], jobs: int, users: int, prices: dict[str, int]) -> None:
    """Insert one `POST /classify` call after every CLASSIFY_SHARE jobs of `plan`, when the stage
    prices it (mixed into the run: a paced run that stops at its cap of jobs must not cut them off
    at the end)."""
    if CLASSIFY not in prices:
        return
    calls = [
        SoakJob(index=jobs + n, user_id=str(n % users), kind=CLASSIFY, fault=CLASSIFY_CALL,
                price=prices[CLASSIFY])
        for n in range(max(1, jobs // CLASSIFY_SHARE))
    ]  # fmt: skip
    for n, call in reversed(list(enumerate(calls))):
        plan.insert(min(len(plan), (n + 1) * CLASSIFY_SHARE), call)


def credit_needs(plan: list[SoakJob]) -> dict[int, int]:
    """What each user (by index: the plan's `user_id` until users exist) must be granted: the
    prices of its planned jobs."""
    needs: dict[int, int] = Counter()
    for job in plan:
        needs[int(job.user_id)] += job.price
    return dict(needs)


def capped_tenants(people: list[SoakUser]) -> set[str]:
    """The users with a running cap of their own (the capped tenant)."""
    return {user.user_id for user in people if user.running_cap is not None}
