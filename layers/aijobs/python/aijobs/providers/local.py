"""The `local` provider: honest, deterministic, dependency-free work done in-process.

It lets the whole job pipeline run (and be tested) without any external AI service. Every kind
does real, if modest, work with the standard library only: an extractive summary, a hashed
bag-of-words embedding, a generated PNG, a PNG caption from its decoded pixels, a WAV of tones,
and an asynchronous "video" made of PNG frames.

Like a payment sandbox's test card numbers, leading `#` directives in the input text make the
provider misbehave on purpose (see `LocalProvider`). The provider never logs input text.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import struct
import time
import wave
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ProviderAuthError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.base import Artifact, Classification, ProviderRequest, ProviderResult

KINDS = ("summary", "embedding", "image-generate", "image-caption", "tts-generate", "video-generate")

_MAX_TEXT_CHARS = 200_000
_MAX_EMBED_BATCH = 100
_MAX_PROMPT_CHARS = 4_000
_MAX_CLASSIFY_CHARS = 10_000
_MAX_IMAGE_BYTES = 20 * 1024 * 1024
_MAX_DECODE_PIXELS = 4096 * 4096
_MAX_SLEEP_SECONDS = 30.0


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_STOP_WORDS = _word_set(
    """a an and are as at be been but by can could did do does for from had has have he her his
    i if in into is it its me my no not of on or our she so than that the their them then there
    these they this those to too was we were what when where which while who will with would you
    your yours also just very about over more most such only own same some any each other
    how why whom whose"""
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _words(text: str) -> list[str]:
    """Lower-case word tokens of `text`."""
    return _WORD.findall(text.lower())


def _content_words(text: str) -> list[str]:
    """Word tokens of `text` without stop words and one-letter words."""
    return [word for word in _words(text) if word not in _STOP_WORDS and len(word) > 1]


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


# --- magic directives -------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^#(fail|running|sleep|crash|cost):(.*)$", re.IGNORECASE | re.DOTALL)
_FAIL_VALUE = re.compile(r"^(502|503|429|timeout|400|401|403|413|eol)(?:x(\d{1,6}))?$")
_COUNT_VALUE = re.compile(r"^\d{1,6}$")
_SECONDS_VALUE = re.compile(r"^\d{1,3}(?:\.\d{1,6})?$")
_USD_VALUE = re.compile(r"^\d{1,6}(?:\.\d{1,6})?$")


class SimulatedCrash(BaseException):
    """`#crash`: the attempt dies like a Lambda killed by its timeout or memory limit.

    A `BaseException` on purpose: the batch processor and the consumer catch only `Exception`,
    so the whole invocation dies without updating the row or answering the batch. The claimed
    row keeps its lease until it expires; the messages reappear after their visibility timeout.
    Only the local stack's mapping emulator (aijobs_cli.esm) catches it, as a failed invocation.
    """


@dataclass(frozen=True)
class _Fail:
    code: str
    # The failure happens while `attempt <= times`; None means on every attempt.
    times: int | None
    # `#outage`: an outage that an operator's re-run comes after (fails only before any re-run).
    until_rerun: bool = False


@dataclass(frozen=True)
class _Directives:
    fails: tuple[_Fail, ...] = ()
    running: int | None = None
    sleeps: tuple[float, ...] = ()
    # `#crash` / `#crash:N`: the attempt dies (SimulatedCrash) while `attempt <= crash`.
    crash: int | None = None
    # `#cost:USD`: the cost a succeeded job reports (the spend brake counts it); else 0.
    cost: float | None = None


def _malformed(token: str) -> InvalidInputError:
    return InvalidInputError(f"malformed local-provider directive {token[:40]!r}", status=400)


def _end_of_life(request: ProviderRequest) -> Exception:
    """`#fail:eol`: Bedrock's answer for a model past its end of life, mapped as Bedrock's is."""
    from botocore.exceptions import ClientError

    from aijobs.providers.failures import BEDROCK_END_OF_LIFE_MESSAGE, aws_failure

    answer: Any = {
        "Error": {"Code": "ResourceNotFoundException", "Message": BEDROCK_END_OF_LIFE_MESSAGE},
        "ResponseMetadata": {"HTTPStatusCode": 404},
    }
    model = request.model or f"local-{request.kind}"
    return aws_failure(ClientError(answer, "InvokeModel"), service="local provider", model=model)


def _parse_fail(token: str, value: str) -> _Fail:
    match = _FAIL_VALUE.match(value)
    if match is None:
        raise _malformed(token)
    times = match.group(2)
    return _Fail(code=match.group(1), times=int(times) if times is not None else None)


def _parse_seconds(token: str, value: str) -> float:
    if _SECONDS_VALUE.match(value) is None:
        raise _malformed(token)
    seconds = float(value)
    if seconds > _MAX_SLEEP_SECONDS:
        raise _malformed(token)
    return seconds


def _split_directives(text: str) -> tuple[_Directives, str]:
    """Split the leading `#fail:`/`#running:`/`#sleep:`/`#crash`/`#cost:` directives off `text`.

    Parsing stops at the first leading word that is not a directive (an ordinary `#hashtag`
    included), which stays part of the text. A malformed directive raises `InvalidInputError`.
    """
    fails: list[_Fail] = []
    sleeps: list[float] = []
    running: int | None = None
    crash: int | None = None
    cost: float | None = None
    rest = text.lstrip()
    while rest.startswith("#"):
        parts = rest.split(maxsplit=1)
        token = parts[0]
        if token.lower() in ("#outage", "#crash"):
            if token.lower() == "#outage":
                fails.append(_Fail(code="503", times=None, until_rerun=True))
            else:  # plain `#crash`: the first attempt only
                crash = max(crash or 0, 1)
            rest = parts[1] if len(parts) > 1 else ""
            continue
        match = _DIRECTIVE.match(token)
        if match is None:
            break
        name, value = match.group(1).lower(), match.group(2).lower()
        if name == "fail":
            fails.append(_parse_fail(token, value))
        elif name == "sleep":
            sleeps.append(_parse_seconds(token, value))
        elif name == "cost":
            if _USD_VALUE.match(value) is None:
                raise _malformed(token)
            cost = float(value)
        elif _COUNT_VALUE.match(value) is None:
            raise _malformed(token)
        elif name == "crash":
            crash = max(crash or 0, int(value))
        else:
            running = max(running or 0, int(value))
        rest = parts[1] if len(parts) > 1 else ""
    return _Directives(tuple(fails), running, tuple(sleeps), crash, cost), rest


def _parse_input(raw: str | dict[str, Any] | None) -> tuple[_Directives, str | None]:
    """The directives and the remaining text of a job input (str, or dict "text"/"prompt")."""
    if raw is None:
        return _Directives(), None
    if isinstance(raw, str):
        return _split_directives(raw)
    for key in ("text", "prompt"):
        if key in raw:
            value = raw[key]
            if not isinstance(value, str):
                raise InvalidInputError(f"input field {key!r} must be a string")
            return _split_directives(value)
    return _Directives(), None


# --- options ------------------------------------------------------------------------------------


def _int_option(options: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    """An integer option within [low, high], else `InvalidInputError`."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInputError(f"option {key!r} must be an integer from {low} to {high}")
    return value


def _require_text(text: str | None, limit: int) -> str:
    """Non-empty text within `limit` characters."""
    if text is None or not text.strip():
        raise InvalidInputError("input text is empty or missing")
    if len(text) > limit:
        raise InputTooLargeError(f"input has {len(text)} characters; the limit is {limit}")
    return text.strip()


# --- summary ------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def _split_sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def extractive_summary(text: str, count: int) -> list[str]:
    """The `count` most representative sentences of `text`, in their original order.

    A sentence scores the sum of its content words' frequencies (normalised by the top
    frequency), divided by the square root of its length so that long sentences do not win by
    size alone. Ties go to the earlier sentence.
    """
    sentences = _split_sentences(text)
    tokens = [_content_words(sentence) for sentence in sentences]
    frequency = Counter(word for words in tokens for word in words)
    top = max(frequency.values(), default=1)

    def score(index: int) -> float:
        words = tokens[index]
        if not words:
            return 0.0
        return sum(frequency[word] / top for word in words) / math.sqrt(len(words))

    ranked = sorted(range(len(sentences)), key=lambda index: (-score(index), index))
    return [sentences[index] for index in sorted(ranked[:count])]


# --- embedding ----------------------------------------------------------------------------------


def hashed_embedding(text: str, dimensions: int) -> list[float]:
    """A signed feature-hashing bag-of-words vector of `text`, L2-normalised, 6 decimals.

    Each lower-case token adds +1 or -1 (a bit of its sha256) at index sha256 mod `dimensions`.
    """
    vector = [0.0] * dimensions
    for token in _words(text):
        digest = _digest(token)
        index = int.from_bytes(digest[:8], "big") % dimensions
        vector[index] += 1.0 if digest[8] & 1 else -1.0
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        return vector
    return [round(value / norm, 6) for value in vector]


# --- PNG ----------------------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel (8-bit)
Rgb = tuple[int, int, int]

_PALETTE: dict[str, Rgb] = {
    "black": (10, 10, 10),
    "white": (245, 245, 245),
    "gray": (128, 128, 128),
    "red": (210, 35, 35),
    "orange": (240, 140, 25),
    "yellow": (235, 215, 40),
    "green": (40, 165, 60),
    "cyan": (40, 200, 210),
    "blue": (35, 75, 215),
    "purple": (130, 55, 170),
    "pink": (245, 150, 195),
    "brown": (125, 75, 35),
}
_COLOUR_ALIASES = {"grey": "gray", "violet": "purple", "magenta": "pink", "teal": "cyan"}


def _chunk(tag: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(tag + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


def encode_png(width: int, height: int, rows: Iterable[bytes]) -> bytes:
    """An 8-bit RGB, non-interlaced PNG of `rows` (each `width * 3` bytes, filter type 0)."""
    raw = b"".join(b"\x00" + row for row in rows)
    if len(raw) != height * (width * 3 + 1):
        raise ValueError("rows do not match the image size")
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def nearest_colour_name(rgb: Sequence[float]) -> str:
    """The palette name closest (Euclidean, in RGB) to `rgb`."""
    return min(_PALETTE, key=lambda name: sum((a - b) ** 2 for a, b in zip(_PALETTE[name], rgb, strict=True)))


def _clamp(value: int) -> int:
    return max(0, min(255, value))


def _prompt_colours(prompt: str, digest: bytes) -> tuple[Rgb, Rgb]:
    """The base and accent colours of an image: the first colour word of the prompt (with a
    slight hash-derived variation as accent), else two colours taken from the prompt's hash."""
    for word in _words(prompt):
        name = _COLOUR_ALIASES.get(word, word)
        if name in _PALETTE:
            base = _PALETTE[name]
            red, green, blue = (_clamp(c + (d - 128) // 6) for c, d in zip(base, digest[3:6], strict=True))
            return base, (red, green, blue)
    return (digest[0], digest[1], digest[2]), (digest[3], digest[4], digest[5])


def _level(pattern: int, scale: int, x: int, y: int, width: int, height: int) -> int:
    """The blend level 0..255 between base and accent colour of pixel (x, y)."""
    if pattern == 0:  # diagonal gradient
        return (x + y) * 255 // max(1, width + height - 2)
    if pattern == 1:  # vertical stripes
        return 255 if (x // scale) % 2 else 0
    if pattern == 2:  # checker board
        return 255 if (x // scale + y // scale) % 2 else 0
    radius = math.hypot(width / 2, height / 2) or 1.0  # radial
    return min(255, int(math.hypot(x - width / 2, y - height / 2) * 255 / radius))


def render_image(prompt: str, width: int, height: int, phase: int = 0) -> bytes:
    """A deterministic RGB PNG for `prompt`; `phase` shifts the pattern (video frames)."""
    digest = _digest(prompt)
    base, accent = _prompt_colours(prompt, digest)
    pattern, scale = digest[6] % 4, 2 + digest[7] % 6
    lut = [
        bytes(b + (a - b) * level // 255 for b, a in zip(base, accent, strict=True)) for level in range(256)
    ]
    shift = phase * max(1, scale // 2)
    rows = (
        b"".join(lut[_level(pattern, scale, (x + shift) % width, y, width, height)] for x in range(width))
        for y in range(height)
    )
    return encode_png(width, height, rows)


@dataclass(frozen=True)
class PngInfo:
    """The header fields of a PNG and its joined IDAT data."""

    width: int
    height: int
    bit_depth: int
    colour_type: int
    interlace: int
    idat: bytes


def _read_chunks(data: bytes) -> Iterable[tuple[bytes, bytes]]:
    """(tag, data) of each chunk of a PNG, with bounds and CRC checks."""
    offset = len(PNG_SIGNATURE)
    while offset < len(data):
        if offset + 12 > len(data):
            raise InvalidInputError("truncated PNG chunk")
        (length,) = struct.unpack_from(">I", data, offset)
        tag = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        end = offset + 8 + length
        if end + 4 > len(data):
            raise InvalidInputError("truncated PNG chunk")
        (crc,) = struct.unpack_from(">I", data, end)
        if crc != zlib.crc32(tag + body) & 0xFFFFFFFF:
            raise InvalidInputError("PNG chunk CRC mismatch")
        yield tag, body
        if tag == b"IEND":
            return
        offset = end + 4
    raise InvalidInputError("PNG has no IEND chunk")


def parse_png(data: bytes) -> PngInfo:
    """The header fields and joined IDAT data of a PNG; `InvalidInputError` if it is not one."""
    if not data.startswith(PNG_SIGNATURE):
        raise InvalidInputError("input is not a PNG image")
    header: tuple[int, ...] | None = None
    idat: list[bytes] = []
    for tag, body in _read_chunks(data):
        if header is None:
            if tag != b"IHDR" or len(body) != 13:
                raise InvalidInputError("PNG does not start with a valid IHDR chunk")
            header = struct.unpack(">IIBBBBB", body)
        elif tag == b"IDAT":
            idat.append(body)
    if header is None or not idat or header[0] == 0 or header[1] == 0:
        raise InvalidInputError("PNG has no image data")
    width, height, bit_depth, colour_type, _, _, interlace = header
    return PngInfo(width, height, bit_depth, colour_type, interlace, b"".join(idat))


def _paeth(left: int, up: int, up_left: int) -> int:
    estimate = left + up - up_left
    distances = (abs(estimate - left), abs(estimate - up), abs(estimate - up_left))
    if distances[0] <= distances[1] and distances[0] <= distances[2]:
        return left
    return up if distances[1] <= distances[2] else up_left


def _unfilter_row(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    """Undo one PNG filter (0-4) of a scanline in place, given the previous decoded line."""
    if kind == 0:
        return
    if kind == 2:
        for i in range(len(line)):
            line[i] = (line[i] + prev[i]) & 0xFF
        return
    if kind not in (1, 3, 4):
        raise InvalidInputError(f"unknown PNG filter type {kind}")
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        else:
            up_left = prev[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + _paeth(left, prev[i], up_left)) & 0xFF


def _inflate(info: PngInfo, expected: int) -> bytes:
    try:
        raw = zlib.decompressobj().decompress(info.idat, expected + 1)
    except zlib.error as exc:
        raise InvalidInputError("PNG image data is not valid zlib data") from exc
    if len(raw) != expected:
        raise InvalidInputError("PNG image data does not match its size")
    return raw


def average_colour(info: PngInfo) -> tuple[float, float, float]:
    """The mean RGB colour of an 8-bit, non-interlaced PNG (alpha ignored)."""
    bpp = _CHANNELS[info.colour_type]
    stride = info.width * bpp
    raw = _inflate(info, info.height * (stride + 1))
    sums = [0] * bpp
    prev = bytearray(stride)
    for y in range(info.height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter_row(raw[start], line, prev, bpp)
        for channel in range(bpp):
            sums[channel] += sum(line[channel::bpp])
        prev = line
    pixels = info.width * info.height
    red = sums[0] / pixels
    if bpp < 3:  # grey (+ alpha)
        return red, red, red
    return red, sums[1] / pixels, sums[2] / pixels


# --- speech -------------------------------------------------------------------------------------

SAMPLE_RATE = 16_000
_TONE_SAMPLES = SAMPLE_RATE * 120 // 1000
_GAP_SAMPLES = SAMPLE_RATE * 40 // 1000
_FADE_SAMPLES = SAMPLE_RATE * 10 // 1000
_MAX_AUDIO_SECONDS = 60.0


def _speech_samples(words: int) -> int:
    return words * _TONE_SAMPLES + max(0, words - 1) * _GAP_SAMPLES


def _tone(word: str) -> bytes:
    """120 ms of a sine tone (200-800 Hz from the word's hash) with 10 ms fades, 16-bit LE."""
    frequency = 200 + int.from_bytes(_digest(word)[:2], "big") % 600
    step = 2 * math.pi * frequency / SAMPLE_RATE
    samples = []
    for n in range(_TONE_SAMPLES):
        envelope = min(1.0, n / _FADE_SAMPLES, (_TONE_SAMPLES - 1 - n) / _FADE_SAMPLES)
        samples.append(int(9000 * envelope * math.sin(step * n)))
    return struct.pack(f"<{_TONE_SAMPLES}h", *samples)


def synthesize_wav(words: Sequence[str]) -> bytes:
    """A 16 kHz mono 16-bit WAV with one tone per word and 40 ms gaps between them."""
    gap = b"\x00\x00" * _GAP_SAMPLES
    tones = {word: _tone(word) for word in set(words)}
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(SAMPLE_RATE)
        writer.writeframes(gap.join(tones[word] for word in words))
    return buffer.getvalue()


# --- classification -----------------------------------------------------------------------------

_POSITIVE = _word_set(
    """good great excellent amazing awesome love loved lovely like liked happy glad pleased
    fantastic wonderful perfect best better nice fast helpful thanks thank works working
    recommend enjoy enjoyed brilliant superb easy success successful"""
)
_NEGATIVE = _word_set(
    """bad terrible awful horrible hate hated poor worst worse slow broken bug buggy crash
    crashed crashes crashing fail failed failing failure error errors wrong angry sad disappointed
    disappointing useless annoying problem problems refund"""
)
_NEGATIONS = frozenset({"not", "no", "never", "without", "hardly"})
_WH_WORDS = _word_set("what why how when where who which whom whose")
_AUXILIARIES = _word_set("can could should would is are do does did will")


def _sentiment_hits(tokens: Sequence[str]) -> tuple[int, int]:
    """(positive, negative) lexicon hits, a hit right after a negation counting as its opposite."""
    positive = negative = 0
    for index, token in enumerate(tokens):
        negated = index > 0 and (tokens[index - 1] in _NEGATIONS or tokens[index - 1].endswith("n't"))
        if token in _POSITIVE:
            negative, positive = (negative + 1, positive) if negated else (negative, positive + 1)
        elif token in _NEGATIVE:
            negative, positive = (negative, positive + 1) if negated else (negative + 1, positive)
    return positive, negative


def _top_keywords(text: str, limit: int = 3) -> tuple[str, ...]:
    """The most frequent content words of `text` (ties: first appearance)."""
    counts = Counter(_content_words(text))
    return tuple(word for word, _ in counts.most_common(limit))


def _label(text: str, tokens: Sequence[str]) -> tuple[str, float]:
    asks = text.rstrip().endswith("?")
    opens = bool(tokens) and tokens[0] in _WH_WORDS | _AUXILIARIES
    if asks:
        return "question", 0.95 if opens else 0.8
    if tokens and tokens[0] in _WH_WORDS:
        return "question", 0.7
    positive, negative = _sentiment_hits(tokens)
    if positive == negative:
        return "neutral", 0.6 if positive == 0 else 0.5
    score = round(0.5 + 0.5 * abs(positive - negative) / (positive + negative + 1), 4)
    return ("positive" if positive > negative else "negative"), score


# --- the provider -------------------------------------------------------------------------------


def task_handle(request: ProviderRequest) -> str:
    """The deterministic task id of a job step: "local-" + 16 hex digits of sha256(job_id + step)."""
    return "local-" + hashlib.sha256((request.job_id + request.step).encode("utf-8")).hexdigest()[:16]


def _running(request: ProviderRequest) -> ProviderResult:
    return ProviderResult(status="running", handle=task_handle(request), cost=0.0)


class LocalProvider:
    """The in-process provider. Deterministic: the same request gives the same result.

    Kinds: `summary`, `embedding`, `image-generate`, `image-caption`, `tts-generate` and the
    asynchronous `video-generate` (first call answers `running` with a handle; the result comes
    once the task was checked `video_checks` times).

    Magic directives, leading `#` words of the input text (str, or dict "text"/"prompt"), are
    stripped before the work and may be combined:

    - `#fail:503xN`, `#fail:502xN`, `#fail:timeoutxN`: `TransientProviderError` while
      `attempt <= N`; `#fail:429xN`: `ThrottledError(retry_after=throttle_retry_after)`.
    - `#fail:400` / `401` / `403` / `413`: `InvalidInputError` / `ProviderAuthError` /
      `InputTooLargeError` on every attempt (an `xN` suffix limits any failure to attempts <= N;
      without it a transient failure also happens on every attempt).
    - `#fail:eol`: the model reached its end of life: the `ModelUnavailableError` Bedrock's
      `ResourceNotFoundException` maps to (aijobs.providers.failures), naming the job's model or
      `local-<kind>`, on every attempt: the job fails for good, the consumer is not paused and
      the operator is alerted once per model.
    - `#running:N`: answer `running` while `checks < N` (for video it replaces `video_checks`).
    - `#sleep:S`: sleep S seconds (at most 30) before working.
    - `#crash` / `#crash:N`: raise `SimulatedCrash` (a `BaseException`) on attempt 1 / while
      `attempt <= N`, after any sleep: the attempt dies like a Lambda killed by its timeout.
    - `#cost:USD`: the succeeded result reports this cost (e.g. `#cost:0.05`) instead of 0, so
      the spend brake can be tried locally.
    """

    name: str = "local"

    def __init__(
        self,
        *,
        throttle_retry_after: float = 1.0,
        video_checks: int = 1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if throttle_retry_after < 0 or video_checks < 0:
            raise ValueError("throttle_retry_after and video_checks must not be negative")
        self._throttle_retry_after = throttle_retry_after
        self._video_checks = video_checks
        self._sleep = sleep
        self._handlers: dict[str, Callable[[ProviderRequest, str | None], ProviderResult]] = {
            "summary": self._summary,
            "embedding": self._embedding,
            "image-generate": self._image_generate,
            "image-caption": self._image_caption,
            "tts-generate": self._tts_generate,
        }

    def run(self, request: ProviderRequest) -> ProviderResult:
        """Do (or check) one job step; raise a typed `ProviderError` on failure."""
        if request.kind not in KINDS:
            raise InvalidInputError(f"the local provider has no kind {request.kind!r}")
        directives, text = _parse_input(request.input)
        self._simulate(request, directives)
        result = self._work(request, directives, text)
        if directives.cost is not None and result.status == "succeeded":
            return result.model_copy(update={"cost": directives.cost})
        return result

    def _work(self, request: ProviderRequest, directives: _Directives, text: str | None) -> ProviderResult:
        if request.handle is not None and request.handle != task_handle(request):
            raise InvalidInputError("unknown task handle")
        if request.kind == "video-generate":
            checks = self._video_checks if directives.running is None else directives.running
            return self._video_generate(request, text, checks)
        if request.kind == "embedding" and isinstance(request.input, dict) and "texts" in request.input:
            return self._embedding_batch(request)
        if request.kind == "image-caption":
            _require_image(request)
        else:
            _require_text(text, _MAX_TEXT_CHARS)
        if directives.running is not None and request.checks < directives.running:
            return _running(request)
        return self._handlers[request.kind](request, text)

    def classify(self, text: str) -> Classification:
        """Label `text` positive / negative / neutral / question with a small lexicon."""
        text = _require_text(text, _MAX_CLASSIFY_CHARS)
        label, score = _label(text, _words(text))
        return Classification(label=label, score=score, tags=_top_keywords(text), model="local-classifier-1")

    # --- directives ---------------------------------------------------------------------------

    def _simulate(self, request: ProviderRequest, directives: _Directives) -> None:
        """Sleep, then crash or raise the first directed failure that applies to this attempt."""
        for seconds in directives.sleeps:
            self._sleep(seconds)
        if directives.crash is not None and request.attempt <= directives.crash:
            raise SimulatedCrash(f"local provider: simulated crash on attempt {request.attempt}")
        for fail in directives.fails:
            if fail.until_rerun and request.reruns > 0:
                continue
            if fail.times is None or request.attempt <= fail.times:
                raise self._failure(fail, request)

    def _failure(self, fail: _Fail, request: ProviderRequest) -> Exception:
        if fail.code == "eol":
            return _end_of_life(request)
        what = f"local provider: simulated {fail.code} on attempt {request.attempt}"
        if fail.code in ("502", "503"):
            return TransientProviderError(what, status=int(fail.code))
        if fail.code == "timeout":
            return TransientProviderError(f"{what}: the request timed out")
        if fail.code == "429":
            return ThrottledError(what, retry_after=self._throttle_retry_after)
        if fail.code == "413":
            return InputTooLargeError(what, status=413)
        if fail.code == "400":
            return InvalidInputError(what, status=400)
        return ProviderAuthError(what, status=int(fail.code))

    # --- kinds --------------------------------------------------------------------------------

    def _summary(self, request: ProviderRequest, text: str | None) -> ProviderResult:
        text = _require_text(text, _MAX_TEXT_CHARS)
        count = _int_option(request.options, "sentences", 3, 1, 100)
        kept = extractive_summary(text, count)
        summary = " ".join(kept)
        return _succeeded(
            {"summary": summary, "sentences": len(kept)},
            "local-summary-1",
            {"input_chars": len(text), "output_chars": len(summary)},
        )

    def _embedding(self, request: ProviderRequest, text: str | None) -> ProviderResult:
        text = _require_text(text, _MAX_TEXT_CHARS)
        dimensions = _int_option(request.options, "dimensions", 64, 8, 1024)
        if not _words(text):
            raise InvalidInputError("input has no words to embed")
        vector = hashed_embedding(text, dimensions)
        return _succeeded(
            {"vector": vector, "dimensions": dimensions},
            "local-embedding-1",
            {"input_chars": len(text), "input_tokens": len(_words(text))},
        )

    def _embedding_batch(self, request: ProviderRequest) -> ProviderResult:
        """`{"texts": [...]}`: one vector per text, in order, in one job (the shape every adapter
        answers a batch with)."""
        assert isinstance(request.input, dict)
        texts = request.input["texts"]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise InvalidInputError("input 'texts' must be a non-empty list of strings")
        if len(texts) > _MAX_EMBED_BATCH:
            raise InputTooLargeError(f"at most {_MAX_EMBED_BATCH} texts per embedding job")
        dimensions = _int_option(request.options, "dimensions", 64, 8, 1024)
        vectors = [hashed_embedding(_require_text(text, _MAX_TEXT_CHARS), dimensions) for text in texts]
        tokens = sum(len(_words(text)) for text in texts)
        return _succeeded(
            {"vectors": vectors, "count": len(vectors), "dimensions": dimensions},
            "local-embedding-1",
            {"input_chars": sum(len(text) for text in texts), "input_tokens": tokens, "texts": len(texts)},
        )

    def _image_generate(self, request: ProviderRequest, text: str | None) -> ProviderResult:
        prompt = _require_text(text, _MAX_PROMPT_CHARS)
        width = _int_option(request.options, "width", 64, 8, 512)
        height = _int_option(request.options, "height", 64, 8, 512)
        png = render_image(prompt, width, height)
        return _succeeded(
            {"width": width, "height": height, "bytes": len(png)},
            "local-image-1",
            {"pixels": width * height},
            (Artifact(name="image.png", content_type="image/png", data=png),),
        )

    def _image_caption(self, request: ProviderRequest, text: str | None) -> ProviderResult:
        info = parse_png(_require_image(request))
        caption = f"a {info.width}x{info.height} image"
        if info.bit_depth == 8 and info.interlace == 0 and info.colour_type in _CHANNELS:
            if info.width * info.height > _MAX_DECODE_PIXELS:
                raise InputTooLargeError(f"image has more than {_MAX_DECODE_PIXELS} pixels")
            caption += f", mostly {nearest_colour_name(average_colour(info))}"
        return _succeeded(
            {"caption": caption, "width": info.width, "height": info.height},
            "local-caption-1",
            {"pixels": info.width * info.height, "output_chars": len(caption)},
        )

    def _tts_generate(self, request: ProviderRequest, text: str | None) -> ProviderResult:
        text = _require_text(text, _MAX_TEXT_CHARS)
        words = _words(text)
        if not words:
            raise InvalidInputError("input has no words to speak")
        samples = _speech_samples(len(words))
        if samples > _MAX_AUDIO_SECONDS * SAMPLE_RATE:
            raise InputTooLargeError(f"speech would exceed {_MAX_AUDIO_SECONDS:.0f} seconds")
        wav = synthesize_wav(words)
        return _succeeded(
            {"duration_seconds": samples / SAMPLE_RATE, "words": len(words)},
            "local-tts-1",
            {"input_chars": len(text), "audio_ms": samples * 1000 // SAMPLE_RATE},
            (Artifact(name="speech.wav", content_type="audio/wav", data=wav),),
        )

    def _video_generate(self, request: ProviderRequest, text: str | None, checks: int) -> ProviderResult:
        """Submit (no handle: `running`), or check the task: `running` until `checks` checks."""
        prompt = _require_text(text, _MAX_PROMPT_CHARS)
        width = _int_option(request.options, "width", 32, 8, 512)
        height = _int_option(request.options, "height", 32, 8, 512)
        if request.handle is None or request.checks < checks:
            return _running(request)
        frames = tuple(
            Artifact(
                name=f"frame-{index:03d}.png",
                content_type="image/png",
                data=render_image(prompt, width, height, phase=index),
            )
            for index in range(4)
        )
        return _succeeded(
            {"frames": len(frames), "width": width, "height": height},
            "local-video-1",
            {"pixels": width * height * len(frames), "frames": len(frames)},
            frames,
        )


def _require_image(request: ProviderRequest) -> bytes:
    if not request.input_bytes:
        raise InvalidInputError("image-caption needs the image bytes")
    if len(request.input_bytes) > _MAX_IMAGE_BYTES:
        raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes")
    return request.input_bytes


def _succeeded(
    output: Any, model: str, usage: dict[str, int], artifacts: tuple[Artifact, ...] = ()
) -> ProviderResult:
    return ProviderResult(
        status="succeeded", output=output, artifacts=artifacts, model=model, usage=usage, cost=0.0
    )
