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
