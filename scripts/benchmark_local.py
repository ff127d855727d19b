"""Benchmark the local stack end to end: N jobs submitted over HTTP until every one is finished.

Prints figures, asserts nothing (machines here are shared and noisy): jobs/second from the first
submit to the last finish, submit latency (p50/p95, overall and per window of submits, to show
how it changes as the tables grow), and p50/p95 of submit-to-finish latency.

    .venv/bin/python scripts/benchmark_local.py --jobs 500 --clients 8
    .venv/bin/python scripts/benchmark_local.py --jobs 200 --clients 1      # one client, in turn
    .venv/bin/python scripts/benchmark_local.py --jobs 500 --preload 2000   # on bigger tables

`--clients N` threads submit concurrently, each its share of the jobs one after another.
`--preload K` submits K jobs the same way and waits for them to finish before measuring, so the
measured jobs meet tables that already hold K jobs. `--window W` prints the submit p50/p95 of
each W submits, in the order they were sent. `--api-concurrency`, `--long-poll` and
`--consumer-concurrency` change the stack's settings for A/B runs.

It also prints where the CPU went over the measured jobs (this process, which runs the functions
and the benchmark's clients, and moto's process, from /proc on Linux), hence jobs/s per core, and
the AWS requests per job by operation (counted in this process: every request moto serves).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.endpoint import Endpoint
from botocore.model import OperationModel

from aijobs.observability import logger
from aijobs_cdk.stage import load_stage_config
from aijobs_cli.local.stack import API_CONCURRENCY, LONG_POLL_SECONDS, LocalStack
from aijobs_cli.target import Target

TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part. Retries are classified."
FINAL = ("succeeded", "failed_final")


def cpu_seconds(pid: int | None = None) -> float | None:
    """CPU time (user + system) of this process, or of another one from /proc (None off Linux)."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass
class Submitted:
    job_id: str
    sent: float  # time.monotonic() when the request was sent
    seconds: float  # how long the API took to accept it


@dataclass
class Batch:
    submits: list[Submitted] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    started_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.monotonic)
    submitted: float = 0.0


def submit_all(client: Target, jobs: int, clients: int, kind: str) -> Batch:
    """`jobs` submits from `clients` threads at once; each thread sends its share in turn."""
    batch = Batch()
    lock = threading.Lock()
    remaining = [jobs]

    def run() -> None:
        while True:
            with lock:
                if remaining[0] == 0:
                    return
                remaining[0] -= 1
            t0 = time.monotonic()
            try:
                response = client.request("POST", "/jobs", {"kind": kind, "input": TEXT})
            except Exception as error:  # count it, keep going: the figures say how many failed
                with lock:
                    batch.failures.append(f"{type(error).__name__}: {error}")
                continue
            seconds = time.monotonic() - t0
            with lock:
                if response.status == 202:
                    batch.submits.append(Submitted(response.body["jobId"], t0, seconds))
                else:
                    batch.failures.append(f"{response.status} {response.body}")

    threads = [threading.Thread(target=run, name=f"client-{n}") for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batch.submitted = time.monotonic()
    batch.submits.sort(key=lambda s: s.sent)
    return batch


def wait_finished(
    client: Target, job_ids: list[str], deadline: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """The finished jobs (as GET returns them) and the ids still unfinished at the deadline.

    Jobs finish roughly in submission order, so each sweep stops at the first unfinished job:
    waiting costs the stack one request per sweep, not one per pending job."""
    pending, finished = list(job_ids), []
    while pending and time.monotonic() < deadline:
        while pending:
            job = client.request("GET", f"/jobs/{pending[0]}").body
            if job.get("status") not in FINAL:
                break
            finished.append(job)
            pending.pop(0)
        if pending:
            # Something later may have finished first; look at the rest once in a while.
            time.sleep(0.2)
    return finished, pending


class Requests:
    """Every AWS request the stack's process sends (all of moto's traffic), by operation."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        original = Endpoint.make_request

        def make_request(
            endpoint: Endpoint, operation_model: OperationModel, request_dict: Mapping[str, Any]
        ) -> Any:
            with self._lock:
                self.counts[operation_model.name] += 1
            return original(endpoint, operation_model, request_dict)

        Endpoint.make_request = make_request  # type: ignore[assignment,method-assign]

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


@dataclass
class Cpu:
    """CPU seconds spent by the stack's process (the benchmark's clients included) and moto's."""

    stack: float
    moto: float | None

    @classmethod
    def now(cls, stack: LocalStack) -> Cpu:
        moto = [cpu_seconds(pid) for pid in stack.moto_pids]
        return cls(cpu_seconds() or 0.0, None if None in moto else sum(m or 0.0 for m in moto))

    def since(self, start: Cpu) -> Cpu:
        moto = None if self.moto is None or start.moto is None else self.moto - start.moto
        return Cpu(self.stack - start.stack, moto)


def report(
    label: str,
    batch: Batch,
    finished: list[dict[str, Any]],
    unfinished: list[str],
    window: int,
    cpu: Cpu | None = None,
    requests: Counter[str] | None = None,
) -> None:
    submits = [s.seconds * 1000 for s in batch.submits]
    ordered = sorted(submits)
    jobs = len(batch.submits)
    print(f"--- {label}")
    print(
        f"jobs                 {jobs} accepted, {len(batch.failures)} refused, unfinished {len(unfinished)}"
    )
    for failure in batch.failures[:3]:
        print(f"  refused: {failure[:200]}")
    phase = batch.submitted - batch.started
    print(f"submit phase         {phase:.2f} s, {jobs / phase if phase else 0:.1f} submits/s")
    if ordered:
        p50, p95 = statistics.median(ordered), percentile(ordered, 0.95)
        print(f"submit latency       p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    if window and jobs > window:
        cells = []
        for start in range(0, jobs, window):
            part = sorted(submits[start : start + window])
            cells.append(f"{start + len(part)}: {statistics.median(part):.0f}/{percentile(part, 0.95):.0f}")
        print(f"submit p50/p95 ms by submits sent ({window} per window)")
        for row in range(0, len(cells), 6):
            print("  " + "  ".join(cells[row : row + 6]))
    if finished:
        ends = [datetime.fromisoformat(job["finishedAt"]) for job in finished]
        elapsed = (max(ends) - batch.started_wall).total_seconds()
        rate = len(finished) / elapsed
        print(f"end to end           {elapsed:.2f} s, {rate:.1f} jobs/s (first submit to last finish)")
        latencies = sorted(
            (
                datetime.fromisoformat(job["finishedAt"]) - datetime.fromisoformat(job["createdAt"])
            ).total_seconds()
            for job in finished
        )
        p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
        print(f"submit -> finished   p50 {p50:.2f} s, p95 {p95:.2f} s")
    if cpu is not None and jobs:
        stack_ms = cpu.stack * 1000 / jobs
        line = f"CPU per job          stack process {stack_ms:.0f} ms (the clients included)"
        if cpu.moto is not None:
            moto_ms = cpu.moto * 1000 / jobs
            line += f", moto {moto_ms:.0f} ms: {1000 / (stack_ms + moto_ms):.1f} jobs/s per core"
        print(line)
    if requests and jobs:
        print(f"AWS requests per job {requests.total() / jobs:.1f}")
        top = [f"{name} {count / jobs:.2f}" for name, count in requests.most_common()]
        for row in range(0, len(top), 4):
            print("  " + ", ".join(top[row : row + 4]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs measured (default 500)")
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent submitters (default 8; 1: in turn)"
    )
    parser.add_argument("--preload", type=int, default=0, help="jobs run to completion before measuring")
    parser.add_argument(
        "--window", type=int, default=100, help="submit p50/p95 per this many submits (0: off)"
    )
    parser.add_argument(
        "--api-concurrency",
        type=int,
        default=API_CONCURRENCY,
        help=f"containers of the API function at most (default {API_CONCURRENCY})",
    )
    parser.add_argument(
        "--long-poll",
        type=int,
        default=LONG_POLL_SECONDS,
        help=f"seconds an idle poller's receive waits (default {LONG_POLL_SECONDS})",
    )
    parser.add_argument(
        "--consumer-concurrency",
        type=int,
        default=0,
        help="QUEUE_MAX_CONCURRENCY of the run (pollers per queue, at most 4; default: the stage's)",
    )
    parser.add_argument("--kind", default="summary")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the measured jobs")
    args = parser.parse_args()
    # Measure the system, not the terminal: per-job logs and metrics off.
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    logger.setLevel("WARNING")

    # Enough credits for every job of the run: the demo user's grant is the stack's default.
    overrides = {"BATCH_WINDOW_SECONDS": "0"}
    if args.consumer_concurrency:
        overrides["QUEUE_MAX_CONCURRENCY"] = str(args.consumer_concurrency)
    config = load_stage_config("local", overrides)
    requests = Requests()
    print(
        f"local stack, {args.clients} client(s), {args.jobs} jobs measured, {args.preload} preloaded, "
        f"{args.api_concurrency} API container(s) at most, idle pollers long-poll {args.long_poll} s"
    )
    stack = LocalStack(
        config,
        port=0,
        log=lambda _line: None,
        api_concurrency=args.api_concurrency,
        long_poll_seconds=args.long_poll,
    )
    with stack:
        client = Target(stage="local", api_url=stack.api_url, api_key=stack.api_key)
        if args.preload:
            preload = submit_all(client, args.preload, args.clients, args.kind)
            finished, unfinished = wait_finished(
                client, [s.job_id for s in preload.submits], time.monotonic() + args.timeout
            )
            report(
                f"preload ({args.preload} jobs, not the measurement)",
                preload,
                finished,
                unfinished,
                args.window,
            )
        cpu, sent = Cpu.now(stack), requests.snapshot()
        batch = submit_all(client, args.jobs, args.clients, args.kind)
        finished, unfinished = wait_finished(
            client, [s.job_id for s in batch.submits], batch.started + args.timeout
        )
        cpu, sent = Cpu.now(stack).since(cpu), requests.snapshot() - sent
        report("measured", batch, finished, unfinished, args.window, cpu, sent)


if __name__ == "__main__":
    main()
