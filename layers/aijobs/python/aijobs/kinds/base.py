"""What a job kind is: one declaration, next to its code, from which config and infrastructure derive.

A kind is the team's task: which capability it asks of a provider (aijobs.providers.base), its
prompt, its options and output as pydantic models, its models (default per provider, allowed,
fallbacks), its input limits, its price and where its queue and consumer differ from the stage's
(`tuning`: timeout, memory, retries, batch size, concurrency). A provider never knows the
kind; the kind turns a job into one capability request (`build`) and the answer into the job's
output (`shape`). Both have defaults per capability, so most kinds are only a declaration.

Write a kind as `aijobs/kinds/<name with _ for ->.py` defining `KIND = Kind(...)` (`aijobs new-kind`
scaffolds one); aijobs/kinds/registry.py finds it by its file name.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aijobs.providers.base import Capability

# A kind's name is its queue's name: lowercase letters, digits and hyphens (the stage config
# checks QUEUE_NAMES with the same pattern).
KIND_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$"
KIND_NAME_MAX = 60


def check_kind_name(name: str) -> None:
    """ValueError unless `name` can name a kind (and so its queue)."""
    if not re.fullmatch(KIND_NAME_PATTERN, name) or len(name) > KIND_NAME_MAX:
        raise ValueError(
            f"kind name {name!r}: lowercase letters, digits and hyphens, at most {KIND_NAME_MAX}"
        )


class KindOptions(BaseModel):
    """Base of every kind's options (`options` at `POST /jobs`), checked at submit (a 422 naming
    the option) and read with the same model in the consumer.

    Unknown options are refused, and values are taken as JSON types without coercion (`strict`):
    `"3"`, `true` or `3.5` is no integer, `"no"` no boolean (an integer is still a number).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, strict=True)


class TextOptions(KindOptions):
    """Options every text kind takes (a kind's options model extends these)."""

    maxTokens: int = Field(default=1024, ge=1, le=8192, description="the longest answer, in tokens")
    temperature: float | None = Field(
        default=None, ge=0, le=1, description="sampling temperature (the model's default if unset)"
    )


class EmbeddingOptions(KindOptions):
    dimensions: int | None = Field(
        default=None, ge=1, le=8192, description="vector size, where the model offers several"
    )
    normalize: bool = Field(default=True, description="unit-length vectors")


class ImageOptions(KindOptions):
    aspectRatio: Literal["1:1", "16:9", "9:16", "3:2", "2:3", "4:5", "5:4", "21:9", "9:21"] = "1:1"
    count: int = Field(default=1, ge=1, le=4, description="images to make")
    seed: int | None = Field(default=None, ge=0, le=2_147_483_646)
    negativePrompt: str | None = Field(default=None, min_length=1, max_length=1000)


class SpeechOptions(KindOptions):
    voice: str | None = Field(default=None, min_length=1, max_length=40)
    engine: str | None = Field(default=None, min_length=1, max_length=20)
    format: str | None = Field(default=None, min_length=1, max_length=20)
    textType: Literal["text", "ssml"] = "text"


class VideoOptions(KindOptions):
    durationSeconds: int | None = Field(default=None, ge=1, le=60, description="the model's default if unset")
    aspectRatio: Literal["16:9", "9:16", "1:1", "4:3", "3:4", "21:9", "9:21"] = "16:9"
    resolution: str | None = Field(default=None, pattern=r"^[0-9]{3,4}p$")
    seed: int | None = Field(default=None, ge=0, le=2_147_483_646)
    loop: bool = False


OPTIONS_BASE: Mapping[Capability, type[KindOptions]] = {
    "text": TextOptions,
    "embedding": EmbeddingOptions,
    "image": ImageOptions,
    "speech": SpeechOptions,
    "video": VideoOptions,
}


@dataclass(frozen=True)
class Inputs:
    """What a kind's input is, checked at submit (inline) and again in the consumer.

    `type` "text": a string, or an object whose first string field of `fields` is the text (or,
    with `list_field`, a list of up to `max_items` texts), or an uploaded UTF-8 object.
    `type` "image": an uploaded image (`inputRef`) only.
    """

    type: Literal["text", "image"] = "text"
    fields: tuple[str, ...] = ("text",)
    max_chars: int = 200_000
    list_field: str | None = None
    max_items: int = 100


@dataclass(frozen=True)
class KindInput:
    """A job's input as a kind's `build` sees it (after the consumer read any upload)."""

    # The text (a string input, the text field of an object input, or an uploaded text).
    text: str | None = None
    # Several texts (`Inputs.list_field` of an object input).
    texts: tuple[str, ...] | None = None
    # The uploaded image of an image-input kind.
    image: bytes | None = None
    # The input as submitted (a string or an object), for kinds that read other fields.
    raw: Any = None


@dataclass(frozen=True)
class Tuning:
    """What a kind changes about its own queue and consumer; None keeps the stage's value.

    Each field overrides one stage key for this kind only, within that key's bounds (checked at
    synth, naming the kind): `timeout_seconds` CONSUMER_TIMEOUT_SECONDS (and so the queue's
    visibility timeout and the job lease), `memory_mb` CONSUMER_MEMORY_MB, `max_retries`
    MAX_RETRIES (and so the queue's maxReceiveCount), `batch_size` BATCH_SIZE. `max_concurrency`
    caps the kind's consumer instances (the event-source mapping's MaximumConcurrency, and the
    ceiling the adaptive controller widens to; 1 is reserved concurrency 1); a stage's
    QUEUE_MAX_CONCURRENCY, when lower, still wins.
    """

    timeout_seconds: int | None = None
    memory_mb: int | None = None
    max_retries: int | None = None
    batch_size: int | None = None
    max_concurrency: int | None = None


# `build(kind, input, options) -> keyword arguments of the capability's request` (without `call`);
# `shape(result, options) -> the job's output` (a JSON-able value).
BuildFn = Callable[["Kind", KindInput, Any], dict[str, Any]]
ShapeFn = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Kind:
    """One job kind. See the module docstring; aijobs/kinds/summary.py is a small example."""

    name: str
    capability: Capability
    description: str
    # The default model per provider the stage may run the kind on (local: its fake models);
    # the first entry that offers the capability serves a stage whose own provider cannot.
    models: Mapping[str, str | None]
    options: type[KindOptions] | None = None
    # The answer's model (text kinds): the provider is asked for JSON of its schema and the answer
    # is validated (an invalid one is a retryable `invalid_output`).
    output: type[BaseModel] | None = None
    # Text kinds: the system text and the user turn, templates over `{input}` and `{options.<name>}`.
    system: str | None = None
    prompt: str = "{input}"
    # Other models a job may choose (`model` at submit), per provider.
    allowed_models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Models tried in order when the first throttles past the kind's patience, fails with 5xx after
    # its retries, or is no longer available: `provider:model` each, per provider the kind runs on.
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    inputs: Inputs = Inputs()
    # Attempts on a model before a throttle or a 5xx moves the attempt on to the next fallback
    # model (an unavailable model moves on at once).
    patience: int = 2
    # Credits a job of this kind costs (a stage's KIND_PRICES may override it).
    price: int = 1
    # Its queue and consumer where they differ from the stage's (timeout, memory, retries, batch
    # size, concurrency); see Tuning.
    tuning: Tuning = Tuning()
    # A synchronous kind runs in the API (`POST /classify`), not on a queue.
    sync: bool = False
    # An input that shows what the kind takes (the docs, the OpenAPI example, sample events and
    # the contract every kind's tests run); None: a short English text. Image kinds take uploads.
    example: Any = None
    build: BuildFn | None = None
    shape: ShapeFn | None = None

    def __post_init__(self) -> None:
        check_kind_name(self.name)
        base = OPTIONS_BASE[self.capability]
        if self.options is not None and not issubclass(self.options, base):
            raise TypeError(f"kind {self.name!r}: its options must extend {base.__name__}")
        if self.output is not None and self.capability != "text":
            raise TypeError(f"kind {self.name!r}: only text kinds have an output model")
        if not self.models:
            raise ValueError(f"kind {self.name!r} declares no models")
        if self.price < 0:
            raise ValueError(f"kind {self.name!r}: price must not be negative")
        for provider, refs in self.fallbacks.items():
            for ref in refs:
                if ":" not in ref:
                    raise ValueError(
                        f"kind {self.name!r}: fallback {ref!r} of {provider} must be provider:model"
                    )
        for template in (self.system or "", self.prompt):
            _check_template(self.name, template)

    @property
    def options_model(self) -> type[KindOptions]:
        return self.options or OPTIONS_BASE[self.capability]

    def parse_options(self, options: Mapping[str, Any]) -> KindOptions:
        """The job's options as the kind's model; pydantic's ValidationError names a bad one."""
        return self.options_model.model_validate(dict(options))

    def render(self, template: str, input: str, options: KindOptions) -> str:
        """A template over the input text and the options (`{input}`, `{options.target}`)."""
        return template.format_map({"input": input, "options": options})


def _check_template(kind: str, template: str) -> None:
    """Only `{input}` and `{options.<name>}` fields: a typo fails at import, not at the first job."""
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if name != "input" and not (name.startswith("options.") and name[8:].isidentifier()):
            raise ValueError(
                f"kind {kind!r}: template field {{{name}}} is not {{input}} or {{options.<name>}}"
            )
