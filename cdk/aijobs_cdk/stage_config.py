"""Stage configuration: the keys of `.env.<stage>` and the rules that derive infrastructure from them.

One source of truth for the CDK app, the local stack and the functions: queue names and their
binding names, queue and retry tuning, crons. Parsing never touches AWS; every error names the
key and the entry at fault so `cdk synth` fails with a message a person can act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

# What the functions read back from their environment lives in aijobs.bindings (their cold starts
# skip this parser); the stage config's users keep importing it from here.
from aijobs.bindings import DEAD_LETTER_QUEUES as DEAD_LETTER_QUEUES
from aijobs.bindings import DEFAULT_JWT_OPERATOR_GROUP as DEFAULT_JWT_OPERATOR_GROUP
from aijobs.bindings import ESM_MAX_CONCURRENCY_MAX as ESM_MAX_CONCURRENCY_MAX
from aijobs.bindings import ESM_MAX_CONCURRENCY_MIN as ESM_MAX_CONCURRENCY_MIN
from aijobs.bindings import EVENT_SOURCE_MAPPINGS as EVENT_SOURCE_MAPPINGS
from aijobs.bindings import KIND_LIMITS, KindLimits, limits_setting
from aijobs.bindings import ConfigError as ConfigError
from aijobs.bindings import binding_name as binding_name
from aijobs.bindings import parse_prices as parse_prices
from aijobs.bindings import queue_name_of as queue_name_of
from aijobs.bindings import split_list as split_list
from aijobs.bounds import SPEND_CAP_USD, TENANT_MAX_RUNNING, BoundError
from aijobs.cron import CronError, CronExpression, parse_cron
from aijobs.kinds.base import KIND_NAME_PATTERN, Tuning
from aijobs.provider_plan import (
    CLASSIFY,
    KindPlan,
    ProviderPlanError,
    plans_setting,
)
from aijobs.provider_plan import PROVIDERS as PROVIDER_NAMES
from aijobs_cdk.provider_plans import parse_provider_plan

APP_NAME = "aijobs"
SQS_QUEUE_NAME_MAX = 80
DLQ_SUFFIX = "-dlq"
# Queues of the stage itself, named like a kind's outside production: no kind may take their names.
PARKING_QUEUE = "dlq-parking"
CRON_DEAD_LETTER_QUEUE = "cron-dead-letters"
# Webhook deliveries (aijobs.webhooks): `aijobs-<stage>-webhooks` and its `-dlq`.
WEBHOOK_QUEUE = "webhooks"
RESERVED_QUEUE_NAMES = (PARKING_QUEUE, CRON_DEAD_LETTER_QUEUE, WEBHOOK_QUEUE)
# SQS caps a queue's visibility timeout at 12 hours.
SQS_VISIBILITY_MAX_SECONDS = 12 * 60 * 60
# SQS's longest message retention: the queues at the end of a redrive chain keep it (the parking
# queue of the DLQs, the webhook DLQ). SQS counts a standard queue's retention from a message's
# first enqueue, also after a redrive, so each queue must keep longer than the one feeding it.
SQS_RETENTION_MAX_DAYS = 14
# Only the attempt budget on the job row dead-letters a job: the consumer hands a message to the
# DLQ itself when the budget is spent, and re-sends a fresh copy instead of returning a record
# that spent no attempt. SQS's redrive stays as the safety net for receives that never reach our
# code (a throttled invocation, e.g. with reserved concurrency 1; a function that fails to start),
# so it allows this many receives beyond the budget.
RECEIVE_HEADROOM = 5
LEASE_MARGIN_SECONDS = 30
# Webhook deliveries per consumer invocation (each POST waits up to WEBHOOK_TIMEOUT_SECONDS).
WEBHOOK_BATCH_SIZE = 5

_QUEUE_NAME = re.compile(KIND_NAME_PATTERN)
_STAGE_NAME = re.compile(r"[a-z][a-z0-9]{0,9}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# A standard SNS topic (CloudWatch alarm actions cannot publish to FIFO topics).
_TOPIC_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:sns:[a-z]{2}(?:-[a-z]+)+-[0-9]:[0-9]{12}:[A-Za-z0-9_-]{1,256}")
_WHOLE_NUMBER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class _IntKey:
    default: int
    low: int
    high: int
    doc: str


# Integer keys with their defaults and bounds. Deployed defaults follow docs/design.md.
INT_KEYS: dict[str, _IntKey] = {
    "MAX_RETRIES": _IntKey(3, 0, 10, "automatic retries after the first attempt, then the DLQ"),
    "BATCH_SIZE": _IntKey(5, 1, 10_000, "records per consumer invocation (above 10 needs a window)"),
    "BATCH_WINDOW_SECONDS": _IntKey(10, 0, 300, "how long the event-source mapping gathers a batch"),
    "CONSUMER_TIMEOUT_SECONDS": _IntKey(60, 3, 900, "queue consumer Lambda timeout"),
    "CONSUMER_MEMORY_MB": _IntKey(256, 128, 10240, "queue consumer Lambda memory"),
    "SHARD_COUNT": _IntKey(1, 1, 32, "tenant shard tables"),
    "INDEX_BUCKETS": _IntKey(8, 1, 64, "write-sharding buckets of the index partitions all tenants share"),
    # 0 (the default) reads exactly INDEX_BUCKETS; see docs/operations/scale.md for changing the count.
    "INDEX_BUCKETS_READ": _IntKey(0, 0, 64, "buckets readers query (0: INDEX_BUCKETS; >= it while lowering)"),
    "LOG_RETENTION_DAYS": _IntKey(30, 1, 3653, "CloudWatch Logs retention of every function"),
    "RESULT_RETENTION_DAYS": _IntKey(30, 1, 3650, "S3 lifecycle expiry of job results"),
    "INPUT_RETENTION_DAYS": _IntKey(7, 1, 3650, "S3 lifecycle expiry of uploaded job inputs"),
    "MAX_INLINE_INPUT_BYTES": _IntKey(16_384, 256, 262_144, "largest inline input, in UTF-8 bytes"),
    # Job queue < its DLQ < the parking queue (SQS_RETENTION_MAX_DAYS): checked in parse_stage_config.
    "QUEUE_RETENTION_DAYS": _IntKey(4, 1, 12, "how long a job queue and the webhook queue keep a message"),
    "DLQ_RETENTION_DAYS": _IntKey(7, 2, 13, "how long a kind's DLQ keeps a message, from its first send"),
    "API_THROTTLE_RATE": _IntKey(50, 1, 10_000, "HTTP API steady-state requests per second"),
    "API_THROTTLE_BURST": _IntKey(100, 1, 10_000, "HTTP API burst"),
    "RETRY_BASE_DELAY_SECONDS": _IntKey(
        10, 0, 900, "first back-off of a transient failure (doubles, with jitter)"
    ),
    "RETRY_MAX_DELAY_SECONDS": _IntKey(900, 1, 43_200, "longest back-off of any retry"),
    "THROTTLE_DELAY_SECONDS": _IntKey(60, 0, 43_200, "back-off of a 429 without Retry-After (doubles)"),
    "PROVIDER_RECHECK_SECONDS": _IntKey(30, 0, 900, "re-check interval of a provider task still running"),
    "STUCK_QUEUED_SECONDS": _IntKey(900, 1, 86_400, "age at which the sweeper re-sends a queued job"),
    # Its bounds are a tenant's own cap's (aijobs.bounds), which `aijobs tenants limit` sets.
    "TENANT_MAX_RUNNING": _IntKey(
        0,
        int(TENANT_MAX_RUNNING.low),
        int(TENANT_MAX_RUNNING.high),
        "jobs of one tenant running at once, per kind (0: no cap; per tenant: aijobs tenants)",
    ),
    "TENANT_HOLD_SECONDS": _IntKey(
        30, 1, 900, "how long a job of a tenant at its running cap waits before it is tried again"
    ),
    # Adaptive concurrency (aijobs.aimd): when a kind narrows, how long it waits to widen, by how much.
    "THROTTLE_NARROW_PERCENT": _IntKey(10, 1, 100, "share of attempts throttled (429) that narrows a kind"),
    "THROTTLE_NARROW_MIN": _IntKey(5, 1, 10_000, "throttled attempts in the window needed to narrow"),
    "THROTTLE_WINDOW_MINUTES": _IntKey(5, 1, 60, "minutes of throttle counters each decision reads"),
    "CONCURRENCY_COOLDOWN_SECONDS": _IntKey(180, 0, 3600, "least time between two narrowings (or widenings)"),
    "CONCURRENCY_QUIET_SECONDS": _IntKey(600, 0, 3600, "time without a throttle before a kind widens"),
    "CONCURRENCY_STEP": _IntKey(2, 1, 100, "how much a kind's MaximumConcurrency widens per step"),
    # Webhooks (aijobs.webhooks): a job's final outcome POSTed to its callbackUrl.
    "WEBHOOK_TIMEOUT_SECONDS": _IntKey(10, 1, 30, "how long one webhook POST may take (connect + answer)"),
    "WEBHOOK_MAX_ATTEMPTS": _IntKey(10, 1, 30, "webhook attempts on 5xx/408/429/timeouts before giving up"),
    "WEBHOOK_RETRY_BASE_DELAY_SECONDS": _IntKey(30, 0, 3600, "first webhook back-off (doubles, with jitter)"),
    "WEBHOOK_RETRY_MAX_DELAY_SECONDS": _IntKey(3600, 1, 43_200, "longest webhook back-off"),
    # 0 (the default) derives the lease from the consumer timeout; see StageConfig.job_lease_seconds.
    "JOB_LEASE_SECONDS": _IntKey(
        0, 0, 43_200, "how long a claimed job is held before another consumer may take it"
    ),
}
# SKIP_KINDS: declared kinds (aijobs/kinds/) this stage deliberately does not deploy.
LIST_KEYS = ("QUEUE_NAMES", "CRONS", "KIND_PRICES", "SKIP_KINDS")
OPTIONAL_KEYS = (
    "QUEUE_MAX_CONCURRENCY",
    "ALERT_EMAIL",
    "ALERT_TOPIC_ARN",
    "PROVIDER",
    "KIND_PROVIDERS",
    "KIND_MODELS",
    "KIND_ALLOWED_MODELS",
    "KIND_FALLBACKS",
    "OPENAI_BASE_URL",
    "OPENAI_SECRET_NAME",
    "AUTH_MODE",
    "JWT_ISSUER_URL",
    "JWT_AUDIENCE",
    "JWT_OPERATOR_GROUP",
    "SPEND_DAILY_CAP_USD",
    "SPEND_TIME_ZONE",
    # 1: webhooks may call 127.0.0.1/::1 (the local stage only; every other stage refuses it).
    "WEBHOOK_ALLOW_LOOPBACK",
)
AUTH_MODES = ("api_key", "jwt")
# A Cognito group name (1-128 characters), less what the gateway's flattened claim ("[a b]",
# "a,b") could not tell apart from a separator: whitespace, commas, brackets and quotes.
_GROUP_NAME = re.compile(r'[^\s,\[\]"\']{1,128}')
PROVIDERS = PROVIDER_NAMES
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
_SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
KNOWN_KEYS = frozenset(INT_KEYS) | frozenset(LIST_KEYS) | frozenset(OPTIONAL_KEYS)


def check_unique_bindings(queue_names: tuple[str, ...]) -> None:
    """Two queue names that map to one binding would silently share a queue URL: refuse them."""
    owners: dict[str, str] = {}
    for name in queue_names:
        binding = binding_name(name)
        if binding in owners:
            raise ConfigError(
                f"QUEUE_NAMES: {owners[binding]!r} and {name!r} both map to binding {binding}; rename one"
            )
        owners[binding] = name


def resource_prefix(stage: str) -> str:
    return f"{APP_NAME}-{stage}"


def queue_resource_name(stage: str, queue_name: str) -> str:
    """The SQS queue name of a job kind on a stage; the DLQ adds `-dlq`."""
    return f"{resource_prefix(stage)}-{queue_name}"


FLOW_KEYS = (
    "THROTTLE_NARROW_PERCENT",
    "THROTTLE_NARROW_MIN",
    "THROTTLE_WINDOW_MINUTES",
    "CONCURRENCY_COOLDOWN_SECONDS",
    "CONCURRENCY_QUIET_SECONDS",
    "CONCURRENCY_STEP",
)


def event_source_mappings_env(config: StageConfig, mapping_ids: Mapping[str, str]) -> dict[str, str]:
    """`EVENT_SOURCE_MAPPINGS` from kind -> mapping id (ids may be CDK tokens), leaving out a kind
    whose consumer runs with reserved concurrency 1 (the stage's or its own): the controller never
    adjusts it."""
    governed = config.governed_kinds
    entries = [f"{kind}={uuid}" for kind, uuid in mapping_ids.items() if kind in governed]
    return {EVENT_SOURCE_MAPPINGS: ";".join(entries)}


def dead_letter_queues_env(dlq_names: Mapping[str, str]) -> dict[str, str]:
    """`DEAD_LETTER_QUEUES` from kind -> DLQ name (names may be CDK tokens)."""
    return {DEAD_LETTER_QUEUES: ";".join(f"{kind}={name}" for kind, name in dlq_names.items())}


def queue_name_from_resource(stage: str, resource_name: str) -> str | None:
    """Invert `queue_resource_name` for the fixed names of the local stack and non-production
    stages; None for another stage's queue. A DLQ's name gives its kind too, since no kind may end
    with `-dlq`. Only the tests use it (to read the shipped events' source ARNs): functions and the
    CLI take their queues and kinds from their environment and the stack's outputs."""
    prefix = resource_prefix(stage) + "-"
    if not resource_name.startswith(prefix):
        return None
    return resource_name[len(prefix) :].removesuffix(DLQ_SUFFIX) or None


@dataclass(frozen=True)
class QueueTuning:
    """One kind's queue and consumer: the stage's values with the kind's own (aijobs.kinds.base.Tuning)."""

    kind: str
    timeout_seconds: int
    memory_mb: int
    max_retries: int
    batch_size: int
    batch_window_seconds: int
    # At most this many consumer instances (None: no cap below the mapping's maximum).
    max_concurrency: int | None
    lease_seconds: int

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1

    @property
    def max_receive_count(self) -> int:
        """Receives before SQS moves a message to the DLQ: the attempt budget (first attempt plus
        retries) plus headroom, so the row's budget, not SQS, decides (see RECEIVE_HEADROOM)."""
        return self.max_attempts + RECEIVE_HEADROOM

    @property
    def visibility_timeout_seconds(self) -> int:
        """AWS guidance for SQS-triggered Lambdas: at least 6 x the function timeout + the window."""
        return 6 * self.timeout_seconds + self.batch_window_seconds

    @property
    def esm_max_concurrency(self) -> int | None:
        """`MaximumConcurrency` on the consumer's event-source mapping (None: unlimited or 1)."""
        if self.max_concurrency is None or self.max_concurrency < ESM_MAX_CONCURRENCY_MIN:
            return None
        return self.max_concurrency

    @property
    def reserved_concurrency(self) -> int | None:
        """A cap of 1 cannot be a MaximumConcurrency (minimum 2): it is reserved concurrency 1 on the
        consumer function, and the adaptive controller leaves the kind alone."""
        return 1 if self.max_concurrency == 1 else None

    @property
    def limits(self) -> KindLimits:
        """What the cron knows of the kind (KIND_LIMITS)."""
        return KindLimits(
            attempts=self.max_attempts,
            lease=self.lease_seconds,
            ceiling=self.max_concurrency or ESM_MAX_CONCURRENCY_MAX,
        )


@dataclass(frozen=True)
class StageConfig:
    """Everything a stage is built from. Derived values are properties so they cannot drift."""

    stage: str
    queue_names: tuple[str, ...]
    crons: tuple[CronExpression, ...]
    queue_max_concurrency: int | None
    alert_email: str | None
    max_retries: int
    batch_size: int
    batch_window_seconds: int
    consumer_timeout_seconds: int
    consumer_memory_mb: int
    shard_count: int
    index_buckets: int
    index_buckets_read: int
    log_retention_days: int
    result_retention_days: int
    input_retention_days: int
    max_inline_input_bytes: int
    queue_retention_days: int
    dlq_retention_days: int
    api_throttle_rate: int
    api_throttle_burst: int
    retry_base_delay_seconds: int
    retry_max_delay_seconds: int
    throttle_delay_seconds: int
    provider_recheck_seconds: int
    throttle_narrow_percent: int
    throttle_narrow_min: int
    throttle_window_minutes: int
    concurrency_cooldown_seconds: int
    concurrency_quiet_seconds: int
    concurrency_step: int
    job_lease_seconds: int
    stuck_queued_seconds: int
    tenant_max_running: int
    tenant_hold_seconds: int
    provider: str
    kind_prices: tuple[tuple[str, int], ...] = ()
    # Declared kinds this stage does not deploy (SKIP_KINDS): saying so is what keeps a kind added
    # to aijobs/kinds/ from being forgotten by a stage (aijobs_cdk.stage.check_registrations).
    skip_kinds: tuple[str, ...] = ()
    # The Tuning of each configured kind whose declaration has one (read when the config is parsed).
    kind_tuning: tuple[tuple[str, Tuning], ...] = ()
    # Provider and model per kind (plus `classify`); see aijobs.provider_plan.
    provider_plans: tuple[KindPlan, ...] = ()
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    # Secrets Manager secret holding the OpenAI-compatible API key (deployed stages).
    openai_secret_name: str | None = None
    auth_mode: str = "api_key"
    jwt_issuer_url: str | None = None
    jwt_audience: str | None = None
    jwt_operator_group: str = DEFAULT_JWT_OPERATOR_GROUP
    # An existing SNS topic that alarms and alerts go to instead of a topic the stack creates.
    alert_topic_arn: str | None = None
    webhook_timeout_seconds: int = 10
    webhook_max_attempts: int = 10
    webhook_retry_base_delay_seconds: int = 30
    webhook_retry_max_delay_seconds: int = 3600
    webhook_allow_loopback: bool = False
    # The spend brake (aijobs.spend): the stage's daily model-spend cap in USD ("": no brake) and
    # the IANA time zone whose midnight starts a new day.
    spend_daily_cap_usd: str = ""
    spend_time_zone: str = "UTC"

    @property
    def is_production(self) -> bool:
        return self.stage == "prod"

    @property
    def prices(self) -> dict[str, int]:
        """Credits per job of every configured kind, and per call of the synchronous `classify`
        (which every stage serves): KIND_PRICES, else the kind's declared price."""
        listed = dict(self.kind_prices)
        return {kind: listed.get(kind, declared_price(kind)) for kind in (*self.queue_names, CLASSIFY)}

    @property
    def prices_setting(self) -> str:
        """`KIND_PRICES` as the functions read it: every configured kind with its price."""
        return ";".join(f"{kind}:{price}" for kind, price in self.prices.items())

    # The tuning part of each function's environment (names and URLs are added by whoever
    # provisions: the CDK stack or the local stack). One place, so the two cannot drift apart.

    def plan(self, kind: str) -> KindPlan:
        """The provider plan of a kind (or `classify`)."""
        for plan in self.provider_plans:
            if plan.kind == kind:
                return plan
        raise KeyError(kind)

    def _provider_env(self) -> dict[str, str]:
        env = {**plans_setting(self.provider_plans), "OPENAI_BASE_URL": self.openai_base_url}
        if self.openai_secret_name:
            env["OPENAI_SECRET_NAME"] = self.openai_secret_name
        return env

    def table_settings_env(self) -> dict[str, str]:
        """What every function reading or writing the shard tables needs beyond their names."""
        return {
            "INDEX_BUCKETS": str(self.index_buckets),
            "INDEX_BUCKETS_READ": str(self.index_buckets_read or self.index_buckets),
        }

    def api_settings_env(self) -> dict[str, str]:
        return {
            "MAX_INLINE_INPUT_BYTES": str(self.max_inline_input_bytes),
            # The synchronous classify path's provider.
            "PROVIDER": self.plan(CLASSIFY).provider,
            "AUTH_MODE": self.auth_mode,
            "JWT_OPERATOR_GROUP": self.jwt_operator_group,
            "KIND_PRICES": self.prices_setting,
            "WEBHOOK_ALLOW_LOOPBACK": str(int(self.webhook_allow_loopback)),
            **self._provider_env(),
            **self.spend_env(),
        }

    def spend_env(self) -> dict[str, str]:
        """The spend brake's keys, as the producer and the consumers read them."""
        return {"SPEND_DAILY_CAP_USD": self.spend_daily_cap_usd, "SPEND_TIME_ZONE": self.spend_time_zone}

    @property
    def workflow_children(self) -> dict[str, str]:
        """Configured workflow kind -> its child kind (aijobs.workflows.registry)."""
        return _workflow_children(self.queue_names)

    def linked_queues(self, kind: str) -> tuple[str, ...]:
        """Other kinds' queues a kind's consumer sends to: a workflow's child kind; for a child
        kind, the workflows whose parts it runs (the last child queues its parent's merge)."""
        children = self.workflow_children
        linked = [children[kind]] if kind in children else []
        linked += [parent for parent, child in children.items() if child == kind]
        return tuple(dict.fromkeys(linked))

    def consumer_settings_env(self, kind: str) -> dict[str, str]:
        tuning = self.queue_tuning(kind)
        return {
            "LINKED_QUEUES": ";".join(self.linked_queues(kind)),
            "STUCK_QUEUED_SECONDS": str(self.stuck_queued_seconds),
            "MAX_RETRIES": str(tuning.max_retries),
            "PROVIDER": self.plan(kind).provider,
            **self._provider_env(),
            "RETRY_BASE_DELAY_SECONDS": str(self.retry_base_delay_seconds),
            "RETRY_MAX_DELAY_SECONDS": str(self.retry_max_delay_seconds),
            "THROTTLE_DELAY_SECONDS": str(self.throttle_delay_seconds),
            "PROVIDER_RECHECK_SECONDS": str(self.provider_recheck_seconds),
            "JOB_LEASE_SECONDS": str(tuning.lease_seconds),
            **self.spend_env(),
            "TENANT_MAX_RUNNING": str(self.tenant_max_running),
            "TENANT_HOLD_SECONDS": str(self.tenant_hold_seconds),
        }

    def webhook_settings_env(self) -> dict[str, str]:
        """The webhook consumer's tuning (its queue URLs are added by whoever provisions)."""
        return {
            "WEBHOOK_TIMEOUT_SECONDS": str(self.webhook_timeout_seconds),
            "WEBHOOK_MAX_ATTEMPTS": str(self.webhook_max_attempts),
            "WEBHOOK_RETRY_BASE_DELAY_SECONDS": str(self.webhook_retry_base_delay_seconds),
            "WEBHOOK_RETRY_MAX_DELAY_SECONDS": str(self.webhook_retry_max_delay_seconds),
            "WEBHOOK_ALLOW_LOOPBACK": str(int(self.webhook_allow_loopback)),
        }

    @property
    def webhook_max_receive_count(self) -> int:
        """Receives of one delivery message before SQS dead-letters it: the attempt budget on the
        row decides first (the consumer moves the message itself); this is headroom above it."""
        return self.webhook_max_attempts + RECEIVE_HEADROOM

    @property
    def webhook_consumer_timeout_seconds(self) -> int:
        """The webhook consumer's Lambda timeout: a batch of WEBHOOK_BATCH_SIZE POSTs, one by one."""
        return WEBHOOK_BATCH_SIZE * self.webhook_timeout_seconds + 10

    def dlq_settings_env(self) -> dict[str, str]:
        # Every kind's queue (QUEUE_NAMES and the `Q_*` URLs) is added by whoever provisions, as
        # for the API and the cron. Per kind (a kind's declaration may change it): the attempt
        # budget that, spent, makes a dead letter finalize its job.
        return {KIND_LIMITS: self.kind_limits_setting}

    @property
    def kind_limits(self) -> dict[str, KindLimits]:
        """Each configured kind's attempts, lease and concurrency ceiling (what the cron and the DLQ
        consumer are told as KIND_LIMITS)."""
        return {kind: self.queue_tuning(kind).limits for kind in self.queue_names}

    @property
    def kind_limits_setting(self) -> str:
        """`KIND_LIMITS`: each configured kind's attempts, lease and concurrency ceiling."""
        return limits_setting(self.kind_limits)

    def cron_settings_env(self) -> dict[str, str]:
        return {
            "MAX_RETRIES": str(self.max_retries),
            "JOB_LEASE_SECONDS": str(self.lease_seconds),
            "PROVIDER_RECHECK_SECONDS": str(self.provider_recheck_seconds),
            "STUCK_QUEUED_SECONDS": str(self.stuck_queued_seconds),
            # Adaptive concurrency: its ceiling (empty: the mapping's maximum) and thresholds.
            "QUEUE_MAX_CONCURRENCY": str(self.queue_max_concurrency or ""),
            **{key: str(getattr(self, key.lower())) for key in FLOW_KEYS},
            # Per kind (a kind's declaration may change them): attempts, lease, concurrency ceiling.
            KIND_LIMITS: self.kind_limits_setting,
            # The weekly model check: every model the stage's kinds may call.
            **plans_setting(self.provider_plans),
        }

    @property
    def bindings(self) -> dict[str, str]:
        """Queue name -> binding name (`Q_...`)."""
        return {name: binding_name(name) for name in self.queue_names}

    def queue_tuning(self, kind: str) -> QueueTuning:
        """A kind's queue and consumer: the stage's values, changed where its declaration says
        (aijobs.kinds.base.Tuning). A workflow or an undeclared name keeps the stage's."""
        own = dict(self.kind_tuning).get(kind)
        timeout = _tuned(own, "timeout_seconds", self.consumer_timeout_seconds)
        caps = [cap for cap in (self.queue_max_concurrency, own and own.max_concurrency) if cap]
        # The stage's JOB_LEASE_SECONDS where it covers the kind's timeout, else the timeout plus the
        # margin: a consumer still running must never lose its job.
        stage_lease = self.job_lease_seconds
        lease = stage_lease if stage_lease >= timeout else timeout + LEASE_MARGIN_SECONDS
        return QueueTuning(
            kind=kind,
            timeout_seconds=timeout,
            memory_mb=_tuned(own, "memory_mb", self.consumer_memory_mb),
            max_retries=_tuned(own, "max_retries", self.max_retries),
            batch_size=_tuned(own, "batch_size", self.batch_size),
            batch_window_seconds=self.batch_window_seconds,
            max_concurrency=min(caps) if caps else None,
            lease_seconds=lease,
        )

    @property
    def governed_kinds(self) -> tuple[str, ...]:
        """Kinds whose mapping the adaptive controller sizes (not those at reserved concurrency 1)."""
        return tuple(kind for kind in self.queue_names if not self.queue_tuning(kind).reserved_concurrency)

    @property
    def max_receive_count(self) -> int:
        """The stage's maxReceiveCount (a kind's own: QueueTuning.max_receive_count)."""
        return self.max_retries + 1 + RECEIVE_HEADROOM

    @property
    def lease_seconds(self) -> int:
        """`JOB_LEASE_SECONDS`, or by default the consumer timeout plus a margin: a Lambda is
        killed at its timeout, so its claim may be taken over shortly after."""
        return self.job_lease_seconds or self.consumer_timeout_seconds + LEASE_MARGIN_SECONDS

    @property
    def visibility_timeout_seconds(self) -> int:
        """The stage's visibility timeout (a kind's own: QueueTuning.visibility_timeout_seconds)."""
        return 6 * self.consumer_timeout_seconds + self.batch_window_seconds

    @property
    def esm_max_concurrency(self) -> int | None:
        """The stage's `MaximumConcurrency` (None: unlimited or 1); a kind's own is in queue_tuning."""
        if self.queue_max_concurrency is None or self.queue_max_concurrency < ESM_MAX_CONCURRENCY_MIN:
            return None
        return self.queue_max_concurrency

    @property
    def consumer_reserved_concurrency(self) -> int | None:
        """`QUEUE_MAX_CONCURRENCY=1` cannot be a MaximumConcurrency (minimum 2), so it becomes
        reserved concurrency 1 on every consumer function."""
        return 1 if self.queue_max_concurrency == 1 else None


def _declared_tuning(queue_names: tuple[str, ...]) -> tuple[tuple[str, Tuning], ...]:
    from aijobs.kinds.registry import kind as declaration

    found = ((name, declaration(name)) for name in queue_names)
    return tuple((name, kind.tuning) for name, kind in found if kind is not None and kind.tuning != Tuning())


def _tuned(own: Tuning | None, name: str, stage_value: int) -> int:
    value = getattr(own, name, None) if own is not None else None
    return stage_value if value is None else value


def parse_stage_config(stage: str, values: Mapping[str, str | None]) -> StageConfig:
    """Validate the raw key/value pairs of one stage (from `.env.<stage>` and CDK context)."""
    if not _STAGE_NAME.fullmatch(stage):
        raise ConfigError(f"stage {stage!r} must be 1-10 lowercase letters/digits starting with a letter")
    unknown = sorted(set(values) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"unknown configuration keys {unknown}; known keys: {sorted(KNOWN_KEYS)}")

    queue_names = split_list(values.get("QUEUE_NAMES"))
    for name in queue_names:
        _check_queue_name(stage, name)
    check_unique_bindings(queue_names)

    crons: list[CronExpression] = []
    for text in split_list(values.get("CRONS")):
        try:
            crons.append(parse_cron(text))
        except CronError as error:
            raise ConfigError(f"CRONS: {error}") from error

    ints = {key.lower(): _int(values, key, spec) for key, spec in INT_KEYS.items()}
    auth_mode, jwt_issuer_url, jwt_audience = _auth(values)
    children = _workflow_children(queue_names)
    try:
        plans = parse_provider_plan(
            stage=stage,
            kinds=queue_names,
            inherit=children,
            default_provider=values.get("PROVIDER"),
            kind_providers=values.get("KIND_PROVIDERS"),
            kind_models=values.get("KIND_MODELS"),
            kind_allowed_models=values.get("KIND_ALLOWED_MODELS"),
            kind_fallbacks=values.get("KIND_FALLBACKS"),
        )
    except ProviderPlanError as error:
        raise ConfigError(str(error)) from error
    config = StageConfig(
        stage=stage,
        queue_names=queue_names,
        crons=tuple(crons),
        queue_max_concurrency=_max_concurrency(values.get("QUEUE_MAX_CONCURRENCY")),
        alert_email=_email(values.get("ALERT_EMAIL")),
        alert_topic_arn=_topic_arn(values.get("ALERT_TOPIC_ARN")),
        spend_daily_cap_usd=_spend_cap(values.get("SPEND_DAILY_CAP_USD")),
        spend_time_zone=_spend_time_zone(values.get("SPEND_TIME_ZONE")),
        provider=_default_provider(stage, values.get("PROVIDER")),
        kind_prices=_prices(values.get("KIND_PRICES"), queue_names),
        skip_kinds=split_list(values.get("SKIP_KINDS")),
        kind_tuning=_declared_tuning(queue_names),
        provider_plans=plans,
        openai_base_url=_openai_base_url(stage, values.get("OPENAI_BASE_URL")),
        openai_secret_name=_secret_name(values.get("OPENAI_SECRET_NAME")),
        auth_mode=auth_mode,
        jwt_issuer_url=jwt_issuer_url,
        jwt_audience=jwt_audience,
        jwt_operator_group=_operator_group(values.get("JWT_OPERATOR_GROUP")),
        webhook_allow_loopback=_allow_loopback(stage, values.get("WEBHOOK_ALLOW_LOOPBACK")),
        **ints,
    )
    if config.job_lease_seconds and config.job_lease_seconds < config.consumer_timeout_seconds:
        raise ConfigError(
            f"JOB_LEASE_SECONDS={config.job_lease_seconds} must be at least CONSUMER_TIMEOUT_SECONDS="
            f"{config.consumer_timeout_seconds}: a consumer still running must never lose its job"
        )
    if (
        any(plan.provider == "openai" for plan in plans)
        and stage != "local"
        and not config.openai_secret_name
    ):
        raise ConfigError(
            "a kind runs on the openai provider: set OPENAI_SECRET_NAME to the Secrets Manager secret "
            "holding its API key (never put the key itself in configuration)"
        )
    if config.index_buckets_read and config.index_buckets_read < config.index_buckets:
        raise ConfigError(
            f"INDEX_BUCKETS_READ={config.index_buckets_read} must be at least INDEX_BUCKETS="
            f"{config.index_buckets}: readers must cover every bucket written (0 reads INDEX_BUCKETS)"
        )
    if not config.queue_retention_days < config.dlq_retention_days < SQS_RETENTION_MAX_DAYS:
        raise ConfigError(
            f"QUEUE_RETENTION_DAYS={config.queue_retention_days} < DLQ_RETENTION_DAYS="
            f"{config.dlq_retention_days} < {SQS_RETENTION_MAX_DAYS} (the parking queue) must hold: SQS "
            "counts retention from a message's first send, also after it is dead-lettered, so a DLQ "
            "that does not keep longer than its source drops a dead letter before anyone can look"
        )
    if config.batch_size > 10 and config.batch_window_seconds < 1:
        raise ConfigError("BATCH_SIZE above 10 needs BATCH_WINDOW_SECONDS of at least 1")
    if config.visibility_timeout_seconds > SQS_VISIBILITY_MAX_SECONDS:
        raise ConfigError(
            f"CONSUMER_TIMEOUT_SECONDS={config.consumer_timeout_seconds} needs a visibility timeout of "
            f"{config.visibility_timeout_seconds}s (6 x timeout + window), above the SQS maximum of "
            f"{SQS_VISIBILITY_MAX_SECONDS}s"
        )
    for name, _ in config.kind_tuning:
        _check_tuning(config, name)
    return config


# A kind's Tuning field -> the stage key it overrides (and whose bounds it keeps).
TUNING_KEYS = {
    "timeout_seconds": "CONSUMER_TIMEOUT_SECONDS",
    "memory_mb": "CONSUMER_MEMORY_MB",
    "max_retries": "MAX_RETRIES",
    "batch_size": "BATCH_SIZE",
}


def _check_tuning(config: StageConfig, kind: str) -> None:
    """A kind's own tuning within the bounds of the keys it overrides, and what it implies."""
    own = dict(config.kind_tuning).get(kind)
    if own is None:
        return
    where = f"kind {kind!r} (aijobs/kinds/{kind.replace('-', '_')}.py) tuning"
    bounds = {
        name: (INT_KEYS[key].low, INT_KEYS[key].high, f" (as {key})") for name, key in TUNING_KEYS.items()
    }
    bounds["max_concurrency"] = (1, ESM_MAX_CONCURRENCY_MAX, "")
    for name, (low, high, note) in bounds.items():
        value = getattr(own, name)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (whole and low <= value <= high):
            raise ConfigError(f"{where}: {name}={value!r} must be a whole number from {low} to {high}{note}")
    tuning = config.queue_tuning(kind)
    if tuning.batch_size > 10 and tuning.batch_window_seconds < 1:
        raise ConfigError(
            f"{where}: batch_size={tuning.batch_size} above 10 needs BATCH_WINDOW_SECONDS of at least 1"
        )


def declared_price(kind: str) -> int:
    """The credits a kind's declaration (or its workflow definition) says a job costs."""
    from aijobs.kinds.registry import kind as declaration
    from aijobs.workflows.registry import workflow

    found = declaration(kind)
    if found is not None:
        return found.price
    definition = workflow(kind)
    if definition is not None:
        return definition.price
    raise ConfigError(f"kind {kind!r} is not declared (aijobs/kinds/) and is not a workflow")


def _workflow_children(queue_names: tuple[str, ...]) -> dict[str, str]:
    """The configured workflow kinds and their child kinds; a child kind must be configured too."""
    from aijobs.workflows.registry import workflow_children

    children = {kind: child for kind, child in workflow_children().items() if kind in queue_names}
    for kind, child in children.items():
        if child not in queue_names:
            raise ConfigError(
                f"QUEUE_NAMES: workflow {kind!r} runs its parts as {child!r}; add {child!r} too"
            )
    return children


def _check_queue_name(stage: str, name: str) -> None:
    if not _QUEUE_NAME.fullmatch(name):
        raise ConfigError(
            f"QUEUE_NAMES: {name!r} must be lowercase letters, digits and hyphens "
            "(not starting or ending with a hyphen)"
        )
    if name.endswith(DLQ_SUFFIX):
        # DLQ names are `<queue>-dlq`; a kind ending in `-dlq` would make that mapping ambiguous.
        raise ConfigError(
            f"QUEUE_NAMES: {name!r} must not end with {DLQ_SUFFIX!r} (reserved for dead-letter queues)"
        )
    if name in RESERVED_QUEUE_NAMES:
        raise ConfigError(
            f"QUEUE_NAMES: {name!r} is reserved for the stage's own queue of that name; "
            f"reserved: {', '.join(RESERVED_QUEUE_NAMES)}"
        )
    longest = queue_resource_name(stage, name) + DLQ_SUFFIX
    if len(longest) > SQS_QUEUE_NAME_MAX:
        budget = SQS_QUEUE_NAME_MAX - len(queue_resource_name(stage, "") + DLQ_SUFFIX)
        raise ConfigError(
            f"QUEUE_NAMES: {name!r} is too long: its DLQ would be named {longest!r} "
            f"({len(longest)} characters, SQS allows {SQS_QUEUE_NAME_MAX}); "
            f"keep queue names to {budget} characters on stage {stage!r}"
        )


def _int(values: Mapping[str, str | None], key: str, spec: _IntKey) -> int:
    raw = (values.get(key) or "").strip()
    if not raw:
        return spec.default
    if not _WHOLE_NUMBER.fullmatch(raw):
        raise ConfigError(f"{key}={raw!r} is not a whole number")
    number = int(raw)
    if not spec.low <= number <= spec.high:
        raise ConfigError(f"{key}={number} is outside {spec.low}-{spec.high}")
    return number


def _allow_loopback(stage: str, raw: str | None) -> bool:
    """WEBHOOK_ALLOW_LOOPBACK: `1` (or `0`/empty); only the local stage may let webhooks reach its
    own loopback (a receiver on the developer's machine)."""
    text = (raw or "").strip()
    if text not in ("", "0", "1"):
        raise ConfigError(f"WEBHOOK_ALLOW_LOOPBACK={text!r} must be 0 or 1")
    if text == "1" and stage != "local":
        raise ConfigError(
            f"WEBHOOK_ALLOW_LOOPBACK=1 is for the local stage only; stage {stage!r} must not let "
            "webhooks reach its own loopback"
        )
    return text == "1"


def _max_concurrency(raw: str | None) -> int | None:
    text = (raw or "").strip()
    if not text:
        return None
    if not _WHOLE_NUMBER.fullmatch(text) or not 1 <= int(text) <= ESM_MAX_CONCURRENCY_MAX:
        raise ConfigError(
            f"QUEUE_MAX_CONCURRENCY={text!r} must be empty (no limit) or a whole number from 1 to "
            f"{ESM_MAX_CONCURRENCY_MAX}"
        )
    return int(text)


def _spend_cap(raw: str | None) -> str:
    """SPEND_DAILY_CAP_USD: empty, or an amount within the bounds of the caps operators set
    (aijobs.bounds), so the day's cap and the configured one are the same kind of number."""
    text = (raw or "").strip()
    if not text:
        return text
    try:
        return str(SPEND_CAP_USD.check(text))
    except BoundError as error:
        raise ConfigError(
            f"SPEND_DAILY_CAP_USD={text!r} must be empty (no spend brake) or an amount in USD "
            f"such as 250 or 12.5: {error}"
        ) from None


def _spend_time_zone(raw: str | None) -> str:
    from aijobs.bindings import time_zone

    text = (raw or "").strip() or "UTC"
    try:
        time_zone(text)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return text


def _email(raw: str | None) -> str | None:
    text = (raw or "").strip()
    if not text:
        return None
    if not _EMAIL.fullmatch(text):
        raise ConfigError(f"ALERT_EMAIL={text!r} is not an e-mail address")
    return text


def _topic_arn(raw: str | None) -> str | None:
    text = (raw or "").strip()
    if not text:
        return None
    if not _TOPIC_ARN.fullmatch(text):
        raise ConfigError(
            f"ALERT_TOPIC_ARN={text!r} is not a standard SNS topic ARN "
            "(arn:aws:sns:<region>:<12-digit account>:<topic name>, not a FIFO topic)"
        )
    return text


def check_alert_destination(config: StageConfig) -> None:
    """A production stage must page someone: without ALERT_EMAIL or ALERT_TOPIC_ARN its alarms
    and alerts would reach nobody, so refuse to build it."""
    if config.is_production and not (config.alert_email or config.alert_topic_arn):
        raise ConfigError(
            f"stage {config.stage!r} is production and has no alert destination: set ALERT_EMAIL (an "
            "address subscribed to the stage's alert topic) or ALERT_TOPIC_ARN (an existing SNS topic "
            f"in the stack's account and region) in .env.{config.stage}, or pass one with "
            "`-c ALERT_EMAIL=...`; otherwise alarms and failure alerts page nobody"
        )


def _default_provider(stage: str, raw: str | None) -> str:
    """PROVIDER: the stage's default provider (`local` on the local stage, else `bedrock`)."""
    text = (raw or "").strip() or ("local" if stage == "local" else "bedrock")
    if text not in PROVIDERS:
        raise ConfigError(f"PROVIDER={text!r} is not one of {list(PROVIDERS)}")
    return text


def _openai_base_url(stage: str, raw: str | None) -> str:
    text = (raw or "").strip() or DEFAULT_OPENAI_BASE_URL
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"OPENAI_BASE_URL={text!r} must be an http(s) URL")
    if parts.scheme == "http" and stage != "local" and parts.hostname not in ("127.0.0.1", "localhost"):
        raise ConfigError(
            f"OPENAI_BASE_URL={text!r} must use https on a deployed stage (the key travels with it)"
        )
    return text.rstrip("/")


def _secret_name(raw: str | None) -> str | None:
    text = (raw or "").strip()
    if not text:
        return None
    if not _SECRET_NAME.fullmatch(text):
        raise ConfigError(f"OPENAI_SECRET_NAME={text!r} is not a Secrets Manager secret name")
    return text


def _auth(values: Mapping[str, str | None]) -> tuple[str, str | None, str | None]:
    mode = (values.get("AUTH_MODE") or "").strip() or "api_key"
    if mode not in AUTH_MODES:
        raise ConfigError(f"AUTH_MODE={mode!r} is not one of {list(AUTH_MODES)}")
    issuer = (values.get("JWT_ISSUER_URL") or "").strip() or None
    audience = (values.get("JWT_AUDIENCE") or "").strip() or None
    if mode == "jwt" and not (issuer and issuer.startswith("https://") and audience):
        raise ConfigError("AUTH_MODE=jwt needs JWT_ISSUER_URL (https://...) and JWT_AUDIENCE")
    return mode, issuer, audience


def _operator_group(raw: str | None) -> str:
    text = (raw or "").strip() or DEFAULT_JWT_OPERATOR_GROUP
    if not _GROUP_NAME.fullmatch(text):
        raise ConfigError(
            f"JWT_OPERATOR_GROUP={text!r} is not a usable Cognito group name: 1-128 characters, "
            "without whitespace, commas, brackets or quotes"
        )
    return text


def _prices(raw: str | None, queue_names: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    prices = parse_prices(raw)
    unknown = sorted(set(prices) - {*queue_names, CLASSIFY})
    if unknown:
        raise ConfigError(f"KIND_PRICES names kinds that are not in QUEUE_NAMES (nor classify): {unknown}")
    return tuple(prices.items())
