"""The `bedrock` provider: Amazon Bedrock Runtime, for every capability but speech.

| capability | call                                        | models (examples)                     |
|------------|---------------------------------------------|---------------------------------------|
| text       | Converse (system, user turn with images;    | us.amazon.nova-lite-v1:0,             |
|            | structured output as a forced tool call)    | us.amazon.nova-2-lite-v1:0            |
| embedding  | InvokeModel, Titan Text Embeddings V2       | amazon.titan-embed-text-v2:0          |
| image      | InvokeModel, Stability AI text-to-image     | stability.stable-image-core-v1:1      |
| video      | StartAsyncInvoke / GetAsyncInvoke, Luma Ray | luma.ray-v2:0                         |
|            | 2 text-to-video into the stage bucket       |                                       |

The adapter knows model families (the request body a model takes), never job kinds. Model ids
are sent unchanged, inference profile ids (`us.`, `global.`) included. Failures map through
`providers.failures`. It never logs input text, prompts or model output.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from aijobs.domain import Artifact
from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ProviderAuthError,
    TransientProviderError,
)
from aijobs.provider_plan import PROVIDER_CAPABILITIES, base_model_id
from aijobs.providers.base import (
    Call,
    CapabilityRequest,
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    ProviderResult,
    TextRequest,
    TextResult,
    VideoRequest,
)
from aijobs.providers.failures import aws_failure, aws_task_failure
from aijobs.store.results import result_prefix

CAPABILITIES = PROVIDER_CAPABILITIES["bedrock"]

_MAX_IMAGE_BYTES = 3_932_160  # Converse: 3.75 MB per image
_MAX_TOKENS = 10_000  # Nova's output limit (Nova 2 and Pro take more; a kind asks for what it needs)
_MAX_EMBED_CHARS = 50_000  # Titan Text Embeddings V2: 50,000 characters (8,192 tokens) per text
_MAX_EMBED_TEXTS = 100  # one InvokeModel per text: bounded so a batch fits in one Lambda run
# The options each model family takes (checked by `check_request`, at submit and before a call).
_EMBED_DIMENSIONS = (256, 512, 1024)
_MAX_STABILITY_PROMPT = 10_000
_STABILITY_MAX_SEED = 4_294_967_294
_STABILITY_RATIOS = frozenset({"16:9", "1:1", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21"})
# Stability AI's `finish_reasons` (null: the image was made): a blocked output image is that
# image's alone; a refused prompt or input image is refused on every call of the request.
_STABILITY_OUTPUT_BLOCKED = "Filter reason: output image"
_STABILITY_MODEL_ERROR = "Inference error"
_LUMA_RATIOS = frozenset({"1:1", "16:9", "9:16", "4:3", "3:4", "21:9", "9:21"})
_LUMA_SECONDS = (5, 9)
_LUMA_RESOLUTIONS = ("720p", "540p")
# How a message names each family's models (with the model id).
_FAMILY_NAMES = {
    "titan-embed-v2": "Titan Text Embeddings V2",
    "stability": "Stability AI",
    "luma-ray": "Luma Ray 2",
}
_ASYNC_ARN = re.compile(r"^arn:aws(?:-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:async-invoke/([a-z0-9]{12})$")

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
)


def client_config(*, connect_timeout: float = 5, read_timeout: float = 50) -> Config:
    """The boto3 client settings of the adapter.

    One attempt only (`max_attempts` 1): a throttled or failed call goes straight back to the
    consumer, which hands it to the queue with a back-off (and Retry-After) that outlives the
    Lambda, instead of boto sleeping through its own retries on the Lambda's billed time and
    timeout. Connect in 5 s or fail as a timeout; the 50 s read timeout lets a long summary finish
    inside the consumer's default 60 s timeout with time left to store the result.
    """
    return Config(
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


def client_request_token(call: Call) -> str:
    """The StartAsyncInvoke idempotency token of a job step's task: the same on every attempt
    until the task ends `Failed`.

    Derived from `jobId:step`, plus the re-run count (an operator's re-run after a failed video
    starts a new one instead of getting the failed invocation back), plus the count of the step's
    tasks that ended Failed (a retry after one starts a new task; with the old token Bedrock would
    answer with the dead invocation), plus the model (a fallback model starts its own). A retry
    after a lost start answer keeps all of them, so it gets the invocation already started.
    Hashed because the token must be 1-256 printable ASCII characters whatever the step is called.
    """
    key = call.idempotency_key if call.reruns == 0 else f"{call.idempotency_key}:rerun{call.reruns}"
    if call.tasks:
        key = f"{key}:task{call.tasks}"
    return "aijobs-" + hashlib.sha256(f"{key}:{call.model}".encode()).hexdigest()


def family(model: str) -> str:
    """The model family a Bedrock model id belongs to (what request body it takes)."""
    base = base_model_id(model)
    for prefix, name in (
        ("amazon.titan-embed-text-v2", "titan-embed-v2"),
        ("stability.", "stability"),
        ("luma.ray", "luma-ray"),
    ):
        if base.startswith(prefix):
            return name
    return "converse"


def check_request(request: CapabilityRequest) -> None:
    """Refuse, without a call, an option the model of `request` does not take: Titan Text
    Embeddings V2's `dimensions`, Stability AI's aspect ratios, Luma Ray 2's `durationSeconds`,
    `resolution`, aspect ratios and (none) `seed`. `InvalidOptionError` names the option, the
    allowed values and the model. The adapter's calls run it first; the API runs it at submit. A
    model of a family with no such request is left to the call (set-up, not the job's fault)."""
    name = family(request.call.model)
    if isinstance(request, EmbeddingRequest) and name == "titan-embed-v2":
        _titan_dimensions(request)
    elif isinstance(request, ImageRequest) and name == "stability":
        if request.aspect_ratio not in _STABILITY_RATIOS:
            raise InvalidOptionError("aspectRatio", sorted(_STABILITY_RATIOS), _named(request.call.model))
    elif isinstance(request, VideoRequest) and name == "luma-ray":
        _luma_settings(request)


def _named(model: str) -> str:
    return f"{_FAMILY_NAMES[family(model)]} ({model})"


def _titan_dimensions(request: EmbeddingRequest) -> int:
    dimensions = request.dimensions or _EMBED_DIMENSIONS[-1]
    if dimensions not in _EMBED_DIMENSIONS:
        raise InvalidOptionError("dimensions", _EMBED_DIMENSIONS, _named(request.call.model))
    return dimensions


def _luma_settings(request: VideoRequest) -> tuple[int, str]:
    """(seconds, resolution) of a Luma Ray 2 request, its options checked."""
    model = _named(request.call.model)
    seconds = request.duration_seconds or _LUMA_SECONDS[0]
    if seconds not in _LUMA_SECONDS:
        raise InvalidOptionError("durationSeconds", _LUMA_SECONDS, model)
    resolution = request.resolution or _LUMA_RESOLUTIONS[0]
    if resolution not in _LUMA_RESOLUTIONS:
        raise InvalidOptionError("resolution", _LUMA_RESOLUTIONS, model)
    if request.aspect_ratio not in _LUMA_RATIOS:
        raise InvalidOptionError("aspectRatio", sorted(_LUMA_RATIOS), model)
    if request.seed is not None:
        raise InvalidOptionError("seed", "unset (the model takes no seed)", model)
    return seconds, resolution


class BedrockProvider:
    """Amazon Bedrock Runtime adapter (see the module docstring for the capabilities and calls).

    `bucket` is the stage bucket that asynchronous video is written into, under
    `results/<jobId>/<step>/`. The client is created on first use (never at import); tests inject
    a stubbed one.
    """

    name: str = "bedrock"
    capabilities: frozenset[str] = CAPABILITIES

    def __init__(
        self,
        *,
        bucket: str,
        client: Any = None,
        region_name: str | None = None,
        config: Config | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("bucket is required (asynchronous video is written into it)")
        self._bucket = bucket
        self._client = client
        self._region_name = region_name
        self._config = config or client_config()

    # --- plumbing -----------------------------------------------------------------------------

    def _runtime(self) -> Any:
        if self._client is None:
            self._client = boto3.client("bedrock-runtime", region_name=self._region_name, config=self._config)
        return self._client

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self._runtime(), operation)(**params)
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Bedrock") from error
        return response

    def _invoke_json(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._call(
            "invoke_model",
            modelId=model,
            body=json.dumps(body).encode("utf-8"),
            contentType="application/json",
            accept="application/json",
        )
        try:
            raw = response["body"].read()
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Bedrock") from error
        try:
            document = json.loads(raw)
        except ValueError:
            raise TransientProviderError("Bedrock answered with a body that is not JSON") from None
        if not isinstance(document, dict):
            raise TransientProviderError("Bedrock answered with an unexpected JSON body")
        return document

    # --- text ---------------------------------------------------------------------------------

    def generate_text(self, request: TextRequest) -> TextResult:
        """Converse: the system text, one user turn (images first, then the prompt), and with an
        output schema a single tool the model is forced to call, whose input is the answer (Nova
        lists native JSON-schema output as unsupported; tool use works on every Converse model
        that supports tools)."""
        model = request.call.model
        if family(model) != "converse":
            raise ProviderAuthError(f"the bedrock adapter has no text request for model {model[:80]!r}")
        content: list[dict[str, Any]] = []
        for image in request.images:
            if len(image) > _MAX_IMAGE_BYTES:
                raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes (Bedrock's limit)")
            content.append({"image": {"format": image_format(image), "source": {"bytes": image}}})
        if request.prompt.strip():
            content.append({"text": request.prompt})
        if not content:
            raise InvalidInputError("the request has no text and no image")
        inference: dict[str, Any] = {"maxTokens": min(request.max_tokens, _MAX_TOKENS)}
        if request.temperature is not None:
            inference["temperature"] = request.temperature
        params: dict[str, Any] = {
            "modelId": model,
            "messages": [{"role": "user", "content": content}],
            "inferenceConfig": inference,
        }
        if request.system:
            params["system"] = [{"text": request.system}]
        if request.output_schema is not None:
            params["toolConfig"] = {
                "tools": [
                    {
                        "toolSpec": {
                            "name": request.output_name,
                            "description": "Give the answer as this tool's input.",
                            "inputSchema": {"json": request.output_schema},
                        }
                    }
                ],
                "toolChoice": {"tool": {"name": request.output_name}},
            }
        response = self._call("converse", **params)
        stop = response.get("stopReason")
        if stop in ("guardrail_intervened", "content_filtered"):
            raise InvalidInputError("Bedrock's content filter blocked this input")
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        usage = _token_usage(response)
        if request.output_schema is not None:
            data = next(
                (
                    block["toolUse"].get("input")
                    for block in blocks
                    if isinstance(block.get("toolUse"), dict)
                    and block["toolUse"].get("name") == request.output_name
                ),
                None,
            )
            if not isinstance(data, dict):
                # No tool call: the answer may still be the JSON as text (validated by the kind).
                text = _joined(blocks)
                return TextResult(text=text, truncated=stop == "max_tokens", model=model, usage=usage)
            return TextResult(
                text=json.dumps(data), data=data, truncated=stop == "max_tokens", model=model, usage=usage
            )
        text = _joined(blocks)
        if not text:
            raise TransientProviderError("Bedrock answered without text")
        return TextResult(text=text, truncated=stop == "max_tokens", model=model, usage=usage)

    # --- embeddings ---------------------------------------------------------------------------

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        model = request.call.model
        if family(model) != "titan-embed-v2":
            raise ProviderAuthError(f"the bedrock adapter has no embedding request for model {model[:80]!r}")
        if len(request.texts) > _MAX_EMBED_TEXTS:
            raise InputTooLargeError(f"at most {_MAX_EMBED_TEXTS} texts per embedding request")
        dimensions = _titan_dimensions(request)
        vectors: list[tuple[float, ...]] = []
        tokens = 0
        # Titan V2 embeds one text per call. A failure part-way retries the whole job (and pays
        # again for the texts already embedded): simpler than storing partial batches.
        for text in request.texts:
            document = self._invoke_json(
                model,
                {
                    "inputText": _text(text, _MAX_EMBED_CHARS),
                    "dimensions": dimensions,
                    "normalize": request.normalize,
                },
            )
            vector = document.get("embedding")
            if not isinstance(vector, list) or len(vector) != dimensions:
                raise TransientProviderError("Bedrock answered without an embedding of the requested size")
            vectors.append(tuple(float(value) for value in vector))
            tokens += _int(document.get("inputTextTokenCount"))
        return EmbeddingResult(
            vectors=tuple(vectors),
            dimensions=dimensions,
            model=model,
            usage={"inputTokens": tokens, "texts": len(request.texts)},
        )

    # --- images -------------------------------------------------------------------------------

    def generate_image(self, request: ImageRequest) -> ImageResult:
        """Stability AI text-to-image: one InvokeModel per image (each answers one image).

        An image the content filter blocks is left out and counted (`blocked`); the images made
        are kept, since they were paid for. A refused prompt ends the request (every later call
        would be refused too). Only when no image is left is the job failed (its input's fault).
        """
        model = request.call.model
        if family(model) != "stability":
            raise ProviderAuthError(f"the bedrock adapter has no image request for model {model[:80]!r}")
        check_request(request)
        prompt = _text(request.prompt, _MAX_STABILITY_PROMPT)
        images: list[Artifact] = []
        blocked: list[str] = []
        for index in range(request.count):
            body: dict[str, Any] = {
                "prompt": prompt,
                "aspect_ratio": request.aspect_ratio,
                "output_format": "png",
            }
            if request.seed is not None:
                body["seed"] = (request.seed + index) % (_STABILITY_MAX_SEED + 1)
            if request.negative_prompt:
                body["negative_prompt"] = request.negative_prompt
            document = self._invoke_json(model, body)
            reasons = [str(reason)[:200] for reason in document.get("finish_reasons") or [] if reason]
            if reasons and reasons[0] == _STABILITY_MODEL_ERROR:
                raise TransientProviderError(f"Stability AI: {reasons[0]}")
            if reasons:
                blocked.append(reasons[0])
                if reasons[0] == _STABILITY_OUTPUT_BLOCKED:
                    continue
                # The prompt (or an input image) itself is refused: so would every later call be.
                blocked.extend(reasons[:1] * (request.count - index - 1))
                break
            found = document.get("images")
            if not isinstance(found, list) or not found:
                raise TransientProviderError("Bedrock answered without images")
            images.append(
                Artifact(
                    name="image.png" if request.count == 1 else f"image-{len(images) + 1}.png",
                    content_type="image/png",
                    data=_b64(found[0]),
                )
            )
        if not images:
            # Every image moderated: the prompt's fault, final.
            raise InvalidInputError(f"Stability AI refused the image: {blocked[0]}")
        return ImageResult(
            images=tuple(images),
            model=model,
            usage={"images": len(images)},
            blocked=len(blocked),
            blocked_reason=blocked[0] if blocked else None,
        )

    # --- asynchronous video -------------------------------------------------------------------

    def start_video(self, request: VideoRequest) -> ProviderResult:
        """Luma Ray 2 text-to-video, written by Bedrock into the stage bucket under the step's
        result prefix; the answer is the invocation's ARN (the handle the consumer re-checks)."""
        call = request.call
        if family(call.model) != "luma-ray":
            raise ProviderAuthError(f"the bedrock adapter has no video request for model {call.model[:80]!r}")
        response = self._call(
            "start_async_invoke",
            modelId=call.model,
            modelInput=_luma_input(request),
            outputDataConfig={
                "s3OutputDataConfig": {
                    "s3Uri": f"s3://{self._bucket}/{result_prefix(call.job_id, call.step)}"
                }
            },
            # Same token on every attempt of this step: a retry after a lost answer gets the
            # invocation that was already started instead of paying for a second video.
            clientRequestToken=client_request_token(call),
        )
        return ProviderResult(status="running", handle=str(response["invocationArn"]), model=call.model)

    def check_video(self, request: VideoRequest) -> ProviderResult:
        call = request.call
        handle = call.handle or ""
        match = _ASYNC_ARN.match(handle)
        if match is None:
            raise InvalidInputError("unknown task handle for a Bedrock video")
        response = self._call("get_async_invoke", invocationArn=handle)
        status = response.get("status")
        if status == "InProgress":
            return ProviderResult(status="running", handle=handle, model=call.model)
        if status == "Failed":
            raise aws_task_failure(response.get("failureMessage"), service="Bedrock video")
        if status != "Completed":
            raise TransientProviderError(f"Bedrock video in an unknown state {str(status)[:40]!r}")
        uri = response.get("outputDataConfig", {}).get("s3OutputDataConfig", {}).get("s3Uri", "")
        bucket, folder = _split_s3_uri(str(uri))
        folder = folder.rstrip("/")
        # Bedrock writes into a folder named after the invocation id under the given prefix; the
        # answer's s3Uri names that folder. Should it name only our prefix, add the id ourselves.
        if folder + "/" == result_prefix(call.job_id, call.step):
            folder = f"{folder}/{match.group(1)}"
        seconds = request.duration_seconds or _LUMA_SECONDS[0]
        # The video stays where Bedrock wrote it (never downloaded); the result points at it.
        return ProviderResult(
            status="succeeded",
            output={"video": f"{folder}/output.mp4", "bucket": bucket, "durationSeconds": seconds},
            model=call.model,
            usage={"videoSeconds": seconds},
        )


def _luma_input(request: VideoRequest) -> dict[str, Any]:
    seconds, resolution = _luma_settings(request)
    return {
        "prompt": _text(request.prompt, 5_000),
        "aspect_ratio": request.aspect_ratio,
        "loop": request.loop,
        "duration": f"{seconds}s",
        "resolution": resolution,
    }


# --- helpers ------------------------------------------------------------------------------------


def image_format(data: bytes) -> str:
    """The Converse image format of `data` from its magic bytes; `InvalidInputError` otherwise."""
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    raise InvalidInputError("image must be PNG, JPEG, GIF or WebP")


def _text(text: str | None, limit: int) -> str:
    if text is None or not text.strip():
        raise InvalidInputError("input text is empty or missing")
    if len(text) > limit:
        raise InputTooLargeError(f"input has {len(text)} characters; the limit is {limit}")
    return text


def _token_usage(response: dict[str, Any]) -> dict[str, int]:
    usage = response.get("usage", {})
    return {"inputTokens": _int(usage.get("inputTokens")), "outputTokens": _int(usage.get("outputTokens"))}


def _b64(data: Any) -> bytes:
    try:
        return base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise TransientProviderError("Bedrock answered with an image that is not base64") from None


def _split_s3_uri(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
        raise TransientProviderError("Bedrock video completed without a usable output location")
    return parts.netloc, parts.path.lstrip("/")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _joined(blocks: list[dict[str, Any]]) -> str:
    return "".join(block["text"] for block in blocks if isinstance(block.get("text"), str)).strip()
