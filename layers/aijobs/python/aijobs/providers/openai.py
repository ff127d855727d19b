"""The `openai` provider: any OpenAI-compatible HTTP endpoint (OpenAI, gateways, vLLM, Ollama).

Capabilities: text (chat completions; images sent as data URLs; structured output through
`response_format` with a JSON schema), embedding (every text in one request) and image
(`/images/generations`, base64 images). The adapter never knows which kind called it.

HTTP uses the standard library only: no dependency to add to the layer or to import at a cold
start. `http.client` rather than `urllib.request` because urllib has one timeout for everything;
here the connect timeout (TCP + TLS handshake) is short, since a host that does not answer within
a few seconds is down, and the read timeout is long, since a model may think for a minute before
its first byte. The read timeout bounds each wait for data, not the whole answer; the Lambda
timeout bounds that. There are no retries here: a failed call raises a typed error and the queue
backs off (docs/design.md §4). The API key is sent as a bearer token and appears in no log and no error.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from aijobs.domain import Artifact
from aijobs.errors import InputTooLargeError, InvalidInputError, InvalidOptionError, ProviderError
from aijobs.provider_plan import PROVIDER_CAPABILITIES
from aijobs.providers.base import (
    CapabilityRequest,
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    TextRequest,
    TextResult,
)
from aijobs.providers.failures import http_error, http_transport_error, malformed_response_error

CAPABILITIES = PROVIDER_CAPABILITIES["openai"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The sizes an image model makes, per aspect ratio (DALL-E 3 and gpt-image-1 both take these three;
# the nearest one serves the other ratios).
_IMAGE_SIZES = {"1:1": "1024x1024", "landscape": "1536x1024", "portrait": "1024x1536"}
_DALLE3_SIZES = {"1:1": "1024x1024", "landscape": "1792x1024", "portrait": "1024x1792"}

# Where OpenAI's own models take fewer options than the kinds offer (checked by `check_request`, at
# submit and before a call): the largest `dimensions` of an embedding model (None: it takes none),
# and the most images per request. Other ids (a gateway's, vLLM's, Ollama's) are the endpoint's.
EMBEDDING_DIMENSIONS: dict[str, int | None] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": None,
}
IMAGE_COUNTS = {"dall-e-3": 1}

_MAX_TEXT_CHARS = 1_000_000  # far above any context window: refuse before uploading megabytes
_MAX_BATCH = 2048  # OpenAI's limit of inputs per embeddings request
_MAX_IMAGE_BYTES = 20 * 1024 * 1024  # OpenAI's limit per image in a chat request
_MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # four large base64 images fit; a runaway body does not
_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "png"),
    (b"\xff\xd8\xff", "image/jpeg", "jpg"),
    (b"GIF87a", "image/gif", "gif"),
    (b"GIF89a", "image/gif", "gif"),
    (b"RIFF", "image/webp", "webp"),  # and "WEBP" at offset 8
)


def check_request(request: CapabilityRequest) -> None:
    """Refuse, without a call, an embedding `dimensions` or an image `count` an OpenAI model does
    not take (`EMBEDDING_DIMENSIONS`, `IMAGE_COUNTS`); `InvalidOptionError` names the option, the
    allowed values and the model. The adapter runs it before each call; the API at submit."""
    model = request.call.model
    if (
        isinstance(request, EmbeddingRequest)
        and request.dimensions is not None
        and model in EMBEDDING_DIMENSIONS
    ):
        largest = EMBEDDING_DIMENSIONS[model]
        if largest is None:
            raise InvalidOptionError("dimensions", "unset (the model has one size)", model)
        if not 1 <= request.dimensions <= largest:
            raise InvalidOptionError("dimensions", f"1 to {largest}", model)
    elif isinstance(request, ImageRequest) and model in IMAGE_COUNTS and request.count > IMAGE_COUNTS[model]:
        raise InvalidOptionError("count", f"at most {IMAGE_COUNTS[model]}", model)


class OpenAIProvider:
    """An adapter for an OpenAI-compatible endpoint; see the module docstring for the capabilities.

    `api_key` is called once per request (so a rotating, TTL-cached secret is picked up); None or
    "" sends no `Authorization` header (local vLLM or Ollama). Exceptions it raises propagate
    unchanged. The model of each request is the one its `call` names: the stage's plan or its
    allow-list (checked at submit), so a model the endpoint does not know is configuration (a 404
    pauses the kind and alerts), never the job's fault.
    """

    name: str = "openai"
    capabilities: frozenset[str] = CAPABILITIES

    def __init__(
        self,
        *,
        api_key: Callable[[], str | None],
        base_url: str = DEFAULT_BASE_URL,
        connect_timeout: float = 3.05,
        read_timeout: float = 60.0,
        name: str = "openai",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http(s) URL with a host")
        if connect_timeout <= 0 or read_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self.name = name
        self._api_key = api_key
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/")
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._ssl_context = ssl_context

    # --- capabilities -------------------------------------------------------------------------

    def generate_text(self, request: TextRequest) -> TextResult:
        """One chat completion: the system text, one user turn (text, then images as data URLs),
        and with an output schema `response_format: json_schema`."""
        model = request.call.model
        user: str | list[dict[str, Any]]
        if request.images:
            parts: list[dict[str, Any]] = []
            if request.prompt.strip():
                parts.append({"type": "text", "text": request.prompt})
            for image in request.images:
                parts.append({"type": "image_url", "image_url": {"url": _data_url(image)}})
            user = parts
        else:
            user = _text(request.prompt, _MAX_TEXT_CHARS)
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": user})
        payload: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": request.max_tokens}
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.output_schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.output_name, "schema": request.output_schema},
            }
        body = self._post("/chat/completions", payload, model_override=False)
        content, finish_reason = self._message(body)
        data = None
        if request.output_schema is not None:
            try:
                parsed = json.loads(content)
            except ValueError:
                parsed = None
            data = parsed if isinstance(parsed, dict) else None
        return TextResult(
            text=content.strip(),
            data=data,
            truncated=finish_reason == "length",
            model=_model_of(body, model),
            usage=_usage(body, ("prompt_tokens", "completion_tokens", "total_tokens")),
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        model = request.call.model
        check_request(request)
        texts = _batch_texts(list(request.texts))
        payload: dict[str, Any] = {"model": model, "input": texts}
        if request.dimensions is not None:
            payload["dimensions"] = request.dimensions
        body = self._post("/embeddings", payload, model_override=False)
        vectors = self._vectors(body, len(texts))
        return EmbeddingResult(
            vectors=tuple(tuple(vector) for vector in vectors),
            dimensions=len(vectors[0]),
            model=_model_of(body, model),
            usage=_usage(body, ("prompt_tokens", "total_tokens")),
        )

    def generate_image(self, request: ImageRequest) -> ImageResult:
        model = request.call.model
        check_request(request)
        prompt = _text(request.prompt, _MAX_TEXT_CHARS)
        size = _image_size(model, request.aspect_ratio)
        payload: dict[str, Any] = {"model": model, "prompt": prompt, "n": request.count, "size": size}
        if model.startswith("dall-e"):
            # DALL-E answers with URLs unless asked for base64; gpt-image models always send base64.
            payload["response_format"] = "b64_json"
        body = self._post("/images/generations", payload, model_override=False)
        data = body.get("data")
        if not isinstance(data, list) or not data:
            raise self._malformed("no 'data' list of images")
        artifacts = []
        for index, item in enumerate(data, start=1):
            image = _decode_b64(item.get("b64_json") if isinstance(item, dict) else None)
            kind = _sniff_image(image)
            if image is None or kind is None:
                raise self._malformed(f"image {index} is not base64 PNG, JPEG or WebP data")
            name = f"image.{kind[1]}" if len(data) == 1 else f"image-{index}.{kind[1]}"
            artifacts.append(Artifact(name=name, content_type=kind[0], data=image))
        width, _, height = size.partition("x")
        usage = {"images": len(artifacts), "imagePixels": int(width) * int(height)}
        usage |= _usage(body, ("input_tokens", "output_tokens", "total_tokens"))
        return ImageResult(images=tuple(artifacts), model=model, usage=usage)

    # --- HTTP ---------------------------------------------------------------------------------

    def _post(self, path: str, payload: dict[str, Any], *, model_override: bool) -> dict[str, Any]:
        """POST `payload` as JSON to `base_url + path`; the decoded JSON object of a 2xx answer."""
        data = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "aijobs",
        }
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=self._ssl_context
            )
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        phase = "connect"
        try:
            connection.connect()
            assert connection.sock is not None
            # The connect timeout covered TCP and TLS; from here on every wait is a read wait.
            connection.sock.settimeout(self._read_timeout)
            phase = "read"
            connection.request("POST", self._path + path, body=data, headers=headers)
            response = connection.getresponse()
            status = response.status
            text = response.read(_MAX_RESPONSE_BYTES + 1)
            retry_after = response.getheader("Retry-After")
            retry_after_ms = response.getheader("retry-after-ms")
        except (OSError, http.client.HTTPException) as error:
            raise http_transport_error(error, provider=self.name, phase=phase) from None
        finally:
            connection.close()
        if not 200 <= status < 300:
            raise http_error(
                status,
                text[:65_536].decode("utf-8", "replace"),
                retry_after,
                retry_after_ms_header=retry_after_ms,
                provider=self.name,
                model_override=model_override,
                secrets=(key,) if key else (),
            )
        if len(text) > _MAX_RESPONSE_BYTES:
            raise self._malformed(f"larger than {_MAX_RESPONSE_BYTES} bytes", status)
        try:
            body = json.loads(text)
        except ValueError:  # UnicodeDecodeError included
            raise self._malformed("not JSON", status) from None
        if not isinstance(body, dict):
            raise self._malformed("not a JSON object", status)
        return body

    def _malformed(self, what: str, status: int = 200) -> ProviderError:
        return malformed_response_error(what, provider=self.name, status=status)

    def _message(self, body: dict[str, Any]) -> tuple[str, str | None]:
        """The text and finish reason of the first choice of a chat completion."""
        try:
            choice = body["choices"][0]
            message = choice["message"]
            content, finish_reason = message.get("content"), choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self._malformed("no choices[0].message") from None
        if finish_reason == "content_filter" or message.get("refusal"):
            # The input tripped the provider's policy: final, another attempt ends the same way.
            raise InvalidInputError(f"{self.name}: the model refused the input (content policy)")
        if not isinstance(content, str):
            raise self._malformed("the message has no text content")
        return content, finish_reason if isinstance(finish_reason, str) else None

    def _vectors(self, body: dict[str, Any], expected: int) -> list[list[float]]:
        """The embedding vectors of an embeddings answer, in input order."""
        data = body.get("data")
        if not isinstance(data, list) or len(data) != expected:
            raise self._malformed(f"expected {expected} embeddings")
        items = sorted(data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)
        vectors = []
        for item in items:
            vector = item.get("embedding") if isinstance(item, dict) else None
            if (
                not isinstance(vector, list)
                or not vector
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector)
            ):
                raise self._malformed("an embedding is not a list of numbers")
            vectors.append([float(x) for x in vector])
        if len({len(vector) for vector in vectors}) != 1:
            raise self._malformed("embeddings of different lengths")
        return vectors


# --- helpers ------------------------------------------------------------------------------------


def _text(text: str | None, limit: int) -> str:
    """Non-empty text within `limit` characters."""
    if text is None or not text.strip():
        raise InvalidInputError("input text is empty or missing")
    if len(text) > limit:
        raise InputTooLargeError(f"input has {len(text)} characters; the limit is {limit}")
    return text.strip()


def _batch_texts(texts: object) -> list[str]:
    """The texts of a batch embedding input: 1 to 2048 non-empty strings."""
    if not isinstance(texts, list) or not 1 <= len(texts) <= _MAX_BATCH:
        raise InvalidInputError(f"input 'texts' must be a list of 1 to {_MAX_BATCH} strings")
    if not all(isinstance(text, str) and text.strip() for text in texts):
        raise InvalidInputError("every entry of 'texts' must be a non-empty string")
    if sum(len(text) for text in texts) > _MAX_TEXT_CHARS:
        raise InputTooLargeError(f"the texts have more than {_MAX_TEXT_CHARS} characters together")
    return list(texts)


def _sniff_image(data: bytes | None) -> tuple[str, str] | None:
    """(content type, file extension) of image bytes by their signature, else None."""
    if not data:
        return None
    for signature, content_type, extension in _IMAGE_TYPES:
        if data.startswith(signature) and (extension != "webp" or data[8:12] == b"WEBP"):
            return content_type, extension
    return None


def _decode_b64(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error
        return None


def _usage(body: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return {}
    return {
        key: usage[key]
        for key in keys
        if isinstance(usage.get(key), int) and not isinstance(usage[key], bool)
    }


def _model_of(body: Mapping[str, Any], requested: str) -> str:
    """The model that answered (a gateway may resolve an alias), else the one asked for."""
    model = body.get("model")
    return model if isinstance(model, str) and model else requested


def _data_url(image: bytes) -> str:
    if len(image) > _MAX_IMAGE_BYTES:
        raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes")
    found = _sniff_image(image)
    if found is None:
        raise InvalidInputError("the image must be PNG, JPEG, GIF or WebP")
    return f"data:{found[0]};base64,{base64.b64encode(image).decode('ascii')}"


def _image_size(model: str, aspect_ratio: str) -> str:
    """The generation size nearest to a "W:H" aspect ratio."""
    width, _, height = aspect_ratio.partition(":")
    try:
        ratio = int(width) / int(height)
    except (ValueError, ZeroDivisionError):
        raise InvalidInputError(f"aspect ratio {aspect_ratio[:20]!r} is not W:H") from None
    sizes = _DALLE3_SIZES if model.startswith("dall-e-3") else _IMAGE_SIZES
    return sizes["1:1" if 0.8 <= ratio <= 1.25 else "landscape" if ratio > 1 else "portrait"]
