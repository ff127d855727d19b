"""Where a CLI command acts: the local stack (`--info-file`) or a deployed stage (API URL and key
for the job commands; an AWS profile and the stack's outputs for the operator commands)."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aijobs.store.keys import IndexBuckets

# The collaborators (boto3, the layer's store and queues, the stage's configuration, the local
# stack) are imported by the methods that build them: a job command through the HTTP API (`aijobs
# status <id>`) needs none of them, and starts faster without (docs/operations/performance.md).
if TYPE_CHECKING:
    from aijobs.operator import Operator
    from aijobs.provider_plan import KindPlan
    from aijobs.queues import JobQueues
    from aijobs.scheduled.context import CronContext
    from aijobs.store.spend import SpendRecords
    from aijobs.store.tenants import Directory
    from aijobs.webhooks.secrets import WebhookSecrets
    from aijobs_cdk.stage_config import StageConfig


class TargetError(Exception):
    """The command cannot find or reach what it should act on; the message says what to pass."""


@dataclass
class ApiResponse:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Target:
    stage: str
    api_url: str | None = None
    api_key: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    meta_table: str | None = None
    shard_tables: list[str] = field(default_factory=list)
    # The stage's INDEX_BUCKETS / INDEX_BUCKETS_READ (stack outputs or info file; absent: defaults).
    index_buckets: IndexBuckets = field(default_factory=IndexBuckets)
    bucket: str | None = None
    alert_topic_arn: str | None = None
    queue_urls: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)
    # Where finished jobs' webhook deliveries go (operator fail-final and re-runs finish jobs too).
    webhook_queue_url: str | None = None
    admin_url: str | None = None
    # The local stack's operator key: its /_local/ control endpoints require an admin principal.
    admin_key: str | None = None
    consumer_functions: dict[str, str] = field(default_factory=dict)
    cron_function: str | None = None
    # The spend brake's configuration (SPEND_DAILY_CAP_USD, SPEND_TIME_ZONE): "" means no brake.
    spend_cap_usd: str = ""
    spend_time_zone: str = "UTC"

    @property
    def is_local(self) -> bool:
        return self.endpoint_url is not None

    # --- sources -----------------------------------------------------------------------------

    @classmethod
    def from_info_file(cls, path: Path) -> Target:
        try:
            info = json.loads(path.read_text())
        except FileNotFoundError:
            raise TargetError(
                f"no info file {path}: start the local stack with `aijobs dev --info-file {path}`"
            ) from None
        except json.JSONDecodeError as error:
            raise TargetError(f"{path} is not an aijobs info file: {error}") from None
        target = cls(
            stage=info["stage"],
            api_url=info["api_url"],
            api_key=info["api_key"],
            endpoint_url=info["aws_endpoint_url"],
            region=info.get("region"),
            meta_table=info["meta_table"],
            shard_tables=list(info["shard_tables"]),
            index_buckets=_buckets(info.get("index_buckets"), info.get("index_buckets_read")),
            bucket=info.get("bucket"),
            alert_topic_arn=info.get("alert_topic_arn"),
            queue_urls=dict(info["queue_urls"]),
            dlq_urls=dict(info["dlq_urls"]),
            webhook_queue_url=info.get("webhook_queue_url"),
            admin_url=info.get("admin_url"),
            admin_key=info.get("admin_key"),
            spend_cap_usd=info.get("spend_daily_cap_usd", ""),
            spend_time_zone=info.get("spend_time_zone", "UTC"),
        )
        from aijobs import aws
        from aijobs_cli.local.stack import local_environment

        os.environ.update(local_environment(info["aws_endpoint_url"]))
        aws.reset_clients()
        return target

    @classmethod
    def from_stack(cls, stack_name: str, *, region: str | None, profile: str | None) -> Target:
        """A deployed stage, from its CloudFormation outputs (needs AWS credentials)."""
        if profile:
            os.environ["AWS_PROFILE"] = profile
        if region:
            os.environ["AWS_DEFAULT_REGION"] = region
        import boto3

        from aijobs_cdk.stage_config import split_list

        try:
            stack = boto3.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
        except Exception as error:
            raise TargetError(f"cannot read stack {stack_name!r}: {error}") from None
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        stage = stack_name.removeprefix("aijobs-")
        target = cls(
            stage=stage,
            api_url=outputs.get("ApiUrl", "").rstrip("/") or None,
            region=region,
            meta_table=outputs.get("MetaTableName"),
            shard_tables=[t for t in outputs.get("ShardTableNames", "").split(",") if t],
            index_buckets=_buckets(outputs.get("IndexBuckets"), outputs.get("IndexBucketsRead")),
            bucket=outputs.get("BucketName"),
            alert_topic_arn=outputs.get("AlertTopicArn"),
            cron_function=outputs.get("CronDispatcherFunction"),
            webhook_queue_url=outputs.get("WebhookQueueUrl"),
            # Present only on a stage with a spend brake.
            spend_cap_usd=outputs.get("SpendDailyCapUsd", ""),
            spend_time_zone=outputs.get("SpendTimeZone", "UTC"),
        )
        # Kinds come from the QueueNames output and each kind's outputs are keyed by its binding:
        # production queue names are generated, so nothing is read out of a queue's name.
        names = outputs.get("QueueNames", "")
        for kind in split_list("" if names == "-" else names):  # "-": the stage has no queue
            binding = _binding(kind)
            for prefix, into in (
                ("QueueUrl", target.queue_urls),
                ("DlqUrl", target.dlq_urls),
                ("ConsumerFunction", target.consumer_functions),
            ):
                if outputs.get(prefix + binding):
                    into[kind] = outputs[prefix + binding]
        return target

    # --- HTTP API ----------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> ApiResponse:
        if not self.api_url:
            raise TargetError("no API URL: pass --info-file FILE, or --api-url URL with --api-key KEY")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.api_url.rstrip("/") + path, data=data, method=method)  # noqa: S310
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - http(s) URL from config
                return ApiResponse(response.status, _json(response.read()), dict(response.headers.items()))
        except urllib.error.HTTPError as error:
            return ApiResponse(error.code, _json(error.read()), dict(error.headers.items()))
        except urllib.error.URLError as error:
            raise TargetError(f"cannot reach {self.api_url}: {error.reason}") from None

    def upload(self, form: dict[str, Any], data: bytes, filename: str) -> None:
        """Send `data` with a presigned form from `POST /uploads` (multipart/form-data, as S3 wants:
        every field first, the file last). A refusal (wrong type or size, expired form) raises
        TargetError with S3's own reason."""
        if form.get("method") != "POST":
            raise TargetError(f"unsupported upload method {form.get('method')!r}")
        content_type = str(form["fields"].get("Content-Type", "application/octet-stream"))
        body, boundary = _multipart(dict(form["fields"]), data, filename, content_type)
        request = urllib.request.Request(str(form["url"]), data=body, method="POST")  # noqa: S310
        request.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
        for key, value in dict(form.get("headers") or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=120):  # noqa: S310 - the URL the API signed
                return
        except urllib.error.HTTPError as error:
            raise TargetError(f"the upload was refused: {error.code} {_s3_reason(error.read())}") from None
        except urllib.error.URLError as error:
            raise TargetError(f"cannot reach {form['url']}: {error.reason}") from None

    def local_control(self) -> Target:
        """The local stack's /_local/ control endpoints, called with its operator (admin) key."""
        if not self.admin_url or not self.admin_key:
            raise TargetError(
                "the info file has no admin_url/admin_key: restart the local stack with `aijobs dev`"
            )
        return Target(stage=self.stage, api_url=self.admin_url, api_key=self.admin_key)

    # --- operator collaborators ----------------------------------------------------------------

    def _need(self, value: Any, what: str) -> Any:
        if not value:
            raise TargetError(f"this target has no {what}: pass --info-file FILE or --stack NAME")
        return value

    def directory(self) -> Directory:
        from aijobs import aws
        from aijobs.store.tenants import Directory

        resource = aws.dynamodb()
        return Directory(
            resource.Table(self._need(self.meta_table, "meta table")),
            tuple(resource.Table(name) for name in self._need(self.shard_tables, "shard tables")),
            buckets=self.index_buckets,
        )

    def queues(self) -> JobQueues:
        from aijobs import aws
        from aijobs.queues import JobQueues

        return JobQueues(
            aws.sqs(),
            self._need(self.queue_urls, "queue URLs"),
            self.dlq_urls,
            webhook_url=self.webhook_queue_url,
        )

    def spend_records(self) -> SpendRecords:
        """The spend brake's items; TargetError on a stage without a brake (nothing is counted)."""
        if not self.spend_cap_usd:
            raise TargetError(
                f"stage {self.stage!r} has no spend brake: set SPEND_DAILY_CAP_USD in .env.{self.stage} "
                "and deploy (or restart `aijobs dev`)"
            )
        from aijobs import aws
        from aijobs.store.spend import SpendRecords

        return SpendRecords(aws.dynamodb().Table(self._need(self.meta_table, "meta table")))

    def webhook_secrets(self) -> WebhookSecrets:
        from aijobs import aws
        from aijobs.webhooks.secrets import WebhookSecrets

        return WebhookSecrets(aws.dynamodb().Table(self._need(self.meta_table, "meta table")))

    def operator(self) -> Operator:
        from aijobs.domain import utcnow
        from aijobs.operator import Operator

        return Operator(directory=self.directory(), queues=self.queues(), clock=utcnow)

    def deployed_plans(self) -> tuple[dict[str, KindPlan], str]:
        """The provider plan a deployed stage runs with, read from its cron dispatcher's
        environment (the plan its weekly model check reads), and the stage's region (from that
        function's ARN). Needs `lambda:GetFunctionConfiguration` on it."""
        from aijobs import aws
        from aijobs.provider_plan import plans_from_setting

        function = self._need(self.cron_function, "cron dispatcher function (output CronDispatcherFunction)")
        try:
            config = aws.lambda_().get_function_configuration(FunctionName=function)
        except Exception as error:
            raise TargetError(f"cannot read the cron dispatcher {function!r}: {error}") from None
        env = config.get("Environment", {}).get("Variables", {})
        if not env.get("KIND_PROVIDERS"):
            raise TargetError(
                f"the cron dispatcher {function!r} carries no provider plan (KIND_PROVIDERS): the stage was "
                "deployed before `aijobs models check` existed; deploy it again, or pass --stage STAGE"
            )
        return plans_from_setting(env), config["FunctionArn"].split(":")[3]

    def cron_context(self, config: StageConfig) -> CronContext:
        from aijobs import aws
        from aijobs.alerts import Alerts
        from aijobs.domain import utcnow
        from aijobs.scheduled.context import CronContext

        return CronContext(
            stage=self.stage,
            directory=self.directory(),
            meta=aws.dynamodb().Table(self._need(self.meta_table, "meta table")),
            queues=self.queues(),
            alerts=Alerts(aws.sns(), self._need(self.alert_topic_arn, "alert topic")),
            kinds=tuple(self.queue_urls),
            max_attempts=config.max_retries + 1,
            lease=timedelta(seconds=config.lease_seconds),
            recheck=timedelta(seconds=config.provider_recheck_seconds),
            stuck_after=timedelta(seconds=config.stuck_queued_seconds),
            clock=utcnow,
            limits=config.kind_limits,
        )


def _buckets(write: Any, read: Any) -> IndexBuckets:
    """The stage's bucket counts; a stage deployed before write sharding publishes none (defaults)."""
    if write in (None, ""):
        return IndexBuckets()
    try:
        return IndexBuckets(int(write), int(read or 0))
    except ValueError as error:
        raise TargetError(f"the stage's index buckets are invalid: {error}") from None


def _binding(kind: str) -> str:
    """The output-id form of a queue's binding (CloudFormation ids drop the underscores)."""
    from aijobs_cdk.stage_config import binding_name

    return binding_name(kind).replace("_", "")


def _multipart(fields: dict[str, str], data: bytes, filename: str, content_type: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    safe_name = re.sub(r'["\r\n\\]', "_", filename)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe_name}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n".encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return b"".join(parts), boundary


def _s3_reason(raw: bytes) -> str:
    """`Code: Message` from S3's XML error body (or the start of whatever came back)."""
    text = raw.decode(errors="replace")
    code = re.search(r"<Code>(.*?)</Code>", text, re.DOTALL)
    message = re.search(r"<Message>(.*?)</Message>", text, re.DOTALL)
    if code is None:
        return text.strip()[:300] or "no reason given"
    return f"{code.group(1)}: {message.group(1) if message else ''}".strip(": ")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return {"raw": raw.decode(errors="replace")}
