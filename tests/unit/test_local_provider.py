"""The `local` provider: every capability does real work, and every magic directive misbehaves
on cue, wherever a line of the input starts with it."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import struct
import wave
import zlib
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.base import (
    CAPABILITY_NAMES,
    Call,
    Embedder,
    EmbeddingRequest,
    ImageGenerator,
    ImageRequest,
    Provider,
    SpeechRequest,
    SpeechSynthesizer,
    TextGenerator,
    TextRequest,
    VideoGenerator,
    VideoRequest,
)
from aijobs.providers.local import MODELS, LocalProvider
from aijobs.providers.local_directives import SimulatedCrash, directives_of
from aijobs.providers.local_media import average_colour, parse_png
from aijobs.providers.local_text import extractive_summary, fill_schema
from aijobs.providers.registry import PROVIDER_NAMES, get_provider

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SOLAR = (
    "Solar panels convert sunlight into electricity. My neighbour owns a red bicycle. "
    "Solar panels lower electricity bills and solar panels need little maintenance. "
    "The cafe opens at nine."
)
# The first line a kind's prompt template may put before the job's input.
TEMPLATE = "Summarise the text below in plain words.\n"


def call(default_model: str, /, **fields: Any) -> Call:
    """A call of job `job-1` on `default_model`, unless `fields` names another model."""
    return Call(**{"job_id": "job-1", "model": default_model, **fields})


def text_request(
    prompt: str = SOLAR,
    *,
    max_tokens: int = 100,
    images: tuple[bytes, ...] = (),
    output_schema: dict[str, Any] | None = None,
    system: str | None = None,
    **call_fields: Any,
) -> TextRequest:
    return TextRequest(
        call=call("local-text-1", **call_fields),
        prompt=prompt,
        max_tokens=max_tokens,
        images=images,
        output_schema=output_schema,
        system=system,
    )


def embedding_request(*texts: str, dimensions: int | None = None, **call_fields: Any) -> EmbeddingRequest:
    return EmbeddingRequest(call=call("local-embedding-1", **call_fields), texts=texts, dimensions=dimensions)


def image_request(
    prompt: str, *, aspect_ratio: str = "1:1", count: int = 1, **call_fields: Any
) -> ImageRequest:
    return ImageRequest(
        call=call("local-image-1", **call_fields), prompt=prompt, aspect_ratio=aspect_ratio, count=count
    )


def speech_request(text: str, **call_fields: Any) -> SpeechRequest:
    return SpeechRequest(call=call("local-tts-1", **call_fields), text=text)


def video_request(
    prompt: str, *, aspect_ratio: str = "16:9", duration_seconds: int | None = None, **call_fields: Any
) -> VideoRequest:
    return VideoRequest(
        call=call("local-video-1", **call_fields),
        prompt=prompt,
        aspect_ratio=aspect_ratio,
        duration_seconds=duration_seconds,
    )


def run(provider: LocalProvider, capability: str, text: str, **call_fields: Any) -> BaseModel:
    """`text` as the input of one capability (for video, its submission): every directive applies
    to each of them."""
    if capability == "text":
        return provider.generate_text(text_request(text, **call_fields))
    if capability == "embedding":
        return provider.embed(embedding_request(text, **call_fields))
    if capability == "image":
        return provider.generate_image(image_request(text, **call_fields))
    if capability == "speech":
        return provider.synthesize_speech(speech_request(text, **call_fields))
    return provider.start_video(video_request(text, **call_fields))


def expected_handle(job_id: str = "job-1", step: str = "main") -> str:
    return "local-" + hashlib.sha256((job_id + step).encode()).hexdigest()[:16]


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def provider(sleeps: list[float]) -> LocalProvider:
    return LocalProvider(throttle_retry_after=2.5, sleep=sleeps.append)


# --- small independent PNG codec ----------------------------------------------------------------


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (tag, body) of a PNG, asserting each chunk's CRC."""
    assert data[:8] == PNG_SIGNATURE
    chunks, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        tag, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF, f"bad CRC in {tag!r}"
        chunks.append((tag, body))
        offset += 12 + length
    assert offset == len(data)
    return chunks


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB PNG with unfiltered rows."""
    chunks = png_chunks(data)
    assert chunks[0][0] == b"IHDR"
    assert chunks[-1] == (b"IEND", b"")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, compression, filtering, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(body for tag, body in chunks if tag == b"IDAT"))
    stride = width * 3 + 1
    assert len(raw) == height * stride
    rows = [raw[y * stride : (y + 1) * stride] for y in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


def paeth(left: int, up: int, up_left: int) -> int:
    estimate = left + up - up_left
    options = [
        (abs(estimate - left), 0, left),
        (abs(estimate - up), 1, up),
        (abs(estimate - up_left), 2, up_left),
    ]
    return min(options)[2]


def write_png(pixels: list[list[tuple[int, ...]]], filter_type: int = 0, colour_type: int = 2) -> bytes:
    """An 8-bit PNG whose every row uses `filter_type` (0-4)."""
    height, width, bpp = len(pixels), len(pixels[0]), len(pixels[0][0])
    prev, raw = bytes(width * bpp), bytearray()
    for row in pixels:
        line = bytes(sample for pixel in row for sample in pixel)
        raw.append(filter_type)
        for i, value in enumerate(line):
            left = line[i - bpp] if i >= bpp else 0
            up_left = prev[i - bpp] if i >= bpp else 0
            predictor = [0, left, prev[i], (left + prev[i]) // 2, paeth(left, prev[i], up_left)][filter_type]
            raw.append((value - predictor) & 0xFF)
        prev = line

    def chunk(tag: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )


def noisy_pixels(base: tuple[int, int, int], size: int = 24, seed: int = 7) -> list[list[tuple[int, ...]]]:
    rng = random.Random(seed)
    return [
        [tuple(max(0, min(255, c + rng.randint(-30, 30))) for c in base) for _ in range(size)]
        for _ in range(size)
    ]


# --- magic directives: transient and throttled failures -------------------------------------------


@pytest.mark.parametrize("status", [503, 502])
def test_fail_5xx_x2_fails_attempts_one_and_two_then_succeeds(provider: LocalProvider, status: int) -> None:
    prompt = f"#fail:{status}x2 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(TransientProviderError) as caught:
            provider.generate_text(text_request(prompt, attempt=attempt))
        assert caught.value.status == status
        assert caught.value.retryable
        assert caught.value.error_class == "transient"
    result = provider.generate_text(text_request(prompt, attempt=3))
    assert result == provider.generate_text(text_request(SOLAR))


def test_fail_timeout_is_transient_without_status(provider: LocalProvider) -> None:
    with pytest.raises(TransientProviderError, match="timed out") as caught:
        provider.generate_text(text_request(f"#fail:timeoutx1 {SOLAR}", attempt=1))
    assert caught.value.status is None
    assert caught.value.retryable
    recovered = provider.generate_text(text_request(f"#fail:timeoutx1 {SOLAR}", attempt=2))
    assert recovered == provider.generate_text(text_request(SOLAR))


def test_fail_429_gives_retry_after_then_succeeds(provider: LocalProvider) -> None:
    with pytest.raises(ThrottledError) as caught:
        provider.generate_text(text_request(f"#fail:429x1 {SOLAR}", attempt=1))
    assert caught.value.retry_after == 2.5
    assert caught.value.status == 429
    assert caught.value.error_class == "throttled"
    assert caught.value.retryable
    recovered = provider.generate_text(text_request(f"#fail:429x1 {SOLAR}", attempt=2))
    assert recovered == provider.generate_text(text_request(SOLAR))


def test_throttle_retry_after_defaults_to_one_second() -> None:
    with pytest.raises(ThrottledError) as caught:
        LocalProvider().generate_text(text_request(f"#fail:429x1 {SOLAR}"))
    assert caught.value.retry_after == 1.0


@pytest.mark.parametrize("settings", [{"throttle_retry_after": -1.0}, {"video_checks": -1}])
def test_negative_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="negative"):
        LocalProvider(**settings)


def test_transient_failure_without_count_fails_every_attempt(provider: LocalProvider) -> None:
    for attempt in range(1, 6):
        with pytest.raises(TransientProviderError):
            provider.generate_text(text_request(f"#fail:503 {SOLAR}", attempt=attempt))


# --- magic directives: permanent failures ---------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error", "error_class"),
    [
        ("400", InvalidInputError, "invalid_input"),
        ("401", ProviderAuthError, "provider_auth"),
        ("403", ProviderAuthError, "provider_auth"),
        ("413", InputTooLargeError, "input_too_large"),
    ],
)
def test_permanent_failures_fail_on_every_attempt(
    provider: LocalProvider, code: str, error: type[ProviderError], error_class: str
) -> None:
    for attempt in range(1, 6):
        with pytest.raises(error) as caught:
            provider.generate_text(text_request(f"#fail:{code} {SOLAR}", attempt=attempt))
        assert caught.value.status == int(code)
        assert caught.value.error_class == error_class
        assert not caught.value.retryable


def test_a_count_limits_a_permanent_failure_too(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError):
        provider.generate_text(text_request(f"#fail:400x1 {SOLAR}", attempt=1))
    assert provider.generate_text(text_request(f"#fail:400x1 {SOLAR}", attempt=2)) == (
        provider.generate_text(text_request(SOLAR))
    )


@pytest.mark.parametrize("capability", CAPABILITY_NAMES)
def test_every_capability_honours_failure_directives(provider: LocalProvider, capability: str) -> None:
    with pytest.raises(TransientProviderError):
        run(provider, capability, "#fail:503x1 a blue pond at dawn", attempt=1)
    recovered = run(provider, capability, "#fail:503x1 a blue pond at dawn", attempt=2)
    assert recovered == run(provider, capability, "a blue pond at dawn", attempt=2)
    with pytest.raises(ProviderAuthError):
        run(provider, capability, "#fail:401 a blue pond at dawn", attempt=9)


# --- magic directives on any line (a kind's template before the job's input) ---------------------


@pytest.mark.parametrize("capability", CAPABILITY_NAMES)
def test_directives_on_a_later_line_apply_and_are_stripped(provider: LocalProvider, capability: str) -> None:
    directed = f"{TEMPLATE}#fail:503x1 a blue pond at dawn"
    with pytest.raises(TransientProviderError):
        run(provider, capability, directed, attempt=1)
    recovered = run(provider, capability, directed, attempt=2)
    assert recovered == run(provider, capability, f"{TEMPLATE}a blue pond at dawn", attempt=2)


def test_directives_of_merges_every_line_and_keeps_the_rest() -> None:
    directives, rest = directives_of(
        f"#sleep:0.5 #cost:1\n{TEMPLATE}  #fail:503x1 #running:2 {SOLAR}\n#running:1 #cost:2\nThe end."
    )
    assert rest == f"\n{TEMPLATE}{SOLAR}\n\nThe end."
    assert directives.sleeps == (0.5,)
    assert directives.running == 2  # the larger count wins
    assert directives.cost == 2.0  # the last cost wins
    assert [(fail.code, fail.times) for fail in directives.fails] == [("503", 1)]


def test_directives_on_several_lines_combine(provider: LocalProvider, sleeps: list[float]) -> None:
    prompt = f"#sleep:0.25\n{TEMPLATE}#fail:429x1 {SOLAR}\n#cost:0.5"
    with pytest.raises(ThrottledError):
        provider.generate_text(text_request(prompt, attempt=1))
    result = provider.generate_text(text_request(prompt, attempt=2))
    assert sleeps == [0.25, 0.25]
    assert result.cost == 0.5
    assert "#" not in result.text


def test_a_directive_inside_a_line_is_ordinary_text(provider: LocalProvider) -> None:
    prompt = "Please look at #fail:503 in the report."
    result = provider.generate_text(text_request(prompt, attempt=1))
    assert result.text == prompt
    assert directives_of(prompt) == (directives_of("")[0], prompt)


# --- magic directives: running, sleep, combinations, malformed ------------------------------------


def test_running_3_answers_running_for_three_checks_then_succeeds(provider: LocalProvider) -> None:
    text = "#running:3 Hello there, world"
    first = provider.synthesize_speech(speech_request(text))
    assert (first.status, first.handle, first.output, first.artifacts) == (
        "running",
        expected_handle(),
        None,
        (),
    )
    for checks in (1, 2):
        again = provider.synthesize_speech(speech_request(text, checks=checks, handle=first.handle))
        assert (again.status, again.handle) == ("running", first.handle)
    done = provider.synthesize_speech(speech_request(text, checks=3, handle=first.handle))
    assert done.status == "succeeded"
    assert done == provider.synthesize_speech(speech_request("Hello there, world"))


def test_running_handle_depends_on_job_and_step(provider: LocalProvider) -> None:
    other_step = provider.start_video(video_request("a boat", step="second"))
    other_job = provider.start_video(
        VideoRequest(call=Call(job_id="job-2", model="local-video-1"), prompt="a boat")
    )
    assert other_step.handle == expected_handle(step="second")
    assert other_job.handle == expected_handle(job_id="job-2")
    assert len({other_step.handle, other_job.handle, expected_handle()}) == 3


@pytest.mark.parametrize("handle", ["local-0000000000000000", None])
def test_unknown_handle_is_invalid(provider: LocalProvider, handle: str | None) -> None:
    with pytest.raises(InvalidInputError, match="handle"):
        provider.check_video(video_request("a boat", checks=1, handle=handle))


def test_running_still_validates_input_at_submission(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError):
        provider.synthesize_speech(speech_request("#running:2"))
    with pytest.raises(InvalidInputError):
        provider.start_video(video_request("#running:2"))


def test_sleep_calls_the_injected_sleep(provider: LocalProvider, sleeps: list[float]) -> None:
    result = provider.generate_text(text_request(f"#sleep:1.5 {SOLAR}"))
    assert sleeps == [1.5]
    assert result == provider.generate_text(text_request(SOLAR))
    assert sleeps == [1.5]


def test_combined_directives_sleep_on_every_attempt_and_fail_twice(
    provider: LocalProvider, sleeps: list[float]
) -> None:
    prompt = f"#sleep:0.5 #fail:503x2 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(TransientProviderError):
            provider.generate_text(text_request(prompt, attempt=attempt))
    result = provider.generate_text(text_request(prompt, attempt=3))
    assert sleeps == [0.5, 0.5, 0.5]
    assert "#" not in result.text
    assert result == provider.generate_text(text_request(SOLAR))


def test_combined_failures_apply_in_order(provider: LocalProvider) -> None:
    text = "#fail:503x1 #fail:429x2 #running:1 Hello there"
    with pytest.raises(TransientProviderError):
        provider.synthesize_speech(speech_request(text, attempt=1))
    with pytest.raises(ThrottledError):
        provider.synthesize_speech(speech_request(text, attempt=2))
    running = provider.synthesize_speech(speech_request(text, attempt=3))
    assert running.status == "running"
    done = provider.synthesize_speech(speech_request(text, attempt=3, checks=1, handle=running.handle))
    assert done.status == "succeeded"


MALFORMED = [
    "#fail:abc",
    "#fail:503xz",
    "#fail:",
    "#fail:500x1",
    "#running:x",
    "#running:-1",
    "#sleep:abc",
    "#sleep:31",
    "#crash:",
    "#crash:x",
    "#crash:-1",
    "#cost:",
    "#cost:-0.5",
    "#cost:abc",
    "#cost:1e3",
]


@pytest.mark.parametrize("directive", MALFORMED)
@pytest.mark.parametrize("before", ["", TEMPLATE], ids=["first-line", "later-line"])
def test_malformed_directive_is_invalid_input_naming_it(
    provider: LocalProvider, sleeps: list[float], directive: str, before: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        provider.generate_text(text_request(f"{before}#sleep:1 {directive} {SOLAR}"))
    assert directive in str(caught.value)
    assert caught.value.status == 400
    assert sleeps == []  # refused before any directive took effect


def test_crash_kills_the_first_attempt_only_and_is_no_provider_error(
    provider: LocalProvider, sleeps: list[float]
) -> None:
    prompt = f"#sleep:0.2 #crash {SOLAR}"
    with pytest.raises(SimulatedCrash, match="attempt 1") as caught:
        provider.generate_text(text_request(prompt, attempt=1))
    # Nothing that catches Exception (the batch processor, the consumer) can swallow it.
    assert isinstance(caught.value, BaseException)
    assert not isinstance(caught.value, Exception)
    assert sleeps == [0.2]  # the sleep happens before the crash
    assert provider.generate_text(text_request(prompt, attempt=2)) == provider.generate_text(
        text_request(SOLAR)
    )


def test_crash_n_kills_attempts_up_to_n_and_combines_with_failures(provider: LocalProvider) -> None:
    prompt = f"#CRASH:2 #fail:503x3 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(SimulatedCrash):
            provider.generate_text(text_request(prompt, attempt=attempt))
    with pytest.raises(TransientProviderError):
        provider.generate_text(text_request(prompt, attempt=3))
    assert provider.generate_text(text_request(prompt, attempt=4)).text
    assert provider.generate_text(text_request(f"#crash:0 {SOLAR}")).text


def test_unknown_hashtag_is_ordinary_text_and_ends_directives(provider: LocalProvider) -> None:
    prompt = "#weekly #fail:503x1 Solar panels convert sunlight."
    assert provider.generate_text(text_request(prompt, attempt=1)).text == prompt
    # Words that only look like directives (no colon, or a longer word) are text, not misbehaviour.
    for ordinary in (
        "#running late again, the bus broke down.",
        "#crashed servers paged everyone.",
        "#outages happen.",
    ):
        assert provider.generate_text(text_request(ordinary, attempt=1)).text == ordinary


def test_cost_is_reported_by_a_succeeded_result_only(provider: LocalProvider) -> None:
    done = provider.generate_text(text_request(f"#cost:0.05 {SOLAR}"))
    plain = provider.generate_text(text_request(SOLAR))
    assert (done.cost, plain.cost) == (0.05, 0.0)
    assert done.model_copy(update={"cost": 0.0}) == plain  # stripped before the work
    waiting = provider.synthesize_speech(speech_request("#cost:2 #running:1 Hello there"))
    assert (waiting.status, waiting.cost) == ("running", 0.0)
    checked = provider.synthesize_speech(
        speech_request("#cost:2 #running:1 Hello there", checks=1, handle=waiting.handle)
    )
    assert (checked.status, checked.cost) == ("succeeded", 2.0)
    with pytest.raises(TransientProviderError):
        provider.generate_text(text_request(f"#cost:2 #fail:503x1 {SOLAR}", attempt=1))


def test_every_capability_reports_the_directed_cost(provider: LocalProvider) -> None:
    prompt = "#cost:0.25 a blue pond"
    assert provider.embed(embedding_request(prompt)).cost == 0.25
    assert provider.generate_image(image_request(prompt)).cost == 0.25
    assert provider.synthesize_speech(speech_request(prompt)).cost == 0.25
    assert provider.start_video(video_request(prompt)).cost == 0.0  # still running
    assert provider.check_video(video_request(prompt, checks=1, handle=expected_handle())).cost == 0.25


@pytest.mark.parametrize("capability", CAPABILITY_NAMES)
def test_outage_fails_every_attempt_until_an_operator_reruns_the_job(
    provider: LocalProvider, capability: str
) -> None:
    for attempt in (1, 2, 5):
        with pytest.raises(TransientProviderError) as caught:
            run(provider, capability, "#OUTAGE a blue pond. More of it.", attempt=attempt)
        assert caught.value.status == 503
    rerun = run(provider, capability, "#outage a blue pond. More of it.", reruns=1)
    assert rerun == run(provider, capability, "a blue pond. More of it.", reruns=1)


# --- models ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("capability", CAPABILITY_NAMES)
def test_a_model_the_provider_does_not_have_is_refused_before_any_directive(
    provider: LocalProvider, sleeps: list[float], capability: str
) -> None:
    foreign = {"text": "local-embedding-1", "embedding": "local-text-1"}.get(capability, "gpt-4o")
    with pytest.raises(InvalidInputError) as caught:
        run(provider, capability, "#sleep:1 #fail:503 a blue pond", model=foreign)
    assert foreign in str(caught.value)
    assert MODELS[capability][0] in str(caught.value)  # it says which models it has
    assert sleeps == []


def test_the_second_text_model_answers_under_its_own_name(provider: LocalProvider) -> None:
    assert MODELS["text"] == ("local-text-1", "local-text-2")
    first = provider.generate_text(text_request(SOLAR))
    second = provider.generate_text(text_request(SOLAR, model="local-text-2"))
    assert (first.model, second.model) == ("local-text-1", "local-text-2")
    assert second.text == first.text


# --- text: extractive answers ------------------------------------------------------------------


def test_extractive_summary_keeps_the_most_relevant_sentence() -> None:
    assert extractive_summary(SOLAR, 1) == [
        "Solar panels lower electricity bills and solar panels need little maintenance."
    ]


def test_extractive_summary_keeps_original_order() -> None:
    assert extractive_summary(SOLAR, 2) == [
        "Solar panels convert sunlight into electricity.",
        "Solar panels lower electricity bills and solar panels need little maintenance.",
    ]


def test_extractive_summary_caps_at_the_text_and_breaks_ties_by_position() -> None:
    assert len(extractive_summary(SOLAR, 50)) == 4
    assert extractive_summary("Alpha beta. Gamma delta. Epsilon zeta.", 1) == ["Alpha beta."]
    assert extractive_summary("Alpha beta.\n\nGamma delta", 2) == ["Alpha beta.", "Gamma delta"]


def test_text_answer_is_about_a_third_of_the_sentences(provider: LocalProvider) -> None:
    result = provider.generate_text(text_request(SOLAR))
    assert result.text == (
        "Solar panels convert sunlight into electricity. "
        "Solar panels lower electricity bills and solar panels need little maintenance."
    )
    assert (result.data, result.truncated, result.model, result.cost) == (None, False, "local-text-1", 0.0)
    assert result.usage == {"input_tokens": 28, "output_tokens": 17}
    seven = " ".join(
        [
            "Rivers carry water to the sea.",
            "Rivers shape valleys over time.",
            "My cat sleeps a lot.",
            "Rivers and valleys host farms.",
            "The bus was late.",
            "Rivers flood the valleys in spring.",
            "Tea is hot.",
        ]
    )
    assert provider.generate_text(text_request(seven)).text == (
        "Rivers shape valleys over time. Rivers and valleys host farms. Rivers flood the valleys in spring."
    )


def test_text_answer_keeps_within_max_tokens(provider: LocalProvider) -> None:
    cut = provider.generate_text(text_request(SOLAR, max_tokens=5))
    assert cut.text == "Solar panels convert sunlight into"
    assert cut.truncated
    assert cut.usage["output_tokens"] == 5
    # A kept sentence that does not fit is dropped whole.
    short = provider.generate_text(text_request(SOLAR, max_tokens=10))
    assert short.text == "Solar panels convert sunlight into electricity."
    assert short.usage["output_tokens"] <= 10


def test_hyphenated_words_count_against_max_tokens(provider: LocalProvider) -> None:
    # The usage counts "state-of-the-art" as four words: the cut must count them the same way.
    prompt = "A state-of-the-art, well-known, end-to-end pipeline. Another line here."
    result = provider.generate_text(text_request(prompt, max_tokens=3))
    assert result.usage["output_tokens"] <= 3
    assert result.truncated


def test_text_system_is_not_part_of_the_answer(provider: LocalProvider) -> None:
    with_system = provider.generate_text(text_request(SOLAR, system="#fail:503 Answer briefly."))
    assert with_system == provider.generate_text(text_request(SOLAR))


def test_text_rejects_oversized_input(provider: LocalProvider) -> None:
    with pytest.raises(InputTooLargeError):
        provider.generate_text(text_request("word. " * 170_000))


# --- text: images in the user turn ---------------------------------------------------------------


def caption(
    provider: LocalProvider, image: bytes, prompt: str = "Describe this image in one sentence."
) -> str:
    return provider.generate_text(text_request(prompt, images=(image,))).text


@pytest.mark.parametrize("colour", ["red", "green", "blue", "yellow", "purple", "white", "black"])
def test_caption_of_generated_image_names_its_dominant_colour(provider: LocalProvider, colour: str) -> None:
    image = provider.generate_image(image_request(f"a {colour} house by the sea")).images[0].data
    assert caption(provider, image) == f"a 64x64 image, mostly {colour}"


def test_caption_needs_no_prompt_text(provider: LocalProvider) -> None:
    image = provider.generate_image(image_request("a red barn")).images[0].data
    assert caption(provider, image, prompt="") == "a 64x64 image, mostly red"


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4])
def test_caption_undoes_every_png_filter(provider: LocalProvider, filter_type: int) -> None:
    pixels = noisy_pixels((40, 165, 60))
    image = write_png(pixels, filter_type)
    assert caption(provider, image) == "a 24x24 image, mostly green"
    # The exact mean, so that a slightly wrong predictor cannot hide behind the colour name.
    mean = tuple(sum(pixel[c] for row in pixels for pixel in row) / (24 * 24) for c in range(3))
    assert average_colour(parse_png(image)) == pytest.approx(mean)


def test_caption_reads_grey_and_rgba_images(provider: LocalProvider) -> None:
    grey = write_png([[(240,)] * 10 for _ in range(6)], filter_type=2, colour_type=0)
    grey_alpha = write_png([[(20, 255)] * 3 for _ in range(2)], filter_type=1, colour_type=4)
    rgba = write_png([[(35, 75, 215, 128)] * 5 for _ in range(5)], filter_type=4, colour_type=6)
    assert caption(provider, grey) == "a 10x6 image, mostly white"
    assert caption(provider, grey_alpha) == "a 3x2 image, mostly black"
    assert caption(provider, rgba) == "a 5x5 image, mostly blue"


def test_caption_without_colour_for_undecoded_formats(provider: LocalProvider) -> None:
    image = bytearray(write_png(noisy_pixels((200, 30, 30), size=4)))
    image[24] = 16  # bit depth of IHDR
    image[29:33] = struct.pack(">I", zlib.crc32(bytes(image[12:29])) & 0xFFFFFFFF)
    assert caption(provider, bytes(image)) == "a 4x4 image"


@pytest.mark.parametrize("data", [b"", b"GIF89a not a png", PNG_SIGNATURE + b"\x00\x00"])
def test_caption_rejects_non_png_bytes(provider: LocalProvider, data: bytes) -> None:
    with pytest.raises(InvalidInputError):
        caption(provider, data)


def test_caption_rejects_a_corrupted_png(provider: LocalProvider) -> None:
    image = bytearray(provider.generate_image(image_request("a red barn")).images[0].data)
    image[40] ^= 0xFF  # inside IDAT: its CRC no longer matches
    with pytest.raises(InvalidInputError, match="CRC"):
        caption(provider, bytes(image))


def test_caption_honours_directives_from_the_prompt(provider: LocalProvider) -> None:
    image = provider.generate_image(image_request("a red barn")).images[0].data
    with pytest.raises(ProviderAuthError):
        caption(provider, image, prompt=f"{TEMPLATE}#fail:401")


def test_caption_fills_an_output_schema_from_the_description(provider: LocalProvider) -> None:
    class Description(BaseModel):
        caption: str = Field(max_length=200)

    image = provider.generate_image(image_request("a blue pond")).images[0].data
    schema = Description.model_json_schema()
    result = provider.generate_text(text_request("Describe it.", images=(image,), output_schema=schema))
    assert result.data == {"caption": "a 64x64 image, mostly blue"}
    assert Description.model_validate_json(result.text).caption == "a 64x64 image, mostly blue"


# --- text: structured output (fill_schema) -------------------------------------------------------


class Colour(StrEnum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Address(BaseModel):
    city: str = Field(min_length=2, max_length=12)
    postcode: str | None = Field(default=None, max_length=8)


class Ticket(BaseModel):
    title: str = Field(min_length=3, max_length=24)
    mood: Literal["positive", "negative", "neutral"]
    colour: Colour
    urgency: int = Field(ge=1, le=5)
    confidence: float = Field(ge=0.0, le=1.0)
    ratio: float = Field(gt=2, lt=3)
    tags: list[str] = Field(min_length=2, max_length=4)
    offices: list[Address] = Field(min_length=2, max_length=3)
    home: Address | None
    note: str | None = None
    escalate: bool


COMPLAINT = (
    "The green checkout page is broken and terrible. Customers hate the checkout page. "
    "Please fix the checkout today."
)


def test_fill_schema_satisfies_a_nested_pydantic_schema() -> None:
    schema = Ticket.model_json_schema()
    # The features the test is about are really in the schema pydantic made.
    assert set(schema["$defs"]) == {"Address", "Colour"}
    assert {"$ref": "#/$defs/Address"} in schema["properties"]["home"]["anyOf"]
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"]
    assert schema["properties"]["offices"]["items"] == {"$ref": "#/$defs/Address"}

    value = fill_schema(schema, COMPLAINT)
    ticket = Ticket.model_validate(value)
    assert value == fill_schema(schema, COMPLAINT)  # deterministic
    assert ticket.mood == "negative"  # the text's sentiment
    assert ticket.colour is Colour.GREEN  # the value the text names
    assert 2 <= len(ticket.tags) <= 4
    assert ticket.tags[0] == "checkout"  # the most frequent content word
    assert set(ticket.tags) <= set(COMPLAINT.lower().replace(".", "").split())
    assert 2 <= len(ticket.offices) <= 3
    assert ticket.home is not None  # `X | None` takes the non-null branch
    assert COMPLAINT.startswith(ticket.title)  # strings are the text's extract, cut to maxLength
    assert len(ticket.title) == 24


def test_fill_schema_pads_short_strings_and_short_lists() -> None:
    class Code(BaseModel):
        code: str = Field(min_length=12)
        words: list[str] = Field(min_length=5)

    value = Code.model_validate(fill_schema(Code.model_json_schema(), "Hi there."))
    assert value.code.startswith("Hi there.")
    assert len(value.words) == 5


def test_text_with_an_output_schema_answers_schema_valid_json(provider: LocalProvider) -> None:
    schema = Ticket.model_json_schema()
    result = provider.generate_text(
        text_request(f"{TEMPLATE}#cost:0.01 {COMPLAINT}", output_schema=schema, output_name="ticket")
    )
    assert result.data is not None
    assert json.loads(result.text) == result.data
    assert Ticket.model_validate_json(result.text) == Ticket.model_validate(result.data)
    assert result.data == fill_schema(schema, f"{TEMPLATE}{COMPLAINT}")
    assert result.cost == 0.01


class Verdict(BaseModel):
    label: Literal["positive", "negative", "neutral", "question"]
    score: float = Field(ge=0.0, le=1.0, description="confidence from 0 to 1")
    tags: list[str] = Field(default_factory=list, max_length=3)


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("I love this app, the export is fast and the support was great", "positive"),
        ("The upload is broken and keeps crashing, terrible experience", "negative"),
        ("This is not good at all", "negative"),
        ("No problem, the parcel arrived", "positive"),
        ("The meeting moved to Thursday at ten", "neutral"),
        ("How do I export my invoices?", "question"),
        ("Why does the export take so long", "question"),
    ],
)
def test_a_classification_schema_gets_the_sentiment_label(
    provider: LocalProvider, text: str, label: str
) -> None:
    result = provider.generate_text(text_request(text, output_schema=Verdict.model_json_schema()))
    verdict = Verdict.model_validate(result.data)
    assert verdict.label == label
    assert 0.0 <= verdict.score <= 1.0
    assert len(verdict.tags) <= 3
    assert result == provider.generate_text(text_request(text, output_schema=Verdict.model_json_schema()))


def test_classification_tags_are_top_keywords_and_stronger_sentiment_scores_higher() -> None:
    schema = Verdict.model_json_schema()
    tagged = Verdict.model_validate(
        fill_schema(schema, "Export failed. The export of invoices failed again; invoices missing.")
    )
    assert tagged.tags == ["export", "failed", "invoices"]
    strong = Verdict.model_validate(fill_schema(schema, "great, fast, lovely"))
    weak = Verdict.model_validate(fill_schema(schema, "great"))
    assert strong.label == weak.label == "positive"
    assert strong.score > weak.score


def test_an_enum_without_a_sentiment_value_takes_the_named_or_first_value() -> None:
    class Pick(BaseModel):
        colour: Colour

    schema = Pick.model_json_schema()
    assert fill_schema(schema, "I love the blue one, it is great.") == {"colour": "blue"}
    assert fill_schema(schema, "Nothing to choose here.") == {"colour": "red"}


class AtLeastFive(BaseModel):
    value: int = Field(ge=5)


class BelowNeutral(BaseModel):
    value: float = Field(lt=0.6)


class PositiveInteger(BaseModel):
    value: int = Field(gt=0, le=10)


class AtMostMinusOne(BaseModel):
    value: float = Field(le=-1)


class Percent(BaseModel):
    value: int = Field(ge=0, le=100)


class Narrow(BaseModel):
    value: float = Field(ge=0.2, le=0.4)


class Unbounded(BaseModel):
    value: float


@pytest.mark.parametrize(
    "model",
    [AtLeastFive, BelowNeutral, PositiveInteger, AtMostMinusOne, Percent, Narrow, Unbounded],
    ids=lambda model: model.__name__,
)
@pytest.mark.parametrize("text", ["The meeting moved to Thursday at ten", "I love it, great and fast"])
def test_fill_schema_numbers_respect_every_bound(model: type[BaseModel], text: str) -> None:
    # A neutral text scores 0.6, a positive one 0.875: each must end up within the bounds.
    model.model_validate(fill_schema(model.model_json_schema(), text))


# --- embedding ----------------------------------------------------------------------------------


def test_embedding_is_unit_norm_deterministic_and_text_dependent(provider: LocalProvider) -> None:
    first = provider.embed(embedding_request("The quick brown fox jumps over the lazy dog"))
    again = provider.embed(embedding_request("The quick brown fox jumps over the lazy dog"))
    other = provider.embed(embedding_request("An invoice for three solar panels"))
    (vector,) = first.vectors
    assert first.dimensions == len(vector) == 64
    assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, abs_tol=1e-5)
    assert all(round(v, 6) == v for v in vector)
    assert again == first
    assert other.vectors[0] != vector
    assert (first.model, first.cost) == ("local-embedding-1", 0.0)
    assert first.usage == {"input_tokens": 9, "texts": 1}


def test_embedding_shares_direction_for_shared_words(provider: LocalProvider) -> None:
    def embed(text: str) -> tuple[float, ...]:
        return provider.embed(embedding_request(text)).vectors[0]

    def cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    base = embed("solar panels on the roof")
    assert cosine(base, embed("solar panels on the roof today")) > cosine(
        base, embed("invoice overdue reminder")
    )


def test_embedding_a_batch_gives_one_vector_per_text(provider: LocalProvider) -> None:
    texts = ("#fail:503x1 solar panels", "invoice overdue", "the roof")
    with pytest.raises(TransientProviderError):
        provider.embed(embedding_request(*texts, attempt=1))
    batch = provider.embed(embedding_request(*texts, attempt=2))
    singles = [provider.embed(embedding_request(text)).vectors[0] for text in ("solar panels", *texts[1:])]
    assert list(batch.vectors) == singles
    assert batch.usage == {"input_tokens": 6, "texts": 3}


def test_embedding_refuses_too_large_a_batch(provider: LocalProvider) -> None:
    with pytest.raises(InputTooLargeError):
        provider.embed(embedding_request(*["word"] * 2049))


@pytest.mark.parametrize("dimensions", [8, 300, 1024])
def test_embedding_dimensions_option(provider: LocalProvider, dimensions: int) -> None:
    result = provider.embed(embedding_request("hello world", dimensions=dimensions))
    assert result.dimensions == len(result.vectors[0]) == dimensions


@pytest.mark.parametrize("dimensions", [0, 4, 7, 1025, 2000])
def test_embedding_rejects_bad_dimensions(provider: LocalProvider, dimensions: int) -> None:
    with pytest.raises(InvalidInputError, match="dimensions"):
        provider.embed(embedding_request("hello", dimensions=dimensions))


# --- image --------------------------------------------------------------------------------------


def test_image_generate_writes_a_valid_png(provider: LocalProvider) -> None:
    result = provider.generate_image(image_request("a lighthouse at dusk"))
    (artifact,) = result.images
    assert (artifact.name, artifact.content_type) == ("image.png", "image/png")
    width, height, rows = read_png(artifact.data)
    assert (width, height) == (64, 64)
    assert all(len(row) == 64 * 3 for row in rows)
    assert len({bytes(row) for row in rows}) > 1
    assert result.usage == {"images": 1, "pixels": 64 * 64}
    assert (result.model, result.cost) == ("local-image-1", 0.0)


def test_image_depends_on_the_prompt(provider: LocalProvider) -> None:
    lighthouse = provider.generate_image(image_request("a lighthouse")).images[0].data
    windmill = provider.generate_image(image_request("a windmill")).images[0].data
    assert lighthouse != windmill


def test_image_count_makes_that_many_distinct_images(provider: LocalProvider) -> None:
    result = provider.generate_image(image_request("a lighthouse", count=3, aspect_ratio="16:9"))
    assert [image.name for image in result.images] == ["image-1.png", "image-2.png", "image-3.png"]
    assert {read_png(image.data)[:2] for image in result.images} == {(114, 64)}
    assert len({image.data for image in result.images}) == 3
    assert (
        result.images[0].data
        == provider.generate_image(image_request("a lighthouse", aspect_ratio="16:9")).images[0].data
    )
    assert result.usage == {"images": 3, "pixels": 3 * 114 * 64}


@pytest.mark.parametrize(
    ("aspect_ratio", "size"),
    [
        ("1:1", (64, 64)),
        ("16:9", (114, 64)),
        ("9:16", (64, 114)),
        ("4:3", (85, 64)),
        ("3:2", (96, 64)),
        ("2:3", (64, 96)),
        ("21:9", (149, 64)),
        ("100:1", (512, 64)),  # the long side is capped
    ],
)
def test_image_size_follows_the_aspect_ratio(
    provider: LocalProvider, aspect_ratio: str, size: tuple[int, int]
) -> None:
    result = provider.generate_image(image_request("a lighthouse", aspect_ratio=aspect_ratio))
    assert read_png(result.images[0].data)[:2] == size
    assert result.usage["pixels"] == size[0] * size[1]


@pytest.mark.parametrize("aspect_ratio", ["wide", "16x9", "0:1", "1:0", "-1:1", ":", "1.5:1"])
def test_image_refuses_a_malformed_aspect_ratio(provider: LocalProvider, aspect_ratio: str) -> None:
    with pytest.raises(InvalidInputError, match="aspect ratio"):
        provider.generate_image(image_request("a lighthouse", aspect_ratio=aspect_ratio))


# --- speech -------------------------------------------------------------------------------------


def test_speech_writes_a_16khz_mono_wav_with_one_tone_per_word(provider: LocalProvider) -> None:
    result = provider.synthesize_speech(speech_request("Hello there, world"))
    assert result.status == "succeeded"
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type) == ("speech.wav", "audio/wav")
    with wave.open(io.BytesIO(artifact.data), "rb") as reader:
        assert (reader.getframerate(), reader.getnchannels(), reader.getsampwidth()) == (16_000, 1, 2)
        frames = reader.getnframes()
        samples = struct.unpack(f"<{frames}h", reader.readframes(frames))
    duration = 3 * 0.12 + 2 * 0.04
    assert frames / 16_000 == pytest.approx(duration)
    assert result.output == {"audio": "speech.wav", "duration_seconds": pytest.approx(duration), "words": 3}
    assert max(abs(s) for s in samples[:1920]) > 5000  # the first word is audible
    assert set(samples[1920:2560]) == {0}  # the gap after it is silent
    assert result.usage == {"characters": 18, "audio_ms": 440}
    assert (result.model, result.cost) == ("local-tts-1", 0.0)


def test_speech_caps_at_sixty_seconds(provider: LocalProvider) -> None:
    longest = provider.synthesize_speech(speech_request("word " * 375))
    assert longest.output["duration_seconds"] <= 60.0
    with pytest.raises(InputTooLargeError):
        provider.synthesize_speech(speech_request("word " * 376))


def test_speech_refuses_text_without_words(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError, match="words"):
        provider.synthesize_speech(speech_request("!!! ???"))


# --- video --------------------------------------------------------------------------------------


def test_video_is_submitted_then_checked_until_done(provider: LocalProvider) -> None:
    submitted = provider.start_video(video_request("a boat on a lake"))
    assert (submitted.status, submitted.handle, submitted.artifacts) == ("running", expected_handle(), ())
    waiting = provider.check_video(video_request("a boat on a lake", checks=0, handle=submitted.handle))
    assert waiting.status == "running"
    done = provider.check_video(video_request("a boat on a lake", checks=1, handle=submitted.handle))
    assert done.status == "succeeded"
    assert [a.name for a in done.artifacts] == [f"frame-{i:03d}.png" for i in range(4)]
    assert {a.content_type for a in done.artifacts} == {"image/png"}
    assert {read_png(a.data)[:2] for a in done.artifacts} == {(57, 32)}  # 16:9, 32 px short side
    assert len({a.data for a in done.artifacts}) == 4  # the frames move
    assert done.output == {"frames": 4, "width": 57, "height": 32}
    assert done.usage == {"videoSeconds": 4, "frames": 4}
    assert (done.model, done.cost) == ("local-video-1", 0.0)


def test_video_checks_setting_and_running_directive(sleeps: list[float]) -> None:
    slow = LocalProvider(video_checks=3, sleep=sleeps.append)
    handle = slow.start_video(video_request("a boat")).handle
    assert handle == expected_handle()
    states = [slow.check_video(video_request("a boat", checks=n, handle=handle)).status for n in range(1, 4)]
    assert states == ["running", "running", "succeeded"]
    override = [
        slow.check_video(video_request("#running:1 a boat", checks=n, handle=handle)).status for n in (0, 1)
    ]
    assert override == ["running", "succeeded"]
    immediate = LocalProvider(video_checks=0).check_video(video_request("a boat", handle=handle))
    assert immediate.status == "succeeded"


@pytest.mark.parametrize(("aspect_ratio", "size"), [("1:1", (32, 32)), ("9:16", (32, 57))])
def test_video_frames_follow_the_aspect_ratio(
    provider: LocalProvider, aspect_ratio: str, size: tuple[int, int]
) -> None:
    done = provider.check_video(
        video_request(
            "a boat", aspect_ratio=aspect_ratio, checks=1, handle=expected_handle(), duration_seconds=6
        )
    )
    assert {read_png(a.data)[:2] for a in done.artifacts} == {size}
    assert done.usage["videoSeconds"] == 6


# --- every capability: determinism, empty input -------------------------------------------------


def describe_a_pond(provider: LocalProvider) -> BaseModel:
    image = provider.generate_image(image_request("a blue pond")).images[0].data
    return provider.generate_text(text_request("Describe it.", images=(image,)))


DETERMINISTIC: dict[str, Callable[[LocalProvider], BaseModel]] = {
    "text": lambda p: p.generate_text(text_request(SOLAR)),
    "text-schema": lambda p: p.generate_text(
        text_request(COMPLAINT, output_schema=Ticket.model_json_schema())
    ),
    "caption": describe_a_pond,
    "embedding": lambda p: p.embed(embedding_request(SOLAR)),
    "image": lambda p: p.generate_image(image_request("a blue pond", count=2)),
    "speech": lambda p: p.synthesize_speech(speech_request("hello world")),
    "video": lambda p: p.check_video(video_request("a blue pond", checks=1, handle=expected_handle())),
}


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_same_request_gives_identical_results(name: str) -> None:
    first, second = DETERMINISTIC[name](LocalProvider()), DETERMINISTIC[name](LocalProvider())
    assert first == second
    dumped = first.model_dump()
    assert dumped["cost"] == 0.0
    assert str(dumped["model"]).startswith("local-")
    assert dumped["usage"]


@pytest.mark.parametrize("capability", CAPABILITY_NAMES)
@pytest.mark.parametrize("value", ["", "   ", "\n\n", "#sleep:0", "#fail:503x0\n  #cost:1"])
def test_empty_input_is_invalid(provider: LocalProvider, capability: str, value: str) -> None:
    with pytest.raises(InvalidInputError):
        run(provider, capability, value)


def test_check_video_refuses_empty_input_too(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError):
        provider.check_video(video_request("#sleep:0", checks=1, handle=expected_handle()))


def test_the_provider_offers_every_capability() -> None:
    local = LocalProvider()
    assert local.capabilities == frozenset(CAPABILITY_NAMES) == frozenset(MODELS)
    for port in (TextGenerator, Embedder, ImageGenerator, SpeechSynthesizer, VideoGenerator):
        assert isinstance(local, port)


# --- registry -----------------------------------------------------------------------------------


def test_registry_returns_a_cached_local_provider() -> None:
    provider: Provider = get_provider("local")
    assert isinstance(provider, LocalProvider)
    assert provider.name == "local"
    assert get_provider("local") is provider
    assert PROVIDER_NAMES == ("local", "bedrock", "polly", "openai")
    assert provider.generate_text(text_request(SOLAR)).text


def test_registry_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="local") as caught:
        get_provider("gemini")
    assert "gemini" in str(caught.value)


@pytest.mark.parametrize("name", ["bedrock", "polly", "openai"])
def test_registry_needs_settings_for_the_other_providers(name: str) -> None:
    with pytest.raises(ValueError, match="build_provider"):
        get_provider(name)


# --- model faults: end of life, and faults of one model only ---------------------------------------


@pytest.mark.parametrize("capability", ["text", "embedding", "image", "speech", "video"])
def test_fail_eol_is_the_unavailable_model_bedrock_answers_after_its_end_of_life(
    provider: LocalProvider, capability: str
) -> None:
    from aijobs.errors import ModelUnavailableError

    for attempt in (1, 2, 3):
        with pytest.raises(ModelUnavailableError) as caught:
            run(provider, capability, f"#fail:eol {SOLAR}", attempt=attempt)
        error = caught.value
        assert (error.error_class, error.retryable, error.reason, error.status) == (
            "model_unavailable", False, "end_of_life", 404,
        )  # fmt: skip
        assert "reached the end of its life" in str(error)
        assert error.model == run_model(capability)


def run_model(capability: str) -> str:
    return {"text": "local-text-1", "embedding": "local-embedding-1", "image": "local-image-1",
            "speech": "local-tts-1", "video": "local-video-1"}[capability]  # fmt: skip


def test_a_fault_at_a_model_hits_only_that_model(provider: LocalProvider) -> None:
    text = f"#fail:503@local-text-1 {SOLAR}"
    with pytest.raises(TransientProviderError):
        provider.generate_text(text_request(text))
    answer = provider.generate_text(text_request(text, model="local-text-2"))
    assert answer.model == "local-text-2"
    from aijobs.errors import ModelUnavailableError

    with pytest.raises(ModelUnavailableError):
        provider.generate_text(text_request(f"#fail:eol@local-text-2 {SOLAR}", model="local-text-2"))
    assert provider.generate_text(text_request(f"#fail:eol@local-text-2 {SOLAR}")).model == "local-text-1"


@pytest.mark.parametrize("token", ["#fail:503@", "#fail:503@bad/model", "#fail:503x2@"])
def test_a_malformed_model_fault_is_refused(provider: LocalProvider, token: str) -> None:
    with pytest.raises(InvalidInputError, match="malformed local-provider directive"):
        provider.generate_text(text_request(f"{token} {SOLAR}"))
