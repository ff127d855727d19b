"""What a soak run's steps share: the HTTP answers counted (`Api`) and the run itself (`SoakRun`):
the plan, the users, the jobs accepted and finished, what was injected and fired, the re-runs'
answers, the submitting pool and the events that stop it. The run loop, its actions, the checks
and the report all read and write this one object."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aijobs_cli.soak.targets import SoakTarget
from aijobs_cli.soak.workload import SoakJob, SoakUser
from aijobs_cli.target import Target, TargetError


@dataclass
class Api:
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


@dataclass
class SoakRun:
    """One run of the soak against `target`, from its set-up to its report."""

    target: SoakTarget
    jobs: int
    plan: list[SoakJob]
    people: list[SoakUser]
    say: Callable[[str], None]
    #: Pace the submissions of a `LoadPlan` (injected by tests).
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    operator: Target | None
    started: float
    window_start: datetime
    deadline: float
    pool: ThreadPoolExecutor
    by_user: dict[str, SoakUser] = field(init=False)
    api: Api = field(default_factory=Api)
    lock: threading.Lock = field(default_factory=threading.Lock)
    accepted: list[SoakJob] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    cron: Counter[str] = field(default_factory=Counter)
    examples: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # The cancels' timers (a cancel due now must not wait for the soak's loop).
    timers: list[threading.Timer] = field(default_factory=list)
    resent_by_sweeper: list[str] = field(default_factory=list)
    # Answers of the batch re-runs (from their own thread during the run), for the loop to act on.
    rerun_answers: list[tuple[bool, Any, Any]] = field(default_factory=list)
    reruns: Counter[str] = field(default_factory=Counter)
    futures: list[Future[None]] = field(default_factory=list)
    submitted_jobs: list[SoakJob] = field(default_factory=list)
    #: Why submitting stopped (a paced run).
    stopped: list[str] = field(default_factory=list)
    fed: threading.Event = field(default_factory=threading.Event)
    halt: threading.Event = field(default_factory=threading.Event)
    finished: set[str] = field(default_factory=set)
    pending_early: set[str] = field(default_factory=set)
    by_id: dict[str, SoakJob] = field(default_factory=dict)
    #: When the last job was seen finished (monotonic seconds).
    last_finished: float = 0.0
    feeder: threading.Thread | None = None
    rerun_thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.by_user = {user.user_id: user for user in self.people}
        self.last_finished = self.started
