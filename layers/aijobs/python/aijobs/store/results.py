"""Job inputs and results in S3, under keys derived from the job id so a replay cannot double-write."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.domain import Artifact

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

INPUTS_PREFIX = "inputs/"
RESULTS_PREFIX = "results/"
# A result document (output and artifact keys, as JSON) up to this size lives on the job row only:
# no S3 object, no resultRef. It adds at most one write unit (DynamoDB bills writes per started KB)
# to each copy of the row a later write pays for, while a PUT costs as much as 8 (docs/concepts/api.md,
# "Results"; docs/operations/cost.md). Larger ones, and any job with artifacts, get `result.json`.
INLINE_RESULT_BYTES = 1024
PRESIGNED_URL_SECONDS = 900
# Multipart parts of a streamed result (S3's minimum part size is 5 MiB).
STREAM_PART_BYTES = 8 * 1024 * 1024
_INPUT_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
# How S3 answers a read of a key that does not exist. The functions may read objects but not list
# the bucket (cdk: JobStorage), and to a caller without `s3:ListBucket` S3 answers a missing key
# with 403 (AccessDenied; a HEAD has only the bare status) rather than 404, so as not to tell it
# what exists. Under the prefixes the function may read, 403 means the object is not there.
MISSING_OBJECT_CODES = frozenset({"404", "NoSuchKey", "NotFound", "403", "AccessDenied", "Forbidden"})

# What a client may upload as a job input (`POST /uploads`), by content type, with its size cap.
# Text: far above what a model's context takes, small enough to read into a consumer's memory.
TEXT_INPUT_MAX_BYTES = 4 * 1024 * 1024
# Images: Bedrock's per-image limit (3.75 MB); a larger image would only fail at the provider.
IMAGE_INPUT_MAX_BYTES = 3_750_000
UPLOAD_RULES: dict[str, int] = {
    "text/plain": TEXT_INPUT_MAX_BYTES,
    "text/markdown": TEXT_INPUT_MAX_BYTES,
    "text/csv": TEXT_INPUT_MAX_BYTES,
    "application/json": TEXT_INPUT_MAX_BYTES,
    "application/x-ndjson": TEXT_INPUT_MAX_BYTES,
    "image/png": IMAGE_INPUT_MAX_BYTES,
    "image/jpeg": IMAGE_INPUT_MAX_BYTES,
    "image/webp": IMAGE_INPUT_MAX_BYTES,
    "image/gif": IMAGE_INPUT_MAX_BYTES,
}
# A presigned upload form is good for this long: enough to start an upload, not to share it.
UPLOAD_FORM_SECONDS = 300
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_MAX = 100
_EXTENSIONS = {
    "text/plain": ".txt", "text/markdown": ".md", "text/csv": ".csv", "application/json": ".json",
    "application/x-ndjson": ".ndjson", "image/png": ".png", "image/jpeg": ".jpg",
    "image/webp": ".webp", "image/gif": ".gif",
}  # fmt: skip


def kind_input_cap(*, image: bool) -> int:
    """The largest uploaded input (bytes) a job takes by `inputRef`: an image, or a text."""
    return IMAGE_INPUT_MAX_BYTES if image else TEXT_INPUT_MAX_BYTES


def new_input_key(user_id: str, unique: str, content_type: str, name: str | None = None) -> str:
    """`inputs/<user_id>/<unique>-<name>`: always under the caller's own prefix, whatever `name` is.

    `name` is only a readable suffix: its last path segment, with anything but letters, digits and
    `._-` collapsed to `-` (so never a `/`, `..` segment or leading dot). Without a usable name the
    suffix is the content type's extension. `unique` keeps two uploads from ever sharing a key, so
    an input a queued job refers to never changes under it.
    """
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = _NAME_UNSAFE.sub("-", base).strip("-.")[:_NAME_MAX].strip("-.")
    suffix = f"-{cleaned}" if cleaned else _EXTENSIONS.get(content_type, "")
    key = f"{INPUTS_PREFIX}{user_id}/{unique}{suffix}"
    assert input_ref_is_owned(key, user_id), key
    return key


@dataclass(frozen=True)
class UploadForm:
    """A presigned POST: the client sends `fields` and then the file as multipart/form-data to `url`."""

    key: str
    url: str
    fields: dict[str, str]
    expires_in: int


@dataclass(frozen=True)
class InputObject:
    size: int
    content_type: str | None


def result_prefix(job_id: str, step: str) -> str:
    return f"{RESULTS_PREFIX}{job_id}/{step}/"


def part_prefix(parent_id: str) -> str:
    return f"{RESULTS_PREFIX}{parent_id}/parts/"


def is_part_ref(input_ref: str) -> bool:
    """Whether an `inputRef` names a workflow part (JSON written by a split), not an upload."""
    return input_ref.startswith(RESULTS_PREFIX) and "/parts/" in input_ref


def is_missing_object(error: ClientError) -> bool:
    """Whether a GET or HEAD of one of the stage's objects failed because there is no such object
    (see MISSING_OBJECT_CODES: without `s3:ListBucket` that is a 403)."""
    return str(error.response.get("Error", {}).get("Code", "")) in MISSING_OBJECT_CODES


def input_ref_is_owned(input_ref: str, user_id: str) -> bool:
    """An input reference must be a plain object name under the caller's own `inputs/<userId>/`."""
    prefix = f"{INPUTS_PREFIX}{user_id}/"
    return input_ref.startswith(prefix) and bool(_INPUT_NAME.fullmatch(input_ref[len(prefix) :]))


class ResultStore:
    def __init__(self, s3: S3Client, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def write(
        self,
        job_id: str,
        step: str,
        output: Any,
        artifacts: tuple[Artifact, ...],
        stored: tuple[str, ...] = (),
    ) -> tuple[str | None, Any]:
        """Store a step's result: returns (result_ref, inline), the row's two result fields.

        A small document (up to `INLINE_RESULT_BYTES`) of a step with no artifacts is the row's
        alone: (None, document), nothing written here. Otherwise the artifacts and `result.json`
        go to S3 and the ref is returned, with the document too when it is small enough for the
        row. Keys are fixed by job id and step: a replayed step overwrites the same objects.
        """
        prefix = result_prefix(job_id, step)
        document = {
            "output": output,
            "artifacts": [*stored, *(prefix + artifact.name for artifact in artifacts)],
        }
        body = json.dumps(document).encode()
        inline = document if len(body) <= INLINE_RESULT_BYTES else None
        if inline is not None and not document["artifacts"]:
            return None, inline
        for artifact in artifacts:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=prefix + artifact.name,
                Body=artifact.data,
                ContentType=artifact.content_type,
            )
        self._s3.put_object(
            Bucket=self._bucket, Key=prefix + "result.json", Body=body, ContentType="application/json"
        )
        return prefix + "result.json", inline

    def read_json(self, key: str) -> Any:
        """A JSON document the project wrote itself (a result, a workflow part)."""
        return json.loads(self.read_input(key))

    def write_part(self, parent_id: str, index: int, value: Any) -> str:
        """A workflow part too large for its child's row, as `results/<parentId>/parts/<index>.json`.
        The key is fixed by parent and index, so a replayed split overwrites the same object."""
        key = f"{part_prefix(parent_id)}{index:05d}.json"
        self._s3.put_object(
            Bucket=self._bucket, Key=key, Body=json.dumps(value).encode(), ContentType="application/json"
        )
        return key

    def write_stream(self, key: str, chunks: Iterable[bytes], content_type: str) -> int:
        """Write a large object from chunks without holding it in memory (multipart upload in
        parts of `STREAM_PART_BYTES`); returns its size. A failure aborts the upload."""
        buffer = bytearray()
        size = 0
        upload = self._s3.create_multipart_upload(Bucket=self._bucket, Key=key, ContentType=content_type)
        upload_id = upload["UploadId"]
        parts: list[dict[str, Any]] = []
        try:
            for chunk in chunks:
                buffer += chunk
                size += len(chunk)
                if len(buffer) >= STREAM_PART_BYTES:
                    parts.append(self._upload_part(key, upload_id, len(parts) + 1, bytes(buffer)))
                    buffer.clear()
            if buffer or not parts:
                parts.append(self._upload_part(key, upload_id, len(parts) + 1, bytes(buffer)))
            self._s3.complete_multipart_upload(
                Bucket=self._bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
            )
        except BaseException:
            self._s3.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
            raise
        return size

    def _upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> dict[str, Any]:
        response = self._s3.upload_part(
            Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
        )
        return {"ETag": response["ETag"], "PartNumber": number}

    def read_input(self, input_ref: str) -> bytes:
        return self._s3.get_object(Bucket=self._bucket, Key=input_ref)["Body"].read()

    def input_size(self, key: str) -> int | None:
        """The size in bytes of an uploaded input, or None when there is no such object."""
        found = self.input_object(key)
        return None if found is None else found.size

    def input_object(self, key: str) -> InputObject | None:
        """Size and content type of an uploaded input (one HEAD), or None when there is no such object."""
        try:
            head = self._s3.head_object(Bucket=self._bucket, Key=key)
        except ClientError as error:
            if is_missing_object(error):
                return None
            raise
        return InputObject(size=int(head["ContentLength"]), content_type=head.get("ContentType"))

    def upload_form(
        self, key: str, content_type: str, max_bytes: int, expires_in: int = UPLOAD_FORM_SECONDS
    ) -> UploadForm:
        """A presigned POST for exactly `key` (signed locally: no network call).

        S3 itself refuses an upload that breaks the policy: another key, another `Content-Type`,
        an empty file or one over `max_bytes`, or after `expires_in` seconds.
        """
        post = self._s3.generate_presigned_post(
            Bucket=self._bucket,
            Key=key,
            Fields={"Content-Type": content_type},
            Conditions=[{"Content-Type": content_type}, ["content-length-range", 1, max_bytes]],
            ExpiresIn=expires_in,
        )
        fields = {str(name): str(value) for name, value in post["fields"].items()}
        return UploadForm(key=key, url=str(post["url"]), fields=fields, expires_in=expires_in)

    def download_url(self, key: str) -> str:
        """A short-lived presigned GET (signed locally: no network call)."""
        return self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=PRESIGNED_URL_SECONDS
        )
