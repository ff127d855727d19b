"""The whole system on one machine: no AWS account, no Docker.

- moto's server on loopback is the AWS endpoint; the stage's resources are created from the same
  stage configuration and key schema as the CDK stack (aijobs_cli.resources);
- the HTTP API listens on localhost and hands the real producer handler API Gateway HTTP API v2
  events;
- per queue, pollers behave like the Lambda SQS event-source mapping (aijobs_cli.esm): batch size,
  batching window, concurrency, partial batch responses, visibility timeouts, maxReceiveCount;
- a DLQ poller runs the dead-letter consumer; a scheduler fires the cron dispatcher on the minute
  for every CRONS expression that matches.
Every function runs from its own settings model, validated exactly as in Lambda.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3

from aijobs import runtime
from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_SCHEDULED_TIME, dispatch
from aijobs.scheduled.maintenance import write_retention
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import ConsumerSettings, CronSettings, DlqSettings
from aijobs.stage_config import StageConfig
from aijobs_cli.esm import LambdaContext, QueueMapping
from aijobs_cli.resources import StageResources, provision

LOCAL_REGION = "us-east-1"
DEMO_USER = "demo"
DEMO_CREDITS = 10_000
ADMIN_PREFIX = "/_local/"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


def api_event(method: str, raw_path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """An API Gateway HTTP API (payload v2) event, as the gateway would send it to the producer."""
    parts = urlsplit(raw_path)
    query: dict[str, str] = {}
    for pair in filter(None, parts.query.split("&")):
        key, _, value = pair.partition("=")
        query[key] = value
    now = datetime.now(UTC)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": {key.lower(): value for key, value in headers.items()},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("User-Agent", ""),
            },
            "requestId": f"local-{time.monotonic_ns()}",
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if query:
        event["queryStringParameters"] = query
    if body:
        event["body"] = body.decode("utf-8", errors="replace")
    return event


@dataclass
class LocalControl:
    """ConsumerControl for the local stack: pausing flips the emulated mappings of a queue."""

    mappings: dict[str, list[QueueMapping]] = field(default_factory=dict)

    def set_enabled(self, function_name: str, queue_arn: str, *, enabled: bool) -> list[str]:
        changed = []
        for mapping in self.mappings.get(queue_arn, []):
            mapping.enabled = enabled
            changed.append(f"local:{mapping.function_name}")
        return changed

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
    endpoint_url: str = ""
    control: LocalControl = field(default_factory=LocalControl)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _moto: Any = None
    _http: HTTPServer | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalStack:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
        moto_port = free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
        self._moto.start()
        self.endpoint_url = f"http://127.0.0.1:{moto_port}"
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
        for thread in self._threads:
            thread.join(timeout=10)
        if self._moto is not None:
            self._moto.stop()
        runtime.reset_runtime()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def info(self) -> dict[str, Any]:
        assert self.resources is not None
        r = self.resources
        return {
            "stage": self.config.stage,
            "api_url": self.api_url,
            "api_key": self.api_key,
            "aws_endpoint_url": self.endpoint_url,
            "region": r.region,
            "admin_url": self.api_url + ADMIN_PREFIX.rstrip("/"),
            "meta_table": r.meta_table,
            "shard_tables": r.shard_tables,
            "bucket": r.bucket,
            "alert_topic_arn": r.topic_arn,
            "queue_urls": r.queue_urls,
            "dlq_urls": r.dlq_urls,
            "demo_user": DEMO_USER,
        }

    # --- pieces ----------------------------------------------------------------------------------

    def _seed(self) -> None:
        """A demo user with credits, and the retention configuration the */10 job requires."""
        assert self.resources is not None
        directory = runtime.directory(
            ConsumerSettings.from_env(self.resources.consumer_env(self.config.queue_names[0]))
        )
        self.api_key = directory.create_api_key(DEMO_USER, label="local demo")
        shard = directory.shard_for(DEMO_USER)
        assert shard is not None
        from aijobs.store.jobs import JobStore

        JobStore(shard).ledger.grant(DEMO_USER, DEMO_CREDITS, datetime.now(UTC) + timedelta(days=30))
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
        from api import handler as api_handler  # the producer function, as Lambda imports it

        stack = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith(ADMIN_PREFIX):
                    status, payload, headers = stack._admin(self.command, self.path)
                else:
                    event = api_event(self.command, self.path, dict(self.headers.items()), body)
                    response = api_handler.handler(
                        event, LambdaContext("aijobs-local-api", timeout_seconds=15)
                    )
                    status = int(response["statusCode"])
                    payload = (response.get("body") or "").encode()
                    headers = dict(response.get("headers") or {})
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return  # the function logs every request itself

        # One request at a time, like one warm Lambda container; boto3 resources are not thread-safe.
        self._http = HTTPServer(("127.0.0.1", self.port), Handler)
        self.api_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._spawn("http-api", self._http.serve_forever)

    def _admin(self, method: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        """Local-only operations that a deployed stage does through AWS APIs (resume a consumer)."""
        assert self.resources is not None
        parts = path[len(ADMIN_PREFIX) :].strip("/").split("/")
        headers = {"Content-Type": "application/json"}
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "consumers"
            and parts[2] in ("pause", "resume")
        ):
            kind = parts[1]
            if kind not in self.resources.queue_arns:
                return 404, json.dumps({"code": "unknown_kind", "message": kind}).encode(), headers
            changed = self.control.set_kind(self.resources, kind, enabled=parts[2] == "resume")
            return (
                200,
                json.dumps({"kind": kind, "enabled": parts[2] == "resume", "mappings": changed}).encode(),
                headers,
            )
        if method == "GET" and parts == ["health"]:
            paused = [k for k, arn in self.resources.queue_arns.items()
                      if any(not m.enabled for m in self.control.mappings.get(arn, []))]  # fmt: skip
            return 200, json.dumps({"status": "ok", "paused": paused}).encode(), headers
        return 404, json.dumps({"code": "route_not_found", "message": path}).encode(), headers

    def _consumer_threads(self) -> int:
        if self.config.consumer_reserved_concurrency:
            return 1
        return min(self.config.esm_max_concurrency or 2, 4)

    def _start_pollers(self) -> None:
        assert self.resources is not None
        for kind in self.config.queue_names:
            for index in range(self._consumer_threads()):
                self._spawn(f"consumer-{kind}-{index}", self._consume_loop, kind, index)
        self._spawn("dlq-consumer", self._dlq_loop)

    def _consume_loop(self, kind: str, index: int) -> None:
        assert self.resources is not None
        consumer = runtime.build_consumer(ConsumerSettings.from_env(self.resources.consumer_env(kind)))
        consumer.control = self.control  # type: ignore[assignment]
        mapping = QueueMapping(
            sqs=boto3.client("sqs"),
            queue_url=self.resources.queue_urls[kind],
            queue_arn=self.resources.queue_arns[kind],
            handler=consumer.handle,
            function_name=f"aijobs-{self.config.stage}-consumer-{kind}",
            batch_size=self.config.batch_size,
            batch_window_seconds=self.config.batch_window_seconds,
            long_poll_seconds=1,
        )
        self.control.mappings.setdefault(mapping.queue_arn, []).append(mapping)
        self._poll(mapping)

    def _dlq_loop(self) -> None:
        assert self.resources is not None
        consumer = runtime.build_dead_letter_consumer(DlqSettings.from_env(self.resources.dlq_env()))
        mappings = [
            QueueMapping(
                sqs=boto3.client("sqs"),
                queue_url=self.resources.dlq_urls[kind],
                queue_arn=self.resources.dlq_arns[kind],
                handler=consumer.handle,
                function_name=f"aijobs-{self.config.stage}-dlq-consumer",
                batch_size=self.config.batch_size,
            )
            for kind in self.config.queue_names
        ]
        while not self._stop.is_set():
            received = sum(self._safe_poll(mapping) for mapping in mappings)
            if not received:
                self._stop.wait(0.5)

    def _poll(self, mapping: QueueMapping) -> None:
        while not self._stop.is_set():
            if not mapping.enabled:
                self._stop.wait(0.5)
                continue
            if not self._safe_poll(mapping):
                self._stop.wait(0.2)

    def _safe_poll(self, mapping: QueueMapping) -> int:
        try:
            outcome = mapping.poll_once()
        except Exception as error:  # keep polling, like the service would
            self.log(f"poller {mapping.function_name}: {type(error).__name__}: {error}")
            self._stop.wait(1)
            return 0
        if outcome.error is not None:
            self.log(
                f"{mapping.function_name} failed a batch: {type(outcome.error).__name__}: {outcome.error}"
            )
        return outcome.received

    def fire_cron(self, expression: str, scheduled: datetime | None = None) -> dict[str, Any]:
        """Invoke the cron dispatcher with a schedule payload, as EventBridge Scheduler does."""
        assert self.resources is not None
        ctx = runtime.build_cron_context(CronSettings.from_env(self.resources.cron_env()))
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
                        self.fire_cron(cron.text, minute)
                    except Exception as error:  # the dispatcher already logged and alerted
                        self.log(f"cron '{cron.text}' failed: {type(error).__name__}: {error}")

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _write_info(self) -> None:
        if self.info_file is not None:
            self.info_file.write_text(json.dumps(self.info(), indent=2) + "\n")
