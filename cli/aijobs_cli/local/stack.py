"""The whole system on one machine: no AWS account, no Docker.

- moto's server on loopback, in a process of its own (aijobs_cli.local.moto_server), is the AWS
  endpoint; the stage's resources are created from the same stage configuration and key schema as
  the CDK stack (aijobs_cli.local.resources);
- the HTTP API listens on localhost (aijobs_cli.local.gateway) and hands the real producer handler
  API Gateway HTTP API v2 events, up to API_CONCURRENCY at once, each in a container of its own
  (aijobs_cli.local.api_containers), and long-polls up to LONG_POLL_CONCURRENCY more in containers
  of their own;
- per queue, pollers behave like the Lambda SQS event-source mapping (aijobs_cli.local.esm): batch
  size, batching window, concurrency, partial batch responses, visibility timeouts, maxReceiveCount;
- a poller per DLQ runs the dead-letter consumer, with the mapping's batch size and window; the
  webhook consumer polls its queue likewise (mapping_plans: what the template gives each mapping);
  a scheduler fires the cron dispatcher on the minute for every CRONS expression that matches.
Every function runs from its own settings model, validated exactly as in Lambda.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from aijobs import runtime
from aijobs.bindings import queue_name_of
from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_SCHEDULED_TIME, dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import ConsumerSettings, CronSettings, DlqSettings, WebhookSettings
from aijobs.store.retention import write_retention
from aijobs.store.tenants import Directory
from aijobs_cdk.stage_config import (
    DLQ_SUFFIX,
    WEBHOOK_BATCH_SIZE,
    WEBHOOK_QUEUE,
    StageConfig,
    event_source_mappings_env,
    queue_resource_name,
)
from aijobs_cli.local.api_containers import ApiContainer, ApiContainers
from aijobs_cli.local.esm import LambdaContext, QueueMapping
from aijobs_cli.local.gateway import (
    JSON_HEADERS,
    ApiRequestHandler,
    ApiServer,
    Reply,
    api_event,
    error_reply,
    gateway_reply,
    is_long_poll,
)
from aijobs_cli.local.moto_server import MotoProcess
from aijobs_cli.local.resources import StageResources, provision

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

LOCAL_REGION = "us-east-1"
DEMO_USER = "demo"
DEMO_CREDITS = 10_000
# The user behind the operator key that the /_local/ control endpoints require.
OPERATOR_USER = "local-operator"
ADMIN_PREFIX = "/_local/"
# How long an idle poller's receive waits for a first message (the service's pollers wait 20 s).
# moto answers as soon as one arrives; each idle poller costs moto a request per this many seconds
# (at 1 s, the twenty idle pollers were about two of the eleven requests per job under load).
LONG_POLL_SECONDS = 10
# How long stop() lets the functions finish what they are doing before it stops moto (which ends
# the idle pollers' long polls).
STOP_GRACE_SECONDS = 0.5
# The pollers' own SQS clients do not retry: the poll loop does, and a stopped moto must end a long
# poll at once rather than after botocore's back-offs.
_POLLER_CONFIG = Config(retries={"mode": "standard", "max_attempts": 1})
# Containers of the API function at most (concurrent invocations), started as requests need them:
# a long-polling `GET /jobs/{id}?wait=` holds one, and submits still find another. More submit
# faster than the consumers, which share the same cores here, can finish: in benchmark_local A/B
# runs (8 clients, 2 loaded cores), 1 / 2 / 4 containers gave 8.2 / 8.4 / 7.5 jobs/s end to end
# (submit p50 0.82 / 0.57 / 0.44 s): a growing backlog makes moto's SQS slower per request.
API_CONCURRENCY = 2
# Containers for long-polls (`GET /jobs/{id}?wait=N`) at most, apart from the others: a long-poll
# holds its container for up to its wait while doing nearly nothing, so two of them held both
# API_CONCURRENCY containers and every other tenant's request waited up to 13 s behind them. In AWS
# each long-poll holds one execution environment too, but Lambda starts another for the next
# request (docs/getting-started.md#what-the-local-stack-is). Past this many, long-polls wait for
# one another only.
LONG_POLL_CONCURRENCY = 8


def local_environment(endpoint_url: str) -> dict[str, str]:
    """Process environment for boto3 (in-process functions and the CLI) against the local endpoint."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": LOCAL_REGION,
        "AWS_REGION": LOCAL_REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


# The functions an event-source mapping invokes, by the role the local stack gives each.
CONSUMER, DLQ_CONSUMER, WEBHOOK_CONSUMER = "consumer", "dlq-consumer", "webhook-consumer"


@dataclass(frozen=True)
class MappingPlan:
    """One event-source mapping as the CDK stack declares it: the function it invokes, its batch
    size and batching window (tests/infra/test_queues.py checks these against the template)."""

    function: str
    batch_size: int
    batch_window_seconds: int


def mapping_plans(config: StageConfig) -> dict[str, MappingPlan]:
    """The stage's event-source mappings by queue name (one per queue), as the constructs make
    them: each kind's consumer (aijobs_cdk.constructs.job_queue), the dead-letter consumer on every
    kind's DLQ (dead_letters) and the webhook consumer on its queue (webhooks)."""
    plans = {}
    for kind in config.queue_names:
        tuning = config.queue_tuning(kind)
        name = queue_resource_name(config.stage, kind)
        plans[name] = MappingPlan(CONSUMER, tuning.batch_size, tuning.batch_window_seconds)
        plans[name + DLQ_SUFFIX] = MappingPlan(DLQ_CONSUMER, config.batch_size, config.batch_window_seconds)
    webhooks = queue_resource_name(config.stage, WEBHOOK_QUEUE)
    plans[webhooks] = MappingPlan(WEBHOOK_CONSUMER, WEBHOOK_BATCH_SIZE, 0)
    return plans


@dataclass
class LocalControl:
    """ConsumerControl for the local stack: pausing flips the emulated mappings of a queue; a
    MaximumConcurrency (by queue ARN, the local mapping id) leaves the pollers above it idle."""

    mappings: dict[str, list[QueueMapping]] = field(default_factory=dict)
    limits: dict[str, int | None] = field(default_factory=dict)

    def max_concurrency(self, mapping_id: str) -> int | None:
        return self.limits.get(mapping_id)

    def set_max_concurrency(self, mapping_id: str, value: int) -> None:
        self.limits[mapping_id] = value

    def active(self, mapping: QueueMapping) -> bool:
        """Whether this poller is within its queue's MaximumConcurrency (pollers are slots in order)."""
        limit = self.limits.get(mapping.queue_arn)
        slot = next(i for i, m in enumerate(self.mappings.get(mapping.queue_arn, [])) if m is mapping)
        return limit is None or slot < limit

    def set_enabled(self, function_name: str, queue_arn: str, *, enabled: bool) -> list[str]:
        changed = []
        for mapping in self.mappings.get(queue_arn, []):
            mapping.enabled = enabled
            changed.append(f"local:{mapping.function_name}")
        return changed

    def set_mapping_enabled(self, mapping_id: str, *, enabled: bool) -> None:
        self.set_enabled("", mapping_id, enabled=enabled)  # the local mapping id is the queue ARN

    def mapping_enabled(self, mapping_id: str) -> bool | None:
        pollers = self.mappings.get(mapping_id, [])
        return all(m.enabled for m in pollers) if pollers else None

    def set_kind(self, resources: StageResources, kind: str, *, enabled: bool) -> list[str]:
        return self.set_enabled("", resources.queue_arns[kind], enabled=enabled)


@dataclass
class LocalStack:
    config: StageConfig
    port: int = 0
    info_file: Path | None = None
    log: Callable[[str], None] = print
    resources: StageResources | None = None
    api_url: str = ""
    api_key: str = ""
    admin_key: str = ""
    endpoint_url: str = ""
    control: LocalControl = field(default_factory=LocalControl)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _moto: MotoProcess | None = None
    _http: ThreadingHTTPServer | None = None
    # Concurrent invocations of the API function: each container runs one at a time, and a request
    # that finds every container busy starts another, up to this many (aijobs_cli.local.api_containers).
    api_concurrency: int = API_CONCURRENCY
    # Containers of the same function kept for long-polls (is_long_poll), started as they need them.
    long_poll_concurrency: int = LONG_POLL_CONCURRENCY
    long_poll_seconds: int = LONG_POLL_SECONDS
    _api: ApiContainers | None = None
    _long_polls: ApiContainers | None = None
    _operators: Directory | None = None
    _operators_lock: threading.Lock = field(default_factory=threading.Lock)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalStack:
        try:
            return self._start()
        except BaseException:
            self.stop()  # nothing left running, moto's process included
            raise

    def _start(self) -> LocalStack:
        # moto in its own process (aijobs_cli.local.moto_server): a second core, and a fresh, empty
        # moto for every stack. The functions' settings, runtime and boto3 defaults live in this
        # process's environment: one running local stack per process.
        self._moto = MotoProcess().start()
        self.endpoint_url = self._moto.endpoint_url
        os.environ.update(local_environment(self.endpoint_url))
        runtime.reset_runtime()
        self.resources = provision(self.config, region=LOCAL_REGION, endpoint_url=self.endpoint_url)
        os.environ.update(self.resources.api_env())
        runtime.reset_runtime()
        self._seed()
        self._start_api()
        self._start_pollers()
        self._spawn("scheduler", self._schedule_loop)
        self._write_info()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        # The functions finish their invocations; idle pollers wait in a long poll until moto goes.
        grace = time.monotonic() + STOP_GRACE_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, grace - time.monotonic()))
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        for thread in self._threads:
            thread.join(timeout=10)
        runtime.reset_runtime()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def long_polls_in_progress(self) -> int:
        """Long-polls being answered now, each in a container of the long-poll pool."""
        return 0 if self._long_polls is None else self._long_polls.busy

    @property
    def moto_pids(self) -> list[int]:
        """The process ids of moto's servers (for measurements)."""
        pid = None if self._moto is None else self._moto.pid
        return [] if pid is None else [pid]

    def info(self) -> dict[str, Any]:
        assert self.resources is not None
        r = self.resources
        return {
            "stage": self.config.stage,
            "api_url": self.api_url,
            "api_key": self.api_key,
            "admin_key": self.admin_key,
            "aws_endpoint_url": self.endpoint_url,
            "region": r.region,
            "admin_url": self.api_url + ADMIN_PREFIX.rstrip("/"),
            "meta_table": r.meta_table,
            "shard_tables": r.shard_tables,
            **{name.lower(): int(value) for name, value in self.config.table_settings_env().items()},
            "bucket": r.bucket,
            "alert_topic_arn": r.topic_arn,
            "queue_urls": r.queue_urls,
            "dlq_urls": r.dlq_urls,
            "webhook_queue_url": r.webhook_queue_url,
            "webhook_dlq_url": r.webhook_dlq_url,
            "demo_user": DEMO_USER,
            "spend_daily_cap_usd": self.config.spend_daily_cap_usd,
            "spend_time_zone": self.config.spend_time_zone,
        }

    # --- pieces ----------------------------------------------------------------------------------

    def _seed(self) -> None:
        """A demo user with credits, an operator key for /_local/, and the retention configuration
        the */10 job requires."""
        assert self.resources is not None
        directory = runtime.directory(
            ConsumerSettings.from_env(self.resources.consumer_env(self.config.queue_names[0]))
        )
        self.api_key = directory.create_api_key(DEMO_USER, label="local demo")
        self.admin_key = directory.create_api_key(OPERATOR_USER, role="operator", label="local operator")
        self._operators = directory
        shard = directory.shard_for(DEMO_USER)
        assert shard is not None

        directory.job_store(shard).ledger.grant(
            DEMO_USER, DEMO_CREDITS, datetime.now(UTC) + timedelta(days=30)
        )
        write_retention(
            boto3.resource("dynamodb").Table(self.resources.meta_table),
            credit_tx_retention_days=90,
            ai_task_retention_days=30,
        )

    def _start_api(self) -> None:
        # Lambda puts the function code root on sys.path (/var/task); so does the local stack.
        from aijobs_cdk import FUNCTIONS_DIR

        if str(FUNCTIONS_DIR) not in sys.path:
            sys.path.insert(0, str(FUNCTIONS_DIR))

        def started(container: ApiContainer) -> None:
            # The console's pause/resume: the emulated mappings.
            container.runtime.admin_service().control = self.control

        # The producer function, loaded per container as Lambda loads it (the first one now).
        self._api = ApiContainers(self.api_concurrency, on_start=started)
        self._api.prewarm()
        self._long_polls = ApiContainers(self.long_poll_concurrency, on_start=started)
        handler = type("ApiRequestHandler", (ApiRequestHandler,), {"stack": self})
        self._http = ApiServer(("127.0.0.1", self.port), handler)
        self.api_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._spawn("http-api", self._http.serve_forever)

    def answer(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        """The response to one well-formed HTTP request (called from the server's threads)."""
        path = urlsplit(raw_path).path
        if path.startswith(ADMIN_PREFIX) or path == ADMIN_PREFIX.rstrip("/"):
            return self._admin(method, path, headers)
        pool = self._long_polls if is_long_poll(method, raw_path) else self._api
        assert pool is not None
        event = api_event(method, raw_path, headers, body)
        context = LambdaContext(f"aijobs-{self.config.stage}-api", timeout_seconds=15)
        try:
            response = pool.invoke(event, context)
        except Exception as error:  # API Gateway answers a failed invocation with a 500
            self.log(f"the API function failed: {type(error).__name__}: {error}")
            return error_reply(500, "internal_error", "Internal Server Error")
        return gateway_reply(response)

    def _operator_check(self, headers: Mapping[str, str]) -> Reply | None:
        """None if the request carries an admin key; otherwise the 401/403 to answer."""
        scheme, _, key = headers.get("authorization", "").strip().partition(" ")
        key = key.strip()
        unauthorized = {"WWW-Authenticate": "Bearer"}
        if scheme.lower() != "bearer" or not key:
            return error_reply(
                401,
                "unauthorized",
                "send the operator key: Authorization: Bearer <admin_key>",
                None,
                unauthorized,
            )
        assert self._operators is not None
        with self._operators_lock:  # one boto3 resource, shared by the server's threads
            principal = self._operators.authenticate(key)
        if principal is None:
            return error_reply(401, "unauthorized", "unknown or revoked API key", None, unauthorized)
        if not principal.is_admin:
            return error_reply(403, "forbidden", "the /_local/ endpoints need an admin key")
        return None

    def _admin(self, method: str, path: str, headers: Mapping[str, str]) -> Reply:
        """Local-only operations that a deployed stage does through AWS APIs (resume a consumer).

        Everything but `GET /_local/health` needs an admin key (the info file's `admin_key`)."""
        assert self.resources is not None
        parts = path[len(ADMIN_PREFIX) :].strip("/").split("/")
        if method == "GET" and parts == ["health"]:
            paused = [k for k, arn in self.resources.queue_arns.items()
                      if any(not m.enabled for m in self.control.mappings.get(arn, []))]  # fmt: skip
            return 200, json.dumps({"status": "ok", "paused": paused}).encode(), dict(JSON_HEADERS)
        refused = self._operator_check(headers)
        if refused is not None:
            return refused
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "consumers"
            and parts[2] in ("pause", "resume")
        ):
            kind = parts[1]
            if kind not in self.resources.queue_arns:
                return error_reply(404, "unknown_kind", f"no queue for kind {kind!r}", {"kind": kind})
            changed = self.control.set_kind(self.resources, kind, enabled=parts[2] == "resume")
            return (
                200,
                json.dumps({"kind": kind, "enabled": parts[2] == "resume", "mappings": changed}).encode(),
                dict(JSON_HEADERS),
            )
        return error_reply(404, "route_not_found", "no such local control route", {"path": path})

    def _consumer_threads(self, kind: str) -> int:
        tuning = self.config.queue_tuning(kind)
        if tuning.reserved_concurrency:
            return 1
        return min(tuning.esm_max_concurrency or 2, 4)

    def _start_pollers(self) -> None:
        assert self.resources is not None
        for kind in self.config.queue_names:
            self.control.limits[self.resources.queue_arns[kind]] = self.config.queue_tuning(
                kind
            ).esm_max_concurrency
            for index in range(self._consumer_threads(kind)):
                self._spawn(f"consumer-{kind}-{index}", self._consume_loop, kind, index)
            self._spawn(f"dlq-consumer-{kind}", self._dlq_loop, kind)
        self._spawn("webhook-consumer", self._webhook_loop)

    def _consume_loop(self, kind: str, index: int) -> None:
        assert self.resources is not None
        consumer = runtime.build_consumer(ConsumerSettings.from_env(self.resources.consumer_env(kind)))
        consumer.control = self.control  # type: ignore[assignment]
        mapping = QueueMapping(
            sqs=self._poller_sqs(),
            queue_url=self.resources.queue_urls[kind],
            queue_arn=self.resources.queue_arns[kind],
            handler=consumer.handle,
            function_name=f"aijobs-{self.config.stage}-consumer-{kind}",
            **self._planned(self.resources.queue_urls[kind]),
            long_poll_seconds=self.long_poll_seconds,
        )
        self.control.mappings.setdefault(mapping.queue_arn, []).append(mapping)
        self._poll(mapping)

    def _planned(self, queue_url: str) -> dict[str, Any]:
        """The batch size and batching window the stage's template gives the mapping of a queue."""
        plan = mapping_plans(self.config)[queue_name_of(queue_url)]
        return {"batch_size": plan.batch_size, "batch_window_seconds": plan.batch_window_seconds}

    def _webhook_loop(self) -> None:
        """The webhook consumer on its queue (aijobs.webhooks), like its event-source mapping."""
        assert self.resources is not None
        consumer = runtime.build_webhook_consumer(WebhookSettings.from_env(self.resources.webhook_env()))
        mapping = QueueMapping(
            sqs=self._poller_sqs(),
            queue_url=self.resources.webhook_queue_url,
            queue_arn=self.resources.webhook_queue_arn,
            handler=consumer.handle,
            function_name=f"aijobs-{self.config.stage}-webhook-consumer",
            **self._planned(self.resources.webhook_queue_url),
            long_poll_seconds=self.long_poll_seconds,
        )
        self.control.mappings.setdefault(mapping.queue_arn, []).append(mapping)
        self._poll(mapping)

    def _dlq_loop(self, kind: str) -> None:
        """The dead-letter consumer on one kind's DLQ: a mapping of its own, as in the stack."""
        assert self.resources is not None
        consumer = runtime.build_dead_letter_consumer(DlqSettings.from_env(self.resources.dlq_env()))
        mapping = QueueMapping(
            sqs=self._poller_sqs(),
            queue_url=self.resources.dlq_urls[kind],
            queue_arn=self.resources.dlq_arns[kind],
            handler=consumer.handle,
            function_name=f"aijobs-{self.config.stage}-dlq-consumer",
            **self._planned(self.resources.dlq_urls[kind]),
            long_poll_seconds=self.long_poll_seconds,
        )
        self.control.mappings.setdefault(mapping.queue_arn, []).append(mapping)
        self._poll(mapping)

    @staticmethod
    def _poller_sqs() -> SQSClient:
        return boto3.session.Session().client("sqs", config=_POLLER_CONFIG)  # one session per thread

    def _poll(self, mapping: QueueMapping) -> None:
        while not self._stop.is_set():
            if not mapping.enabled or not self.control.active(mapping):
                self._stop.wait(0.5)
                continue
            if not self._safe_poll(mapping):
                self._stop.wait(0.2)

    def _safe_poll(self, mapping: QueueMapping) -> int:
        try:
            outcome = mapping.poll_once()
        except Exception as error:  # keep polling, like the service would
            if not self._stop.is_set():  # stopping: moto is gone, the poll ends here
                self.log(f"poller {mapping.function_name}: {type(error).__name__}: {error}")
            self._stop.wait(1)
            return 0
        if outcome.error is not None and not self._stop.is_set():
            self.log(
                f"{mapping.function_name} failed a batch: {type(outcome.error).__name__}: {outcome.error}"
            )
        return outcome.received

    def fire_cron(self, expression: str, scheduled: datetime | None = None) -> dict[str, Any]:
        """Invoke the cron dispatcher with a schedule payload, as EventBridge Scheduler does."""
        assert self.resources is not None
        # The emulated mappings (their ids are the queue ARNs) stand in for Lambda's.
        mappings = event_source_mappings_env(self.config, self.resources.queue_arns)
        env = {**self.resources.cron_env(), **mappings}
        ctx = runtime.build_cron_context(CronSettings.from_env(env))
        ctx.control = self.control  # type: ignore[assignment]
        moment = (scheduled or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return dispatch({PAYLOAD_CRON: expression, PAYLOAD_SCHEDULED_TIME: moment}, ctx, SCHEDULED_HANDLERS)

    def _schedule_loop(self) -> None:
        last_minute = datetime.now(UTC).replace(second=0, microsecond=0)
        while not self._stop.wait(1):
            minute = datetime.now(UTC).replace(second=0, microsecond=0)
            if minute == last_minute:
                continue
            last_minute = minute
            for cron in self.config.crons:
                if cron.matches(minute):
                    try:
                        outcome = self.fire_cron(cron.text, minute)
                    except Exception as error:  # the invocation itself failed
                        self.log(f"cron '{cron.text}' failed: {type(error).__name__}: {error}")
                        continue
                    if outcome.get("status") == "failed":  # the dispatcher logged and alerted
                        self.log(f"cron '{cron.text}' failed: {outcome.get('error')}")

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _write_info(self) -> None:
        if self.info_file is not None:
            self.info_file.write_text(json.dumps(self.info(), indent=2) + "\n")
