"""Job inputs and results in S3, under keys derived from the job id so a replay cannot double-write."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.providers.base import Artifact

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

INPUTS_PREFIX = "inputs/"
RESULTS_PREFIX = "results/"
# Results up to this size are also kept on the row, so a status poll returns them directly.
INLINE_RESULT_BYTES = 4096
PRESIGNED_URL_SECONDS = 900
_INPUT_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


def result_prefix(job_id: str, step: str) -> str:
    return f"{RESULTS_PREFIX}{job_id}/{step}/"


def input_ref_is_owned(input_ref: str, user_id: str) -> bool:
    """An input reference must be a plain object name under the caller's own `inputs/<userId>/`."""
    prefix = f"{INPUTS_PREFIX}{user_id}/"
    return input_ref.startswith(prefix) and bool(_INPUT_NAME.fullmatch(input_ref[len(prefix) :]))


class ResultStore:
    def __init__(self, s3: S3Client, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def write(self, job_id: str, step: str, output: Any, artifacts: tuple[Artifact, ...]) -> tuple[str, Any]:
        """Write the output JSON and artifacts; returns (result_ref, the output if small enough to inline).

        Keys are fixed by job id and step: a replayed step overwrites the same objects.
        """
        prefix = result_prefix(job_id, step)
        for artifact in artifacts:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=prefix + artifact.name,
                Body=artifact.data,
                ContentType=artifact.content_type,
            )
        document = {"output": output, "artifacts": [prefix + artifact.name for artifact in artifacts]}
        body = json.dumps(document).encode()
        self._s3.put_object(
            Bucket=self._bucket, Key=prefix + "result.json", Body=body, ContentType="application/json"
        )
        inline = document if len(body) <= INLINE_RESULT_BYTES else None
        return prefix + "result.json", inline

    def read_input(self, input_ref: str) -> bytes:
        return self._s3.get_object(Bucket=self._bucket, Key=input_ref)["Body"].read()

    def input_size(self, key: str) -> int | None:
        """The size in bytes of an uploaded input, or None when there is no such object."""
        try:
            head = self._s3.head_object(Bucket=self._bucket, Key=key)
        except ClientError as error:
            # HEAD has no error body: a missing key is the bare status "404" (NoSuchKey elsewhere).
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return int(head["ContentLength"])

    def download_url(self, key: str) -> str:
        """A short-lived presigned GET (signed locally: no network call)."""
        return self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=PRESIGNED_URL_SECONDS
        )
