"""Benchmark the local stack end to end: N jobs submitted over HTTP until every one is finished.

Prints figures, asserts nothing (machines here are shared and noisy): jobs/second from the first
submit to the last finish, submit latency, and p50/p95 of submit-to-finish latency.

    .venv/bin/python scripts/benchmark_local.py --jobs 200 --kind summary
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime

from aijobs.observability import logger
from aijobs_cdk.stage import load_stage_config
from aijobs_cli.local_stack import LocalStack
from aijobs_cli.target import Target

TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part. Retries are classified."


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--kind", default="summary")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    # Measure the system, not the terminal: per-job logs and metrics off.
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    logger.setLevel("WARNING")

    config = load_stage_config("local", {"BATCH_WINDOW_SECONDS": "0"})
    with LocalStack(config, port=0, log=lambda _line: None) as stack:
        client = Target(stage="local", api_url=stack.api_url, api_key=stack.api_key)
        started = time.monotonic()
        submit_seconds = []
        job_ids = []
        for _ in range(args.jobs):
            t0 = time.monotonic()
            response = client.request("POST", "/jobs", {"kind": args.kind, "input": TEXT})
            submit_seconds.append(time.monotonic() - t0)
            if response.status != 202:
                raise SystemExit(f"submit failed: {response.status} {response.body}")
            job_ids.append(response.body["jobId"])
        submitted = time.monotonic()
        pending, latencies = set(job_ids), []
        deadline = started + args.timeout
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                job = client.request("GET", f"/jobs/{job_id}").body
                if job["status"] in ("succeeded", "failed_final"):
                    pending.discard(job_id)
                    finished, created = (
                        datetime.fromisoformat(job["finishedAt"]),
                        datetime.fromisoformat(job["createdAt"]),
                    )
                    latencies.append((finished - created).total_seconds())
            time.sleep(0.2)
        elapsed = time.monotonic() - started
    latencies.sort()
    submit_rate = args.jobs / (submitted - started)
    print(f"jobs                 {args.jobs} ({args.kind}), unfinished {len(pending)}")
    print(f"submit phase         {submitted - started:.2f} s, {submit_rate:.1f} submits/s")
    print(f"submit latency       p50 {statistics.median(submit_seconds) * 1000:.1f} ms")
    print(f"end to end           {elapsed:.2f} s, {len(latencies) / elapsed:.1f} jobs/s")
    if latencies:
        p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
        print(f"submit -> finished   p50 {p50:.2f} s, p95 {p95:.2f} s")


if __name__ == "__main__":
    main()
