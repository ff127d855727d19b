"""The `openai` provider: any OpenAI-compatible HTTP endpoint (OpenAI, gateways, vLLM, Ollama).

Kinds: `summary` and `image-caption` (chat completions, the image sent as a data URL),
`embedding` (one text, or a batch `{"texts": [...]}` in one request), `image-generate`
(`b64_json` images stored as artifacts), and the synchronous `classify`.

HTTP uses the standard library only: no dependency to add to the layer or to import at a cold
start. `http.client` rather than `urllib.request` because urllib has one timeout for everything;
here the connect timeout (TCP + TLS handshake) is short, since a host that does not answer within
a few seconds is down, and the read timeout is long, since a model may think for a minute before
its first byte. The read timeout bounds each wait for data, not the whole answer; the Lambda
timeout bounds that. There are no retries here: a failed call raises a typed error and the queue
backs off (DESIGN.md §4). The API key is sent as a bearer token and appears in no log and no error.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import struct
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from aijobs.errors import InputTooLargeError, InvalidInputError, ProviderError
from aijobs.provider_plan import DEFAULT_MODELS as PLAN_DEFAULT_MODELS
from aijobs.providers.base import Artifact, Classification, ProviderRequest, ProviderResult
from aijobs.providers.failures import http_error, http_transport_error, malformed_response_error

KINDS = ("summary", "embedding", "image-generate", "image-caption")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Per kind, plus "classify" (the stage defaults of aijobs.provider_plan). Gateways and local
# servers pass their own names in `models`. DALL-E takes `response_format: b64_json`.
DEFAULT_MODELS: Mapping[str, str] = PLAN_DEFAULT_MODELS["openai"]
SYSTEM_PROMPTS: Mapping[str, str] = {
    "summary": (
        "You summarise the text the user sends. Answer with the summary only, in the language of "
        "the text, without a preamble."
    ),
    "image-caption": "You write one-sentence captions for images. Answer with the caption only.",
    "classify": (
        'Classify the user\'s text. Answer with a JSON object only: {"label": one of "positive", '
        '"negative", "neutral", "question"; "score": your confidence from 0 to 1; "tags": up to 3 '
        "short lower-case keywords}."
    ),
}
LABELS = ("positive", "negative", "neutral", "question")
CAPTION_PROMPT = "Write a caption for this image."

_MAX_TEXT_CHARS = 1_000_000  # far above any context window: refuse before uploading megabytes
_MAX_CLASSIFY_CHARS = 10_000
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


class OpenAIProvider:
    """An adapter for an OpenAI-compatible endpoint; see the module docstring for the kinds.

    `api_key` is called once per request (so a rotating, TTL-cached secret is picked up); None or
    "" sends no `Authorization` header (local vLLM or Ollama). Exceptions it raises propagate
    unchanged. `models` overrides `DEFAULT_MODELS` per kind; a request's `model` overrides both.

    Options (out of bounds: `InvalidInputError`): summary and image-caption `max_tokens` 1-16384
    (default 512 / 100), `temperature` 0-2 (sent only if given); summary `sentences` 1-100;
    image-caption `detail` low/high/auto; embedding `dimensions` 1-8192; image-generate `size`
    "WxH" (default 1024x1024) and `n` 1-4.
    """

    name: str = "openai"

    def __init__(
        self,
        *,
        api_key: Callable[[], str | None],
        base_url: str = DEFAULT_BASE_URL,
        models: Mapping[str, str] | None = None,
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
        self._models = {**DEFAULT_MODELS, **(models or {})}
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._ssl_context = ssl_context

    def run(self, request: ProviderRequest) -> ProviderResult:
        """Do one job step with one HTTP request; raise a typed `ProviderError` on failure."""
        handlers = {
            "summary": self._summary,
            "embedding": self._embedding,
            "image-generate": self._image_generate,
            "image-caption": self._image_caption,
        }
        handler = handlers.get(request.kind)
        if handler is None:
            raise InvalidInputError(f"the {self.name} provider has no kind {request.kind!r}")
        return handler(request)

    def classify(self, text: str) -> Classification:
        """Label `text` positive / negative / neutral / question with a JSON-mode chat completion."""
        text = _text(text, _MAX_CLASSIFY_CHARS)
        model = self._models["classify"]
        body = self._post(
            "/chat/completions",
            {
                "model": model,
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPTS["classify"]},
                    {"role": "user", "content": text},
                ],
                "max_tokens": 100,
                "temperature": 0,
                "response_format": {"type": "json_object"},
            },
            model_override=False,
        )
        content, _ = self._message(body)
        try:
            answer = json.loads(content)
            label = str(answer["label"]).strip().lower()
            score = min(1.0, max(0.0, float(answer.get("score", 0.5))))
            tags = answer.get("tags", [])
            if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
                raise TypeError("tags")
        except (ValueError, TypeError, KeyError, AttributeError):
            raise self._malformed("the classification is not the requested JSON object") from None
        if label not in LABELS:
            raise self._malformed("the classification label is not one of the four labels")
        return Classification(
            label=label, score=score, tags=tuple(tag[:40] for tag in tags[:3]), model=_model_of(body, model)
        )

    # --- kinds --------------------------------------------------------------------------------

    def _summary(self, request: ProviderRequest) -> ProviderResult:
        text = _text(_input_text(request.input), _MAX_TEXT_CHARS)
        system = SYSTEM_PROMPTS["summary"]
        if "sentences" in request.options:
            system += f" Use at most {_int_option(request.options, 'sentences', 3, 1, 100)} sentences."
        payload = {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
            **_generation_options(request.options, default_max_tokens=512),
        }
        return self._chat(request, payload, "summary")

    def _image_caption(self, request: ProviderRequest) -> ProviderResult:
        image = request.input_bytes
        if not image:
            raise InvalidInputError("image-caption needs the image bytes")
        if len(image) > _MAX_IMAGE_BYTES:
            raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes")
        content_type = _sniff_image(image)
        if content_type is None:
            raise InvalidInputError("image-caption needs a PNG, JPEG, GIF or WebP image")
        image_url: dict[str, str] = {
            "url": f"data:{content_type[0]};base64,{base64.b64encode(image).decode('ascii')}"
        }
        if "detail" in request.options:
            detail = request.options["detail"]
            if detail not in ("low", "high", "auto"):
                raise InvalidInputError("option 'detail' must be 'low', 'high' or 'auto'")
            image_url["detail"] = detail
        payload = {
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPTS["image-caption"]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": CAPTION_PROMPT},
                        {"type": "image_url", "image_url": image_url},
                    ],
                },
            ],
            **_generation_options(request.options, default_max_tokens=100),
        }
        return self._chat(request, payload, "caption")

    def _chat(self, request: ProviderRequest, payload: dict[str, Any], field: str) -> ProviderResult:
        model = request.model or self._models[request.kind]
        body = self._post(
            "/chat/completions", {"model": model, **payload}, model_override=request.model is not None
        )
        content, finish_reason = self._message(body)
        return ProviderResult(
            status="succeeded",
            output={field: content.strip(), "truncated": finish_reason == "length"},
            model=_model_of(body, model),
            usage=_usage(body, ("prompt_tokens", "completion_tokens", "total_tokens")),
        )

    def _embedding(self, request: ProviderRequest) -> ProviderResult:
        raw = request.input
        batch = isinstance(raw, dict) and "texts" in raw
        if isinstance(raw, dict) and "texts" in raw:
            texts = _batch_texts(raw["texts"])
        else:
            texts = [_text(_input_text(raw), _MAX_TEXT_CHARS)]
        model = request.model or self._models["embedding"]
        payload: dict[str, Any] = {"model": model, "input": texts if batch else texts[0]}
        if "dimensions" in request.options:
            payload["dimensions"] = _int_option(request.options, "dimensions", 0, 1, 8192)
        body = self._post("/embeddings", payload, model_override=request.model is not None)
        vectors = self._vectors(body, len(texts))
        output: dict[str, Any] = (
            {"vectors": vectors, "count": len(vectors)} if batch else {"vector": vectors[0]}
        )
        output["dimensions"] = len(vectors[0])
        return ProviderResult(
            status="succeeded",
            output=output,
            model=_model_of(body, model),
            usage=_usage(body, ("prompt_tokens", "total_tokens")),
        )

    def _image_generate(self, request: ProviderRequest) -> ProviderResult:
        prompt = _text(_input_text(request.input, "prompt"), _MAX_TEXT_CHARS)
        size = request.options.get("size", "1024x1024")
        if not isinstance(size, str) or not _is_size(size):
            raise InvalidInputError("option 'size' must look like '1024x1024'")
        count = _int_option(request.options, "n", 1, 1, 4)
        model = request.model or self._models["image-generate"]
        payload = {"model": model, "prompt": prompt, "n": count, "size": size, "response_format": "b64_json"}
        body = self._post("/images/generations", payload, model_override=request.model is not None)
        data = body.get("data")
        if not isinstance(data, list) or not data:
            raise self._malformed("no 'data' list of images")
        artifacts = []
        described = []
        for index, item in enumerate(data, start=1):
            image = _decode_b64(item.get("b64_json") if isinstance(item, dict) else None)
            kind = _sniff_image(image)
            if image is None or kind is None:
                raise self._malformed(f"image {index} is not base64 PNG, JPEG or WebP data")
            name = f"image.{kind[1]}" if len(data) == 1 else f"image-{index}.{kind[1]}"
            artifacts.append(Artifact(name=name, content_type=kind[0], data=image))
            described.append({"name": name, "bytes": len(image), **_png_size(image)})
        usage = {"images": len(artifacts)} | _usage(body, ("input_tokens", "output_tokens", "total_tokens"))
        return ProviderResult(
            status="succeeded",
            output={"images": described, "size": size},
            artifacts=tuple(artifacts),
            model=model,
            usage=usage,
        )

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


def _input_text(raw: str | dict[str, Any] | None, *fields: str) -> str | None:
    """A job input as text: the string itself, or the first of `fields` (then "text") in a dict."""
    if isinstance(raw, dict):
        for key in (*fields, "text"):
            if key in raw:
                value = raw[key]
                if not isinstance(value, str):
                    raise InvalidInputError(f"input field {key!r} must be a string")
                return value
        return None
    return raw


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


def _int_option(options: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInputError(f"option {key!r} must be an integer from {low} to {high}")
    return value


def _generation_options(options: Mapping[str, Any], *, default_max_tokens: int) -> dict[str, Any]:
    """`max_tokens` (always: it bounds the cost of a job) and `temperature` (only if given, so a
    model that accepts no temperature keeps working)."""
    chosen: dict[str, Any] = {"max_tokens": _int_option(options, "max_tokens", default_max_tokens, 1, 16_384)}
    if "temperature" in options:
        value = options["temperature"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
            raise InvalidInputError("option 'temperature' must be a number from 0 to 2")
        chosen["temperature"] = value
    return chosen


def _is_size(size: str) -> bool:
    width, _, height = size.partition("x")
    return all(part.isdigit() and len(part) <= 4 and int(part) > 0 for part in (width, height))


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


def _png_size(image: bytes) -> dict[str, int]:
    """{"width", "height"} from a PNG's header; {} for other formats."""
    if image[12:16] != b"IHDR" or len(image) < 24:
        return {}
    width, height = struct.unpack(">II", image[16:24])
    return {"width": width, "height": height}


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
