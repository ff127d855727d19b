"""S3 bucket for job inputs (uploaded by reference) and outputs (results keyed by job id)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from aijobs.stage_config import StageConfig
from aijobs_cdk.nag import acknowledge

INPUTS_PREFIX = "inputs/"
RESULTS_PREFIX = "results/"


class JobStorage(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Results are user data: never deleted with the stack, on any stage.
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-results",
                    prefix=RESULTS_PREFIX,
                    expiration=Duration.days(config.result_retention_days),
                ),
                s3.LifecycleRule(
                    id="expire-inputs",
                    prefix=INPUTS_PREFIX,
                    expiration=Duration.days(config.input_retention_days),
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Only the stack's own functions touch this bucket, through IAM; use CloudTrail "
            "S3 data events for an object-level audit trail instead of best-effort access logs",
        )
