"""The provider port: the capabilities an AI provider offers, and what a job step gets back.

A provider (the adapters in this package: `local`, `bedrock`, `polly`, `openai`) offers
**capabilities**, each behind one typed request and result:

| capability  | method                        | request            | result           |
|-------------|-------------------------------|--------------------|------------------|
| `text`      | `generate_text`               | `TextRequest`      | `TextResult`     |
| `embedding` | `embed`                       | `EmbeddingRequest` | `EmbeddingResult`|
| `image`     | `generate_image`              | `ImageRequest`     | `ImageResult`    |
| `speech`    | `synthesize_speech`           | `SpeechRequest`    | `ProviderResult` |
| `video`     | `start_video` / `check_video` | `VideoRequest`     | `ProviderResult` |

Each adapter module also offers `check_request(request)`: a pure check, without calls, of the
request's options for the model it names (`InvalidOptionError` naming the option, the allowed
values and the model). The adapter's own methods run it before calling, and the API runs the same
function at submit (aijobs.kinds.run.check_model_options), so a value the model does not take is a
422 there, from the same table.

An adapter never knows which job kind called it: a kind (aijobs.kinds) turns a job into one of
these requests and the answer into the job's output. Adapters raise the typed errors of
`aijobs.errors` (the retry taxonomy); they never see queue messages or rows, and never log input
text, prompts or model output.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from aijobs.domain import Artifact

Capability = Literal["text", "embedding", "image", "speech", "video"]
CAPABILITY_NAMES: tuple[Capability, ...] = ("text", "embedding", "image", "speech", "video")


class _Port(BaseModel):
    # The port models build their validators on first use (`defer_build`): only the consumers
    # and the API's classify route use them, and none at import.
    model_config = ConfigDict(defer_build=True, frozen=True)


class Call(_Port):
    """Which job step a capability request belongs to, and on which model it runs."""

    job_id: str
    # The step of a multi-step job; with job_id it is the idempotency key of side effects.
    step: str = "main"
    # The model the request runs on (a kind's default, a job's choice, or a fallback); empty for a
    # provider that has no models (Polly has voices, chosen by the request).
    model: str = ""
    # 1 for the first attempt; the row's attempt counter.
    attempt: int = 1
    # How many times an asynchronous provider task was already checked (re-check path).
    checks: int = 0
    # The provider's own task id from an earlier `running` answer.
    handle: str | None = None
    # How many times an operator re-ran the job (a re-run usually follows a fix).
    reruns: int = 0
    # How many of the step's asynchronous tasks already ended `Failed`: a retry after one starts a
    # new task, which needs its own idempotency token.
    tasks: int = 0

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_id}:{self.step}"


class TextRequest(_Port):
    """Text generation: a system text, one user turn (text plus optional images), bounds, and an
    optional JSON schema the answer must follow (structured output)."""

    call: Call
    system: str | None = None
    prompt: str
    # Images the user turn carries (image understanding), as uploaded bytes.
    images: tuple[bytes, ...] = ()
    max_tokens: int = Field(ge=1)
    temperature: float | None = None
    # A JSON schema (an output model's `model_json_schema()`): the answer is a JSON object.
    output_schema: dict[str, Any] | None = None
    # The name the schema goes by where a provider needs one (a tool name, a response format).
    output_name: str = "answer"


class _Answer(_Port):
    """What every synchronous capability answers besides its content."""

    model: str
    usage: dict[str, int] = Field(default_factory=dict)
    # USD the provider itself reports (the local provider); None: priced from usage.
    cost: float | None = None


class TextResult(_Answer):
    text: str
    # The parsed JSON object of a structured answer (None without an output schema).
    data: dict[str, Any] | None = None
    # The answer stopped at `max_tokens`.
    truncated: bool = False


class EmbeddingRequest(_Port):
    call: Call
    texts: tuple[str, ...] = Field(min_length=1)
    # None: the model's own default size.
    dimensions: int | None = None
    normalize: bool = True


class EmbeddingResult(_Answer):
    vectors: tuple[tuple[float, ...], ...]
    dimensions: int


class ImageRequest(_Port):
    call: Call
    prompt: str
    negative_prompt: str | None = None
    # "W:H", e.g. "1:1", "16:9": each adapter maps it to the sizes its model makes.
    aspect_ratio: str = "1:1"
    count: int = Field(default=1, ge=1)
    seed: int | None = None


class ImageResult(_Answer):
    images: tuple[Artifact, ...]
    # Images of the request that the provider's content filter blocked (the others are `images`),
    # and the provider's reason for the first of them.
    blocked: int = 0
    blocked_reason: str | None = None


class SpeechRequest(_Port):
    call: Call
    text: str
    voice: str | None = None
    engine: str | None = None
    format: str | None = None
    # "text" or "ssml".
    text_type: str = "text"


class VideoRequest(_Port):
    call: Call
    prompt: str
    duration_seconds: int | None = None
    aspect_ratio: str = "16:9"
    resolution: str | None = None
    seed: int | None = None
    loop: bool = False


# Any capability's request (what an adapter's pure `check_request` looks at).
CapabilityRequest = TextRequest | EmbeddingRequest | ImageRequest | SpeechRequest | VideoRequest


class ProviderResult(_Port):
    """What a job step ends with (a kind's output, or an asynchronous task still running)."""

    status: Literal["succeeded", "running"]
    # Small JSON output (summary text, vector, caption, manifest); stored on the row when small.
    output: Any = None
    artifacts: tuple[Artifact, ...] = ()
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost: float | None = None
    # For `running`: the provider's task id, passed back on the next check.
    handle: str | None = None
    # Keys of artifacts a step already wrote to the result bucket itself (a workflow merge that
    # streams a large object); listed with `artifacts` in the result document.
    stored_artifacts: tuple[str, ...] = ()
    # The provider that answered, when it is not the kind's own (a fallback model on another one).
    provider: str | None = None
    # Models the step found unavailable on its way to the one that answered (their operator alert).
    unavailable: tuple[str, ...] = ()


class Provider(Protocol):
    """An AI provider adapter: its name and the capabilities it implements."""

    name: str
    capabilities: frozenset[str]


@runtime_checkable
class TextGenerator(Protocol):
    def generate_text(self, request: TextRequest) -> TextResult: ...


@runtime_checkable
class Embedder(Protocol):
    def embed(self, request: EmbeddingRequest) -> EmbeddingResult: ...


@runtime_checkable
class ImageGenerator(Protocol):
    def generate_image(self, request: ImageRequest) -> ImageResult: ...


@runtime_checkable
class SpeechSynthesizer(Protocol):
    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        """Succeeded with the audio, or `running` with a task handle (checked with the same call
        and `call.handle` set)."""
        ...


@runtime_checkable
class VideoGenerator(Protocol):
    def start_video(self, request: VideoRequest) -> ProviderResult:
        """`running` with the task's handle (or, rarely, succeeded at once)."""
        ...

    def check_video(self, request: VideoRequest) -> ProviderResult:
        """The task of `request.call.handle`: still `running`, or succeeded with the video."""
        ...
