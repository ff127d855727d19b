"""S3 bucket for job inputs (uploaded by reference) and outputs (results keyed by job id)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import StageConfig

INPUTS_PREFIX = "inputs/"
RESULTS_PREFIX = "results/"
# What the functions' S3 calls need, and nothing else (tests/infra/test_table_grants.py records the
# calls). `Bucket.grant_read` / `grant_put` / `grant_read_write` are broader than the code:
# `s3:List*` on the whole bucket (every tenant's input keys), `s3:GetObject*` (versions, ACLs,
# tags), `s3:DeleteObject*` and object legal hold, retention and tagging. Nothing lists, deletes,
# tags or locks an object: the bucket's lifecycle rules expire them.
# - GetObject authorizes GetObject and HeadObject (and a presigned GET the API hands out).
# - PutObject authorizes PutObject and the multipart calls of a streamed result (Create, UploadPart,
#   Complete), a presigned POST the API hands out, and the writes Bedrock (StartAsyncInvoke) and
#   Polly (StartSpeechSynthesisTask) make into the stage bucket as the calling function.
READ_OBJECTS = ("s3:GetObject",)
WRITE_OBJECTS = ("s3:PutObject",)
# A streamed result (ResultStore.write_stream) aborts its multipart upload when it fails.
ABORT_UPLOADS = ("s3:AbortMultipartUpload",)


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

    def grant_objects(self, fn: lambda_.Function, actions: tuple[str, ...], *prefixes: str) -> None:
        """`actions` on the objects under `prefixes` only (never the bucket itself: no listing).

        No `s3:ListBucket` means S3 answers a missing key with 403 rather than 404: the code that
        looks an object up takes 403 as "not there" (aijobs.store.results)."""
        assert prefixes
        # The generic grant (into the role's default policy, where the prefixes are acknowledged).
        iam.Grant.add_to_principal(
            grantee=fn,
            actions=list(actions),
            resource_arns=[self.bucket.arn_for_objects(f"{prefix}*") for prefix in prefixes],
        )
