"""The `local` provider: every kind does real work, and every magic directive misbehaves on cue."""

from __future__ import annotations

import hashlib
import io
import math
import random
import struct
import time
import wave
import zlib
from typing import Any

import pytest

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.base import Provider, ProviderRequest, ProviderResult
from aijobs.providers.failures import aws_failure
from aijobs.providers.local import LocalProvider, SimulatedCrash
from aijobs.providers.registry import PROVIDER_NAMES, get_provider
from tests.unit.test_provider_failures import END_OF_LIFE, bedrock_error

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SOLAR = (
    "Solar panels convert sunlight into electricity. My neighbour owns a red bicycle. "
    "Solar panels lower electricity bills and solar panels need little maintenance. "
    "The cafe opens at nine."
)


def request(kind: str = "summary", input: Any = SOLAR, **fields: Any) -> ProviderRequest:
    return ProviderRequest(job_id="job-1", kind=kind, input=input, **fields)


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
    text = f"#fail:{status}x2 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(TransientProviderError) as caught:
            provider.run(request(input=text, attempt=attempt))
        assert caught.value.status == status
        assert caught.value.retryable
        assert caught.value.error_class == "transient"
    result = provider.run(request(input=text, attempt=3))
    assert result.status == "succeeded"
    assert result.output == provider.run(request(input=SOLAR)).output


def test_fail_timeout_is_transient_without_status(provider: LocalProvider) -> None:
    with pytest.raises(TransientProviderError, match="timed out") as caught:
        provider.run(request(input=f"#fail:timeoutx1 {SOLAR}", attempt=1))
    assert caught.value.status is None
    assert provider.run(request(input=f"#fail:timeoutx1 {SOLAR}", attempt=2)).status == "succeeded"


def test_fail_429_gives_retry_after_then_succeeds(provider: LocalProvider) -> None:
    with pytest.raises(ThrottledError) as caught:
        provider.run(request(input=f"#fail:429x1 {SOLAR}", attempt=1))
    assert caught.value.retry_after == 2.5
    assert caught.value.status == 429
    assert caught.value.error_class == "throttled"
    assert provider.run(request(input=f"#fail:429x1 {SOLAR}", attempt=2)).status == "succeeded"


def test_throttle_retry_after_defaults_to_one_second() -> None:
    with pytest.raises(ThrottledError) as caught:
        LocalProvider().run(request(input=f"#fail:429x1 {SOLAR}"))
    assert caught.value.retry_after == 1.0


def test_transient_failure_without_count_fails_every_attempt(provider: LocalProvider) -> None:
    for attempt in range(1, 6):
        with pytest.raises(TransientProviderError):
            provider.run(request(input=f"#fail:503 {SOLAR}", attempt=attempt))


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
            provider.run(request(input=f"#fail:{code} {SOLAR}", attempt=attempt))
        assert caught.value.status == int(code)
        assert caught.value.error_class == error_class
        assert not caught.value.retryable


@pytest.mark.parametrize("kind", ["summary", "embedding", "image-generate", "video-generate"])
def test_fail_eol_is_the_unavailable_model_bedrock_answers_after_its_end_of_life(
    provider: LocalProvider, kind: str
) -> None:
    bedrock = aws_failure(bedrock_error("ResourceNotFoundException", END_OF_LIFE, 404), service="Bedrock")
    for attempt in (1, 2, 3):
        with pytest.raises(ProviderError) as caught:
            provider.run(request(kind, f"#fail:eol {SOLAR}", attempt=attempt))
        error = caught.value
        assert type(error) is type(bedrock) is ModelUnavailableError
        assert (error.error_class, error.retryable, error.reason, error.status) == (
            "model_unavailable", False, "end_of_life", 404,
        )  # fmt: skip
        # The same message as Bedrock's path, but for the service that answered.
        assert str(error).removeprefix("local provider") == str(bedrock).removeprefix("Bedrock")
        assert error.model == f"local-{kind}"


def test_fail_eol_names_the_jobs_own_model(provider: LocalProvider) -> None:
    with pytest.raises(ModelUnavailableError) as caught:
        provider.run(request(input=f"#fail:EOL {SOLAR}", model="local-summary-2"))
    assert caught.value.model == "local-summary-2"


# --- magic directives: running, sleep, combinations, malformed ------------------------------------


def test_running_3_answers_running_for_three_checks_then_succeeds(provider: LocalProvider) -> None:
    text = f"#running:3 {SOLAR}"
    first = provider.run(request(input=text))
    assert first.status == "running"
    assert first.handle == expected_handle()
    assert first.output is None
    for checks in (1, 2):
        again = provider.run(request(input=text, checks=checks, handle=first.handle))
        assert (again.status, again.handle) == ("running", first.handle)
    done = provider.run(request(input=text, checks=3, handle=first.handle))
    assert done.status == "succeeded"
    assert done.output == provider.run(request(input=SOLAR)).output


def test_running_handle_depends_on_job_and_step(provider: LocalProvider) -> None:
    other_step = provider.run(request(input=f"#running:1 {SOLAR}", step="second"))
    other_job = provider.run(ProviderRequest(job_id="job-2", kind="summary", input=f"#running:1 {SOLAR}"))
    assert other_step.handle == expected_handle(step="second")
    assert other_job.handle == expected_handle(job_id="job-2")
    assert len({other_step.handle, other_job.handle, expected_handle()}) == 3


def test_unknown_handle_is_invalid(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError, match="handle"):
        provider.run(request(input=f"#running:1 {SOLAR}", checks=1, handle="local-0000000000000000"))


def test_running_still_validates_input_at_submission(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request(input="#running:2"))


def test_sleep_calls_the_injected_sleep_without_sleeping(
    provider: LocalProvider, sleeps: list[float]
) -> None:
    started = time.monotonic()
    result = provider.run(request(input=f"#sleep:1.5 {SOLAR}"))
    assert time.monotonic() - started < 1.0
    assert sleeps == [1.5]
    assert result.status == "succeeded"


def test_combined_directives_sleep_on_every_attempt_and_fail_twice(
    provider: LocalProvider, sleeps: list[float]
) -> None:
    text = f"#sleep:0.5 #fail:503x2 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(TransientProviderError):
            provider.run(request(input=text, attempt=attempt))
    result = provider.run(request(input=text, attempt=3))
    assert sleeps == [0.5, 0.5, 0.5]
    assert "#" not in result.output["summary"]
    assert result.output == provider.run(request(input=SOLAR)).output


def test_combined_failures_apply_in_order(provider: LocalProvider) -> None:
    text = f"#fail:503x1 #fail:429x2 #running:1 {SOLAR}"
    with pytest.raises(TransientProviderError):
        provider.run(request(input=text, attempt=1))
    with pytest.raises(ThrottledError):
        provider.run(request(input=text, attempt=2))
    running = provider.run(request(input=text, attempt=3))
    assert running.status == "running"
    done = provider.run(request(input=text, attempt=3, checks=1, handle=running.handle))
    assert done.status == "succeeded"


def test_directives_in_dict_input_are_read_and_stripped(provider: LocalProvider) -> None:
    with pytest.raises(TransientProviderError):
        provider.run(request(input={"text": f"#fail:502x1 {SOLAR}"}))
    result = provider.run(request(input={"text": f"#fail:502x1 {SOLAR}"}, attempt=2))
    assert result.output == provider.run(request(input={"text": SOLAR})).output


@pytest.mark.parametrize(
    "directive",
    [
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
    ],
)
def test_malformed_directive_is_invalid_input_naming_it(provider: LocalProvider, directive: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        provider.run(request(input=f"{directive} {SOLAR}"))
    assert directive in str(caught.value)


def test_crash_kills_the_first_attempt_only_and_is_no_provider_error(
    provider: LocalProvider, sleeps: list[float]
) -> None:
    text = f"#sleep:0.2 #crash {SOLAR}"
    with pytest.raises(SimulatedCrash, match="attempt 1") as caught:
        provider.run(request(input=text, attempt=1))
    # Nothing that catches Exception (the batch processor, the consumer) can swallow it.
    assert not isinstance(caught.value, Exception)
    assert sleeps == [0.2]
    result = provider.run(request(input=text, attempt=2))
    assert result.output == provider.run(request(input=SOLAR)).output


def test_crash_n_kills_attempts_up_to_n_and_combines_with_failures(provider: LocalProvider) -> None:
    text = f"#CRASH:2 #fail:503x3 {SOLAR}"
    for attempt in (1, 2):
        with pytest.raises(SimulatedCrash):
            provider.run(request(input=text, attempt=attempt))
    with pytest.raises(TransientProviderError):
        provider.run(request(input=text, attempt=3))
    assert provider.run(request(input=text, attempt=4)).status == "succeeded"
    assert provider.run(request(input=f"#crash:0 {SOLAR}")).status == "succeeded"


def test_unknown_hashtag_is_ordinary_text_and_ends_directives(provider: LocalProvider) -> None:
    text = "#weekly #fail:503x1 Solar panels convert sunlight."
    result = provider.run(request(input=text, options={"sentences": 1}))
    assert result.output["summary"] == text
    running_word = provider.run(request(input="#running late again. The bus broke down."))
    assert running_word.status == "succeeded"
    assert running_word.output["summary"].startswith("#running late again.")
    crash_word = provider.run(request(input="#crashed servers. Everyone was paged at night."))
    assert crash_word.output["summary"].startswith("#crashed servers.")


def test_cost_is_reported_by_a_succeeded_result_only(provider: LocalProvider) -> None:
    done = provider.run(request(input=f"#cost:0.05 {SOLAR}"))
    assert (done.status, done.cost) == ("succeeded", 0.05)
    assert done.output == provider.run(request(input=SOLAR)).output  # stripped before the work
    assert provider.run(request(input=SOLAR)).cost == 0.0
    waiting = provider.run(request(input=f"#cost:2 #running:1 {SOLAR}"))
    assert (waiting.status, waiting.cost) == ("running", 0.0)
    checked = provider.run(request(input=f"#cost:2 #running:1 {SOLAR}", checks=1, handle=waiting.handle))
    assert (checked.status, checked.cost) == ("succeeded", 2.0)
    with pytest.raises(TransientProviderError):
        provider.run(request(input=f"#cost:2 #fail:503x1 {SOLAR}", attempt=1))


# --- summary ------------------------------------------------------------------------------------


def test_summary_keeps_the_most_relevant_sentence(provider: LocalProvider) -> None:
    result = provider.run(request(input=SOLAR, options={"sentences": 1}))
    assert result.output == {
        "summary": "Solar panels lower electricity bills and solar panels need little maintenance.",
        "sentences": 1,
    }
    assert result.model == "local-summary-1"
    assert result.cost == 0.0
    assert result.usage == {"input_chars": len(SOLAR), "output_chars": len(result.output["summary"])}


def test_summary_keeps_original_order(provider: LocalProvider) -> None:
    summary = provider.run(request(input=SOLAR, options={"sentences": 2})).output["summary"]
    assert summary == (
        "Solar panels convert sunlight into electricity. "
        "Solar panels lower electricity bills and solar panels need little maintenance."
    )


def test_summary_defaults_to_three_sentences_and_caps_at_the_text(provider: LocalProvider) -> None:
    assert provider.run(request(input=SOLAR)).output["sentences"] == 3
    assert provider.run(request(input=SOLAR, options={"sentences": 50})).output["sentences"] == 4


def test_summary_rejects_oversized_text_and_bad_option(provider: LocalProvider) -> None:
    with pytest.raises(InputTooLargeError):
        provider.run(request(input="word. " * 40_000))
    with pytest.raises(InvalidInputError, match="sentences"):
        provider.run(request(input=SOLAR, options={"sentences": 0}))


# --- embedding ----------------------------------------------------------------------------------


def test_embedding_is_unit_norm_deterministic_and_text_dependent(provider: LocalProvider) -> None:
    first = provider.run(request("embedding", "The quick brown fox jumps over the lazy dog"))
    again = provider.run(request("embedding", "The quick brown fox jumps over the lazy dog"))
    other = provider.run(request("embedding", "An invoice for three solar panels"))
    vector = first.output["vector"]
    assert first.output["dimensions"] == len(vector) == 64
    assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0, abs_tol=1e-5)
    assert all(round(v, 6) == v for v in vector)
    assert again.output == first.output
    assert other.output["vector"] != vector
    assert first.model == "local-embedding-1"


def test_embedding_shares_direction_for_shared_words(provider: LocalProvider) -> None:
    def embed(text: str) -> list[float]:
        return list(provider.run(request("embedding", text)).output["vector"])

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    base = embed("solar panels on the roof")
    assert cosine(base, embed("solar panels on the roof today")) > cosine(
        base, embed("invoice overdue reminder")
    )


@pytest.mark.parametrize("dimensions", [8, 300, 1024])
def test_embedding_dimensions_option(provider: LocalProvider, dimensions: int) -> None:
    output = provider.run(
        request("embedding", {"text": "hello world"}, options={"dimensions": dimensions})
    ).output
    assert output["dimensions"] == len(output["vector"]) == dimensions


@pytest.mark.parametrize("dimensions", [4, 2000, "64", True])
def test_embedding_rejects_bad_dimensions(provider: LocalProvider, dimensions: object) -> None:
    with pytest.raises(InvalidInputError, match="dimensions"):
        provider.run(request("embedding", "hello", options={"dimensions": dimensions}))


# --- image-generate and image-caption -------------------------------------------------------------


def test_image_generate_writes_a_valid_png(provider: LocalProvider) -> None:
    result = provider.run(request("image-generate", "a lighthouse at dusk"))
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type) == ("image.png", "image/png")
    width, height, rows = read_png(artifact.data)
    assert (width, height) == (64, 64)
    assert all(len(row) == 64 * 3 for row in rows)
    assert len({bytes(row) for row in rows}) > 1
    assert result.output == {"width": 64, "height": 64, "bytes": len(artifact.data)}
    assert result.usage == {"pixels": 64 * 64}
    assert result.model == "local-image-1"


def test_image_generate_size_options_and_prompt_dependence(provider: LocalProvider) -> None:
    small = provider.run(
        request("image-generate", {"prompt": "a lighthouse"}, options={"width": 8, "height": 20})
    )
    assert read_png(small.artifacts[0].data)[:2] == (8, 20)
    other = provider.run(
        request("image-generate", {"prompt": "a windmill"}, options={"width": 8, "height": 20})
    )
    assert other.artifacts[0].data != small.artifacts[0].data
    with pytest.raises(InvalidInputError, match="width"):
        provider.run(request("image-generate", "a lighthouse", options={"width": 513}))


@pytest.mark.parametrize("colour", ["red", "green", "blue", "yellow", "purple", "white", "black"])
def test_caption_of_generated_image_names_its_dominant_colour(provider: LocalProvider, colour: str) -> None:
    image = provider.run(request("image-generate", f"a {colour} house by the sea")).artifacts[0].data
    result = provider.run(request("image-caption", None, input_bytes=image))
    assert result.output == {"caption": f"a 64x64 image, mostly {colour}", "width": 64, "height": 64}
    assert result.model == "local-caption-1"


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4])
def test_caption_undoes_every_png_filter(provider: LocalProvider, filter_type: int) -> None:
    image = write_png(noisy_pixels((40, 165, 60)), filter_type)
    caption = provider.run(request("image-caption", None, input_bytes=image)).output["caption"]
    assert caption == "a 24x24 image, mostly green"


def test_caption_reads_grey_and_rgba_images(provider: LocalProvider) -> None:
    grey = write_png([[(240,)] * 10 for _ in range(6)], filter_type=2, colour_type=0)
    rgba = write_png([[(35, 75, 215, 128)] * 5 for _ in range(5)], filter_type=4, colour_type=6)
    assert provider.run(request("image-caption", None, input_bytes=grey)).output["caption"] == (
        "a 10x6 image, mostly white"
    )
    assert provider.run(request("image-caption", None, input_bytes=rgba)).output["caption"] == (
        "a 5x5 image, mostly blue"
    )


def test_caption_without_colour_for_undecoded_formats(provider: LocalProvider) -> None:
    image = bytearray(write_png(noisy_pixels((200, 30, 30), size=4)))
    image[24] = 16  # bit depth of IHDR
    image[29:33] = struct.pack(">I", zlib.crc32(bytes(image[12:29])) & 0xFFFFFFFF)
    output = provider.run(request("image-caption", None, input_bytes=bytes(image))).output
    assert output == {"caption": "a 4x4 image", "width": 4, "height": 4}


@pytest.mark.parametrize("data", [None, b"", b"GIF89a not a png", PNG_SIGNATURE + b"\x00\x00"])
def test_caption_rejects_missing_or_non_png_bytes(provider: LocalProvider, data: bytes | None) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("image-caption", None, input_bytes=data))


def test_caption_rejects_a_corrupted_png(provider: LocalProvider) -> None:
    image = bytearray(provider.run(request("image-generate", "a red barn")).artifacts[0].data)
    image[40] ^= 0xFF  # inside IDAT: its CRC no longer matches
    with pytest.raises(InvalidInputError, match="CRC"):
        provider.run(request("image-caption", None, input_bytes=bytes(image)))


def test_caption_honours_directives_from_the_input_text(provider: LocalProvider) -> None:
    image = provider.run(request("image-generate", "a red barn")).artifacts[0].data
    with pytest.raises(ProviderAuthError):
        provider.run(request("image-caption", "#fail:401", input_bytes=image))


# --- tts-generate -------------------------------------------------------------------------------


def test_tts_writes_a_16khz_mono_wav_with_one_tone_per_word(provider: LocalProvider) -> None:
    result = provider.run(request("tts-generate", "Hello there, world"))
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type) == ("speech.wav", "audio/wav")
    with wave.open(io.BytesIO(artifact.data), "rb") as reader:
        assert (reader.getframerate(), reader.getnchannels(), reader.getsampwidth()) == (16_000, 1, 2)
        frames = reader.getnframes()
        samples = struct.unpack(f"<{frames}h", reader.readframes(frames))
    duration = 3 * 0.12 + 2 * 0.04
    assert frames / 16_000 == pytest.approx(duration)
    assert result.output == {"duration_seconds": pytest.approx(duration), "words": 3}
    assert max(abs(s) for s in samples[:1920]) > 5000  # the first word is audible
    assert set(samples[1920:2560]) == {0}  # the gap after it is silent
    assert result.model == "local-tts-1"


def test_tts_caps_speech_at_sixty_seconds(provider: LocalProvider) -> None:
    longest = provider.run(request("tts-generate", "word " * 375))
    assert longest.output["duration_seconds"] <= 60.0
    with pytest.raises(InputTooLargeError):
        provider.run(request("tts-generate", "word " * 376))


# --- video-generate -----------------------------------------------------------------------------


def test_video_is_submitted_then_checked_until_done(provider: LocalProvider) -> None:
    submitted = provider.run(request("video-generate", "a boat on a lake"))
    assert submitted.status == "running"
    assert submitted.handle == expected_handle()
    assert not submitted.artifacts
    done = provider.run(request("video-generate", "a boat on a lake", checks=1, handle=submitted.handle))
    assert done.status == "succeeded"
    assert [a.name for a in done.artifacts] == [f"frame-{i:03d}.png" for i in range(4)]
    assert {a.content_type for a in done.artifacts} == {"image/png"}
    assert all(read_png(a.data)[:2] == (32, 32) for a in done.artifacts)
    assert len({a.data for a in done.artifacts}) == 4  # the frames move
    assert done.output == {"frames": 4, "width": 32, "height": 32}
    assert done.model == "local-video-1"


def test_video_checks_setting_and_running_directive(sleeps: list[float]) -> None:
    slow = LocalProvider(video_checks=3, sleep=sleeps.append)
    handle = slow.run(request("video-generate", "a boat")).handle
    assert handle == expected_handle()
    states = [
        slow.run(request("video-generate", "a boat", checks=n, handle=handle)).status for n in range(1, 4)
    ]
    assert states == ["running", "running", "succeeded"]
    override = [
        slow.run(request("video-generate", "#running:1 a boat", checks=n, handle=handle)).status
        for n in (0, 1)
    ]
    assert override == ["running", "succeeded"]


def test_video_size_options(provider: LocalProvider) -> None:
    done = provider.run(
        request(
            "video-generate", "a boat", checks=1, handle=expected_handle(), options={"width": 16, "height": 8}
        )
    )
    assert {read_png(a.data)[:2] for a in done.artifacts} == {(16, 8)}


# --- every kind: determinism, unknown kind, empty input -------------------------------------------

IMAGE = LocalProvider().run(request("image-generate", "a blue pond")).artifacts[0].data
REQUESTS = [
    request("summary", SOLAR),
    request("embedding", SOLAR),
    request("image-generate", "a blue pond"),
    request("image-caption", None, input_bytes=IMAGE),
    request("tts-generate", "hello world"),
    request("video-generate", "a blue pond", checks=1, handle=expected_handle()),
]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: r.kind)
def test_same_request_gives_identical_results(req: ProviderRequest) -> None:
    first, second = LocalProvider().run(req), LocalProvider().run(req)
    assert first == second
    assert first.status == "succeeded"
    assert first.cost == 0.0
    assert str(first.model).startswith("local-")
    assert first.usage


def test_unknown_kind_is_invalid(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError, match="kind"):
        provider.run(request("translate", SOLAR))


@pytest.mark.parametrize("kind", ["summary", "embedding", "image-generate", "tts-generate", "video-generate"])
@pytest.mark.parametrize("value", [None, "", "   ", {"other": "x"}, "#sleep:0"])
def test_empty_or_missing_input_is_invalid(provider: LocalProvider, kind: str, value: Any) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request(kind, value))


def test_non_string_text_field_is_invalid(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInputError, match="text"):
        provider.run(request("summary", {"text": 42}))


# --- classify -----------------------------------------------------------------------------------


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
def test_classify_labels(provider: LocalProvider, text: str, label: str) -> None:
    result = provider.classify(text)
    assert result.label == label
    assert 0.0 <= result.score <= 1.0
    assert result.model == "local-classifier-1"
    assert result == provider.classify(text)


def test_classify_tags_are_top_keywords(provider: LocalProvider) -> None:
    result = provider.classify("Export failed. The export of invoices failed again; invoices missing.")
    assert result.tags == ("export", "failed", "invoices")


def test_classify_stronger_sentiment_scores_higher(provider: LocalProvider) -> None:
    assert provider.classify("great, fast, lovely").score > provider.classify("great").score


@pytest.mark.parametrize("text", ["", "   "])
def test_classify_rejects_empty_text(provider: LocalProvider, text: str) -> None:
    with pytest.raises(InvalidInputError):
        provider.classify(text)


# --- registry -----------------------------------------------------------------------------------


def test_registry_returns_a_cached_local_provider() -> None:
    provider: Provider = get_provider("local")
    assert isinstance(provider, LocalProvider)
    assert provider.name == "local"
    assert get_provider("local") is provider
    assert PROVIDER_NAMES == ("local", "bedrock", "polly", "openai")
    result: ProviderResult = provider.run(request(input=SOLAR))
    assert result.status == "succeeded"


def test_registry_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="local") as caught:
        get_provider("gemini")
    assert "gemini" in str(caught.value)


def test_outage_fails_every_attempt_until_an_operator_reruns_the_job() -> None:
    from aijobs.errors import TransientProviderError as Transient
    from aijobs.providers.base import ProviderRequest as Request
    from aijobs.providers.local import LocalProvider as Local

    provider = Local(sleep=lambda _s: None)
    for attempt in (1, 2, 5):
        with pytest.raises(Transient):
            provider.run(
                Request(job_id="j", kind="summary", input="#outage Some text. More.", attempt=attempt)
            )
    result = provider.run(Request(job_id="j", kind="summary", input="#outage Some text. More.", reruns=1))
    assert result.status == "succeeded"
    assert "#outage" not in result.output["summary"]
