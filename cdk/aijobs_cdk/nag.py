"""cdk-nag acknowledgements: every one names the exact finding and carries its reason."""

from __future__ import annotations

from collections.abc import Iterable

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import IConstruct

NAG_PLUGIN = "AwsSolutions"


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one cdk-nag finding (`AwsSolutions-IAM5[Resource::*]` style ids) on a construct."""
    if not reason.strip():
        raise ValueError(f"acknowledging {rule} needs a reason")
    # "<plugin>::<rule>" is how the CDK validation report names cdk-nag's findings.
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"{NAG_PLUGIN}::{rule}", reason=reason))


def acknowledge_grant_wildcards(
    fn: lambda_.Function,
    *,
    tables: Iterable[dynamodb.Table] = (),
    bucket: s3.Bucket | None = None,
    bucket_prefixes: Iterable[str] = (),
) -> None:
    """Acknowledge the wildcards that `grant_*` writes into a function's role policy for these
    resources, and only those."""
    grantee = fn.role
    assert grantee is not None
    for table in tables:
        acknowledge(
            grantee,
            f"AwsSolutions-IAM5[Resource::<{logical_id(table)}.Arn>/index/*]",
            "grant_*_data on a table covers that table's own indexes (table/index/*), nothing else",
        )
    if bucket is None:
        return
    for prefix in bucket_prefixes:
        acknowledge(
            grantee,
            f"AwsSolutions-IAM5[Resource::<{logical_id(bucket)}.Arn>/{prefix}*]",
            f"Object access is limited to the job keys under {prefix!r} of the stack's own bucket",
        )


def logical_id(construct: IConstruct) -> str:
    """The CloudFormation logical id of an L2 construct's resource, as cdk-nag names it in findings."""
    element = construct.node.default_child
    assert isinstance(element, cdk.CfnElement)
    return cdk.Stack.of(construct).get_logical_id(element)
