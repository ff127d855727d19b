"""The one place that owns Lambda defaults: runtime, architecture, layers, logging, tracing, roles."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, Duration, ILocalBundling, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from aijobs.observability import METRICS_NAMESPACE, service_name
from aijobs_cdk import (
    CODE_LAYER_DIR,
    DEPS_REQUIREMENTS,
    FUNCTIONS_DIR,
    LAMBDA_ARCHITECTURE,
    LAMBDA_ONLY_ENV,
    LAMBDA_PYTHON_VERSION,
    compiled,
    deps_layer,
)
from aijobs_cdk.deps_layer import DepsLayerBuildError
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import StageConfig

RUNTIME: lambda_.Runtime = getattr(lambda_.Runtime, "PYTHON_" + LAMBDA_PYTHON_VERSION.replace(".", "_"))
_ARCHITECTURES = {"arm64": lambda_.Architecture.ARM_64, "x86_64": lambda_.Architecture.X86_64}
ARCHITECTURE = _ARCHITECTURES[LAMBDA_ARCHITECTURE]


@jsii.implements(ILocalBundling)
class _PipDepsLayer:
    """CDK local bundling of the dependency layer: pip (through the layer cache), never Docker.

    CDK calls `try_bundle` only when `cdk.out` lacks the asset for the current layer hash. A build
    failure is kept here because it reaches CDK's caller as a generic jsii RuntimeError.
    """

    def __init__(self) -> None:
        self.failure: DepsLayerBuildError | None = None

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_options: object) -> bool:
        try:
            deps_layer.stage(Path(output_dir))
        except DepsLayerBuildError as error:
            self.failure = error
            raise
        return True  # never fall back to Docker


@jsii.implements(ILocalBundling)
class _CompiledTree:
    """CDK local bundling of a source folder (the function code, the aijobs layer): its files with
    `.pyc` compiled for the runtime (aijobs_cdk.compiled), linked from the compiled cache."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_options: object) -> bool:
        compiled.link_tree(compiled.staged(self.source), Path(output_dir))
        return True  # never fall back to Docker


def compiled_code(source: Path) -> lambda_.Code:
    """`source` as an asset with its `.pyc` (read-only in Lambda, so compiled at build time), under
    a hash of its sources: CDK bundles it again only when they change."""
    return lambda_.Code.from_asset(
        str(source),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=compiled.source_hash(source),
        # The image is only a required placeholder: local bundling always succeeds or raises.
        bundling=BundlingOptions(image=RUNTIME.bundling_image, local=_CompiledTree(source)),
    )


class LambdaDefaults(Construct):
    """Creates every aijobs function with the same runtime, layers, logging and tracing.

    Each function gets its own role (no managed policies) and its own log group with the stage's
    retention; callers grant access with `grant_*` on the returned function.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._code = compiled_code(FUNCTIONS_DIR)
        code_layer = lambda_.LayerVersion(
            self,
            "CodeLayer",
            code=compiled_code(CODE_LAYER_DIR),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="aijobs shared library (layers/aijobs/python/aijobs)",
        )
        self.layers = [self._deps_layer(), code_layer]

    def _deps_layer(self) -> lambda_.LayerVersion:
        """The pinned third-party packages, built for RUNTIME and ARCHITECTURE by pip at synth time.

        The custom asset hash (lock + pip options) lets CDK skip bundling while it is unchanged; a
        layer that cannot be built raises DepsLayerBuildError: there is no layer without packages.
        """
        bundling = _PipDepsLayer()
        code = lambda_.Code.from_asset(
            str(DEPS_REQUIREMENTS.parent),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=deps_layer.layer_hash(),
            # The image is only a required placeholder: local bundling always succeeds or raises.
            bundling=BundlingOptions(image=RUNTIME.bundling_image, local=bundling),
        )
        try:
            return lambda_.LayerVersion(
                self,
                "DepsLayer",
                code=code,
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description="aijobs third-party dependencies (layers/deps/requirements.txt)",
            )
        except RuntimeError:
            if bundling.failure is not None:
                raise bundling.failure from None
            raise

    def function(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        timeout: Duration,
        memory_size: int = 256,
        reserved_concurrency: int | None = None,
    ) -> lambda_.Function:
        """A function whose code is `functions/<handler module>`; `handler` like `api.handler.handler`."""
        log_group = logs.LogGroup(
            scope,
            f"{construct_id}Logs",
            retention=log_retention(self._config.log_retention_days),
            removal_policy=RemovalPolicy.RETAIN if self._config.is_production else RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            scope,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"aijobs {self._config.stage} {construct_id}",
        )
        fn = lambda_.Function(
            scope,
            construct_id,
            code=self._code,
            handler=handler,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            layers=self.layers,
            role=role,
            description=description,
            timeout=timeout,
            memory_size=memory_size,
            reserved_concurrent_executions=reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            log_group=log_group,
            environment={
                "STAGE": self._config.stage,
                "POWERTOOLS_SERVICE_NAME": service_name(self._config.stage),
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                **LAMBDA_ONLY_ENV,
                **environment,
            },
        )
        log_group.grant_write(role)
        acknowledge(
            fn,
            "AwsSolutions-L1",
            f"Python {LAMBDA_PYTHON_VERSION} (supported), not the newest runtime: every asset ships .pyc, "
            "which only an interpreter of the runtime's version can write (aijobs_cdk.compiled)",
        )
        acknowledge(
            fn,
            "AwsSolutions-IAM5[Resource::*]",
            "X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level permissions",
        )
        return fn


# CloudWatch Logs accepts only these retention periods (days).
_RETENTION_STEPS = [
    (1, "ONE_DAY"), (3, "THREE_DAYS"), (5, "FIVE_DAYS"), (7, "ONE_WEEK"), (14, "TWO_WEEKS"),
    (30, "ONE_MONTH"), (60, "TWO_MONTHS"), (90, "THREE_MONTHS"), (120, "FOUR_MONTHS"),
    (150, "FIVE_MONTHS"), (180, "SIX_MONTHS"), (365, "ONE_YEAR"), (400, "THIRTEEN_MONTHS"),
    (545, "EIGHTEEN_MONTHS"), (731, "TWO_YEARS"), (1096, "THREE_YEARS"), (1827, "FIVE_YEARS"),
    (2192, "SIX_YEARS"), (2557, "SEVEN_YEARS"), (2922, "EIGHT_YEARS"), (3288, "NINE_YEARS"),
    (3653, "TEN_YEARS"),
]  # fmt: skip


def log_retention(days: int) -> logs.RetentionDays:
    """The shortest allowed CloudWatch retention that keeps logs at least `days` days."""
    for step, name in _RETENTION_STEPS:
        if step >= days:
            return getattr(logs.RetentionDays, name)  # type: ignore[no-any-return]
    return logs.RetentionDays.TEN_YEARS
