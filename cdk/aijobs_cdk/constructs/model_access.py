"""Least privilege for AI providers: a function may call only the models of the kind it serves.

Per kind (aijobs.provider_plan): Bedrock kinds get `bedrock:InvokeModel` (Converse included) on
their default, allow-listed and fallback models only: foundation-model ARNs in the stack's region,
or for a cross-region inference profile the profile, plus the foundation model it routes to in any
region only when called through that profile (`bedrock:InferenceProfileArn`), so the base model
cannot be called directly anywhere. Video kinds start asynchronous invocations, which IAM
authorizes as `bedrock:InvokeModel` on the model and on the `async-invoke/*` resource
(StartAsyncInvoke has no action of its own), and read them back (`bedrock:GetAsyncInvoke` on
`async-invoke/*`); Bedrock writes the video into the stage bucket as the function (its
`s3:PutObject` on `results/*`, JobStorage). Third-party models (Stability AI, Luma) also need the
AWS Marketplace subscription actions that Bedrock checks on their first call. Polly kinds get
Polly's synthesis actions, OpenAI-compatible kinds read only the stage's key secret. Fallbacks on
another provider get that provider's grants.

The weekly model check (aijobs.scheduled.models) reads the lifecycle of the stage's Bedrock models:
`bedrock:GetFoundationModel` on exactly those foundation models, in the stack's region
(`ModelLifecycleAccess`).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from aijobs.provider_plan import KindPlan, base_model_id, is_inference_profile
from aijobs.providers.lifecycle import bedrock_models
from aijobs_cdk.nag import acknowledge

# Capabilities whose provider runs asynchronous invocations the function reads back.
ASYNC_CAPABILITIES = frozenset({"video"})
# Bedrock models sold through AWS Marketplace: every provider but Amazon's own.
FIRST_PARTY_PREFIX = "amazon."
MARKETPLACE_ACTIONS = ("aws-marketplace:ViewSubscriptions", "aws-marketplace:Subscribe")
POLLY_ACTIONS = ("polly:SynthesizeSpeech", "polly:StartSpeechSynthesisTask", "polly:GetSpeechSynthesisTask")


class ModelAccess(Construct):
    """The provider permissions of one function for the kinds it serves."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fn: lambda_.Function,
        plans: list[KindPlan],
        openai_secret_name: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._stack = Stack.of(self)
        statements: list[iam.PolicyStatement] = []
        for plan in plans:
            statements.extend(self._statements(plan, openai_secret_name))
        if not statements:
            return
        policy = iam.Policy(self, "Policy", statements=statements)
        assert fn.role is not None
        policy.attach_to_role(fn.role)
        self._acknowledge(policy, plans, openai_secret_name)

    def _statements(self, plan: KindPlan, secret_name: str | None) -> list[iam.PolicyStatement]:
        statements: list[iam.PolicyStatement] = []
        bedrock = _bedrock_models(plan)
        if bedrock:
            direct = sorted({self.model_arns(model)[0] for model in bedrock})
            if plan.capability in ASYNC_CAPABILITIES:
                # StartAsyncInvoke is authorized as `bedrock:InvokeModel` on the model and on the
                # invocation it creates: IAM has no `bedrock:StartAsyncInvoke` (cfn-lint W3037).
                direct.append(self._async_invokes())
                statements.append(
                    iam.PolicyStatement(actions=["bedrock:GetAsyncInvoke"], resources=[self._async_invokes()])
                )
            statements.append(iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=direct))
            for model in sorted(m for m in bedrock if is_inference_profile(m)):
                profile, routed = self.model_arns(model)
                statements.append(
                    iam.PolicyStatement(
                        actions=["bedrock:InvokeModel"],
                        resources=[routed],
                        conditions={"ArnEquals": {"bedrock:InferenceProfileArn": profile}},
                    )
                )
            if any(not base_model_id(model).startswith(FIRST_PARTY_PREFIX) for model in bedrock):
                statements.append(iam.PolicyStatement(actions=list(MARKETPLACE_ACTIONS), resources=["*"]))
        providers = {provider for provider, _ in plan.chain}
        if "polly" in providers:
            statements.append(iam.PolicyStatement(actions=list(POLLY_ACTIONS), resources=["*"]))
        if "openai" in providers and secret_name:
            secret = secretsmanager.Secret.from_secret_name_v2(self, f"Secret{plan.kind}", secret_name)
            statements.append(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    # A secret known by name: Secrets Manager appends six random characters.
                    resources=[f"{secret.secret_arn}-??????"],
                )
            )
        return statements

    def model_arns(self, model: str) -> list[str]:
        """The ARNs one model id needs: a foundation model in this region, or an inference profile
        plus its foundation model in every region the profile may route to (granted only through
        the profile: see `_statements`)."""
        foundation = self._stack.format_arn(
            service="bedrock",
            account="",
            resource="foundation-model",
            resource_name=base_model_id(model),
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        if not is_inference_profile(model):
            return [foundation]
        profile = self._stack.format_arn(
            service="bedrock",
            resource="inference-profile",
            resource_name=model,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        any_region = self._stack.format_arn(
            service="bedrock",
            region="*",
            account="",
            resource="foundation-model",
            resource_name=base_model_id(model),
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        return [profile, any_region]

    def _async_invokes(self) -> str:
        return self._stack.format_arn(
            service="bedrock",
            resource="async-invoke",
            resource_name="*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    def _acknowledge(self, policy: iam.Policy, plans: list[KindPlan], secret_name: str | None) -> None:
        for plan in plans:
            providers = {provider for provider, _ in plan.chain}
            if "polly" in providers:
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5[Resource::*]",
                    "Polly's synthesis actions support no resource-level permissions (only lexicons do)",
                )
            bedrock = _bedrock_models(plan)
            for model in bedrock:
                if is_inference_profile(model):
                    acknowledge(
                        policy,
                        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/"
                        f"{base_model_id(model)}]",
                        "A cross-region inference profile routes to this one model in several regions; "
                        "the bedrock:InferenceProfileArn condition allows it only through that profile",
                    )
            if any(not base_model_id(model).startswith(FIRST_PARTY_PREFIX) for model in bedrock):
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5[Resource::*]",
                    "Bedrock subscribes the account to a Marketplace model (Stability AI, Luma) on its "
                    "first call; the Marketplace subscription actions take no resource",
                )
            if bedrock and plan.capability in ASYNC_CAPABILITIES:
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:bedrock:<AWS::Region>:"
                    "<AWS::AccountId>:async-invoke/*]",
                    "Invocation ids are made by StartAsyncInvoke at run time (which IAM authorizes as "
                    "InvokeModel on async-invoke/*); starts and reads are limited to this account's and "
                    "region's asynchronous invocations",
                )
            if "openai" in providers and secret_name:
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:"
                    f"<AWS::AccountId>:secret:{secret_name}-??????]",
                    "A secret named (not ARN'd) in configuration: its ARN ends in six random characters",
                )


def _bedrock_models(plan: KindPlan) -> list[str]:
    """Every Bedrock model the kind may call: its default and allowed models (when it runs on
    Bedrock) and its Bedrock fallbacks."""
    models = list(plan.choosable_models) if plan.provider == "bedrock" else []
    models += [model for provider, model in plan.chain[1:] if provider == "bedrock" and model]
    return list(dict.fromkeys(models))


class ModelLifecycleAccess(Construct):
    """`bedrock:GetFoundationModel` for the cron dispatcher's weekly model check: on the foundation
    model (in the stack's region) of every model the plans can call, an inference profile's
    included, and nothing else. No statement when the stage calls no Bedrock model."""

    def __init__(
        self, scope: Construct, construct_id: str, *, fn: lambda_.Function, plans: list[KindPlan]
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        models = bedrock_models(plans)
        if not models:
            return
        arns = [
            stack.format_arn(
                service="bedrock",
                account="",
                resource="foundation-model",
                resource_name=model,
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for model in models
        ]
        policy = iam.Policy(
            self,
            "Policy",
            statements=[iam.PolicyStatement(actions=["bedrock:GetFoundationModel"], resources=arns)],
        )
        assert fn.role is not None
        policy.attach_to_role(fn.role)
