"""The `local` provider: honest, deterministic, dependency-free work done in-process.

It lets the whole job pipeline run (and be tested) without any external AI service. Every
capability does real, if modest, work with the standard library only: text as an extractive
answer (or schema-valid JSON), a hashed bag-of-words embedding, a generated PNG, an image
description from its decoded pixels, a WAV of tones, and an asynchronous "video" of PNG frames.

Like a payment sandbox's test card numbers, leading `#` directives in the input text make the
provider misbehave on purpose (see `LocalProvider`). The provider never logs input text.
"""

from __future__ import annotations

import hashlib
import io
import json
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

from aijobs.domain import Artifact
from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ProviderAuthError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.provider_plan import LOCAL_MODELS, PROVIDER_CAPABILITIES
from aijobs.providers.base import (
    Call,
    CapabilityRequest,
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    ProviderResult,
    SpeechRequest,
    TextRequest,
    TextResult,
    VideoRequest,
)

CAPABILITIES = PROVIDER_CAPABILITIES["local"]
# The local models: the plan's one per capability, plus a second text model to fall back to (a
# kind's fallback can be watched on a laptop: `#fail:503@local-text-1` fails only the first).
MODELS = {capability: (model,) for capability, model in LOCAL_MODELS.items()} | {
    "text": (LOCAL_MODELS["text"], "local-text-2")
}

_MAX_TEXT_CHARS = 1_000_000
# The sizes the local embedding model makes (checked by `check_request`, at submit and in `embed`).
EMBED_DIMENSIONS = (8, 1024)
_EMBED_DEFAULT_DIMENSIONS = 64
_MAX_EMBED_BATCH = 2048
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
_FAIL_VALUE = re.compile(
    r"^(502|503|429|timeout|400|401|403|413|eol)(?:x(\d{1,6}))?(?:@([a-z0-9][a-z0-9._:-]{0,99}))?$"
)
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
    # `@MODEL`: only calls on this model fail (a fallback model answers).
    model: str | None = None


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


def _end_of_life(call: Call) -> Exception:
    """`#fail:eol`: Bedrock's answer for a model past its end of life, mapped as Bedrock's is."""
    from botocore.exceptions import ClientError

    from aijobs.providers.failures import BEDROCK_END_OF_LIFE_MESSAGE, aws_failure

    answer: Any = {
        "Error": {"Code": "ResourceNotFoundException", "Message": BEDROCK_END_OF_LIFE_MESSAGE},
        "ResponseMetadata": {"HTTPStatusCode": 404},
    }
    model = call.model
    return aws_failure(ClientError(answer, "InvokeModel"), service="local provider", model=model)


def _parse_fail(token: str, value: str) -> _Fail:
    match = _FAIL_VALUE.match(value)
    if match is None:
        raise _malformed(token)
    times = match.group(2)
    return _Fail(code=match.group(1), times=int(times) if times is not None else None, model=match.group(3))


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


# --- structured output --------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` to `#/$defs/<name>` (how pydantic nests models) resolved against the root schema."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = root.get("$defs", {}).get(ref[len("#/$defs/") :])
        if isinstance(found, dict):
            return found
    options = schema.get("anyOf")
    if isinstance(options, list):
        # `X | None`: the non-null branch.
        for option in options:
            if isinstance(option, dict) and option.get("type") != "null":
                return _resolve(option, root)
    return schema


def _choose(values: Sequence[Any], text: str) -> Any:
    """The enum value the text is about: its sentiment or question label where the enum offers
    one, else the first value named in the text, else the first value."""
    label, _ = _label(text, _words(text))
    if label in values:
        return label
    words = set(_words(text))
    return next((value for value in values if str(value).lower() in words), values[0])


def fill_schema(schema: dict[str, Any], text: str, root: dict[str, Any] | None = None) -> Any:
    """A deterministic value that satisfies `schema` (types, enums, bounds, lengths, required
    fields), made from `text`: strings are its extract, string lists its keywords, an enum its
    label, a number its label's score clamped to the bounds. `pattern` is not generated."""
    root = root or schema
    schema = _resolve(schema, root)
    if schema.get("enum"):
        return _choose(schema["enum"], text)
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {name: fill_schema(sub, text, root) for name, sub in properties.items()}
    if kind == "array":
        items = schema.get("items", {})
        low, high = int(schema.get("minItems", 0)), int(schema.get("maxItems", 3))
        resolved = _resolve(items, root) if isinstance(items, dict) else {}
        if resolved.get("type") == "string" and "enum" not in resolved:
            values: list[Any] = [_bounded(word, resolved) for word in _top_keywords(text, max(high, low))]
        else:
            values = [fill_schema(items, text, root)] if high else []
        while len(values) < low:
            values.append(fill_schema(items, text + f" {len(values)}", root))
        return values[: max(low, high)]
    if kind in ("number", "integer"):
        _, score = _label(text, _words(text))
        return _number(schema, score, integer=kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    sentences = _split_sentences(text) or [text.strip() or "local"]
    return _bounded(" ".join(extractive_summary(text, max(1, len(sentences) // 3))) or sentences[0], schema)


def _number(schema: dict[str, Any], score: float, *, integer: bool) -> float | int:
    """A number within the schema's bounds (inclusive and exclusive): the text's score where it
    fits, else the middle of the bounds, else next to the one bound there is."""
    low, high = schema.get("minimum"), schema.get("maximum")
    low_x, high_x = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")

    def fits(value: float) -> bool:
        return (
            (low is None or value >= low)
            and (high is None or value <= high)
            and (low_x is None or value > low_x)
            and (high_x is None or value < high_x)
        )

    lows = [bound for bound in (low, low_x) if bound is not None]
    highs = [bound for bound in (high, high_x) if bound is not None]
    candidates = [score]
    if lows and highs:
        candidates.append((max(lows) + min(highs)) / 2)
    candidates += [bound + 1 for bound in lows] + [bound - 1 for bound in highs] + lows + highs
    for candidate in candidates:
        for value in (math.ceil(candidate), math.floor(candidate)) if integer else (candidate,):
            if fits(value):
                return value
    return candidates[-1]


def _bounded(text: str, schema: dict[str, Any]) -> str:
    text = text[: int(schema.get("maxLength", len(text)))]
    return text.ljust(int(schema.get("minLength", 0)), ".")


# --- the provider -------------------------------------------------------------------------------


def task_handle(call: Call) -> str:
    """The deterministic task id of a job step: "local-" + 16 hex digits of sha256(job_id + step)."""
    return "local-" + hashlib.sha256((call.job_id + call.step).encode("utf-8")).hexdigest()[:16]


def _merge(first: _Directives, second: _Directives) -> _Directives:
    def larger(a: int | None, b: int | None) -> int | None:
        return b if a is None else a if b is None else max(a, b)

    return _Directives(
        fails=first.fails + second.fails,
        running=larger(first.running, second.running),
        sleeps=first.sleeps + second.sleeps,
        crash=larger(first.crash, second.crash),
        cost=second.cost if second.cost is not None else first.cost,
    )


def directives_of(text: str) -> tuple[_Directives, str]:
    """The directives that open any line of `text` (a kind's template may put text before the
    job's input), and the text without them."""
    found = _Directives()
    lines = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#"):
            directives, line = _split_directives(line)
            found = _merge(found, directives)
        lines.append(line)
    return found, "\n".join(lines)


def check_request(request: CapabilityRequest) -> None:
    """Refuse, without work, an option the local models do not take: an embedding `dimensions`
    outside `EMBED_DIMENSIONS` (`InvalidOptionError` naming the option, the range and the model).
    The adapter runs it before the work; the API runs it at submit."""
    if isinstance(request, EmbeddingRequest):
        _dimensions(request)


def _dimensions(request: EmbeddingRequest) -> int:
    dimensions = request.dimensions if request.dimensions is not None else _EMBED_DEFAULT_DIMENSIONS
    low, high = EMBED_DIMENSIONS
    if not low <= dimensions <= high:
        raise InvalidOptionError(
            "dimensions", f"{low} to {high}", request.call.model or "the local embedding model"
        )
    return dimensions


class LocalProvider:
    """The in-process provider: every capability, deterministic (the same request gives the same
    answer), no network. Its models are `MODELS`; any other model id is refused as unavailable.

    - text: the most representative sentences of the user turn (as many as an "at most N
      sentences" in the system text says, else about a third of them, within `max_tokens` words;
      the one instruction it follows); with an image, its size and main colour; with an output schema, a
      schema-valid JSON object made from the text (`fill_schema`);
    - embedding: a hashed bag-of-words vector per text (64 dimensions unless asked);
    - image: a PNG pattern in the prompt's colours (64 px on the short side, per aspect ratio);
    - speech: a WAV of one tone per word;
    - video: asynchronous; `running` until checked `video_checks` times, then four PNG frames.

    Magic directives, `#` words opening a line of the input text, are stripped before the work
    and may be combined:

    - `#fail:503xN`, `#fail:502xN`, `#fail:timeoutxN`: `TransientProviderError` while
      `attempt <= N`; `#fail:429xN`: `ThrottledError(retry_after=throttle_retry_after)`.
    - `#fail:400` / `401` / `403` / `413`: `InvalidInputError` / `ProviderAuthError` /
      `InputTooLargeError` on every attempt (an `xN` suffix limits any failure to attempts <= N;
      without it a transient failure also happens on every attempt).
    - `#fail:eol`: the model reached its end of life: the `ModelUnavailableError` Bedrock's
      `ResourceNotFoundException` maps to (aijobs.providers.failures), naming the call's model, on
      every attempt: the job fails for good, the consumer is not paused and
      the operator is alerted once per model.
    - `#running:N`: speech and video (the asynchronous capabilities) answer `running` while
      `checks < N` (for video it replaces `video_checks`).
    - `#sleep:S`: sleep S seconds (at most 30) before working.
    - `#crash` / `#crash:N`: raise `SimulatedCrash` (a `BaseException`) on attempt 1 / while
      `attempt <= N`, after any sleep: the attempt dies like a Lambda killed by its timeout.
    - `#fail:CODE@MODEL` (e.g. `#fail:503@local-text-1`): the failure hits only calls on MODEL, so
      a kind's fallback model answers.
    - `#cost:USD`: the answer reports this cost (e.g. `#cost:0.05`) instead of 0, so the spend
      brake can be tried locally.
    """

    name: str = "local"
    capabilities: frozenset[str] = CAPABILITIES

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

    # --- capabilities -------------------------------------------------------------------------

    def generate_text(self, request: TextRequest) -> TextResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "text")
        cut = False
        if request.images:
            answer = _describe_image(request.images[0])
        else:
            answer, cut = _answer(
                _require_text(prompt, _MAX_TEXT_CHARS), request.max_tokens, _sentence_limit(request.system)
            )
        data = None
        if request.output_schema is not None:
            data = fill_schema(request.output_schema, prompt if not request.images else answer)
            answer = json.dumps(data, ensure_ascii=False)
        words = len(_words(answer))
        return TextResult(
            text=answer,
            data=data,
            truncated=cut,
            model=request.call.model,
            usage={"input_tokens": len(_words(prompt)), "output_tokens": words},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        directives, first = directives_of(request.texts[0])
        self._simulate(request.call, directives, "embedding")
        if len(request.texts) > _MAX_EMBED_BATCH:
            raise InputTooLargeError(f"at most {_MAX_EMBED_BATCH} texts per request")
        dimensions = _dimensions(request)
        texts = (first, *request.texts[1:])
        if not any(_words(text) for text in texts):
            raise InvalidInputError("input has no words to embed")
        vectors = tuple(
            tuple(hashed_embedding(_require_text(text, _MAX_TEXT_CHARS), dimensions)) for text in texts
        )
        return EmbeddingResult(
            vectors=vectors,
            dimensions=dimensions,
            model=request.call.model,
            usage={"input_tokens": sum(len(_words(text)) for text in texts), "texts": len(texts)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def generate_image(self, request: ImageRequest) -> ImageResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "image")
        prompt = _require_text(prompt, _MAX_TEXT_CHARS)
        width, height = _local_size(request.aspect_ratio)
        images = tuple(
            Artifact(
                name="image.png" if request.count == 1 else f"image-{index}.png",
                content_type="image/png",
                data=render_image(prompt if index == 1 else f"{prompt} #{index}", width, height),
            )
            for index in range(1, request.count + 1)
        )
        return ImageResult(
            images=images,
            model=request.call.model,
            usage={"images": len(images), "pixels": width * height * len(images)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        directives, text = directives_of(request.text)
        self._simulate(request.call, directives, "speech")
        text = _require_text(text, _MAX_TEXT_CHARS)
        if directives.running is not None and request.call.checks < directives.running:
            return _running(request.call)
        words = _words(text)
        if not words:
            raise InvalidInputError("input has no words to speak")
        samples = _speech_samples(len(words))
        if samples > _MAX_AUDIO_SECONDS * SAMPLE_RATE:
            raise InputTooLargeError(f"speech would exceed {_MAX_AUDIO_SECONDS:.0f} seconds")
        return ProviderResult(
            status="succeeded",
            output={"audio": "speech.wav", "duration_seconds": samples / SAMPLE_RATE, "words": len(words)},
            artifacts=(Artifact(name="speech.wav", content_type="audio/wav", data=synthesize_wav(words)),),
            model=request.call.model,
            usage={"characters": len(text), "audio_ms": samples * 1000 // SAMPLE_RATE},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def start_video(self, request: VideoRequest) -> ProviderResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "video")
        _require_text(prompt, _MAX_TEXT_CHARS)
        return _running(request.call)

    def check_video(self, request: VideoRequest) -> ProviderResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "video")
        prompt = _require_text(prompt, _MAX_TEXT_CHARS)
        if request.call.handle != task_handle(request.call):
            raise InvalidInputError("unknown task handle")
        checks = self._video_checks if directives.running is None else directives.running
        if request.call.checks < checks:
            return _running(request.call)
        width, height = _local_size(request.aspect_ratio, short=32)
        frames = tuple(
            Artifact(
                name=f"frame-{index:03d}.png",
                content_type="image/png",
                data=render_image(prompt, width, height, phase=index),
            )
            for index in range(4)
        )
        return ProviderResult(
            status="succeeded",
            output={"frames": len(frames), "width": width, "height": height},
            artifacts=frames,
            model=request.call.model,
            usage={"videoSeconds": request.duration_seconds or 4, "frames": len(frames)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    # --- directives ---------------------------------------------------------------------------

    def _simulate(self, call: Call, directives: _Directives, capability: str) -> None:
        """Refuse a model it does not have; sleep, then crash or raise the first directed failure
        that applies to this attempt."""
        if call.model not in MODELS[capability]:
            raise InvalidInputError(
                f"the local provider has no {capability} model {call.model[:80]!r} "
                f"(it has {', '.join(MODELS[capability])})"
            )
        for seconds in directives.sleeps:
            self._sleep(seconds)
        if directives.crash is not None and call.attempt <= directives.crash:
            raise SimulatedCrash(f"local provider: simulated crash on attempt {call.attempt}")
        for fail in directives.fails:
            if fail.until_rerun and call.reruns > 0:
                continue
            if fail.model is not None and fail.model != call.model.lower():
                continue
            if fail.times is None or call.attempt <= fail.times:
                raise self._failure(fail, call)

    def _failure(self, fail: _Fail, call: Call) -> Exception:
        if fail.code == "eol":
            return _end_of_life(call)
        what = f"local provider: simulated {fail.code} on attempt {call.attempt}"
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


def _running(call: Call) -> ProviderResult:
    return ProviderResult(status="running", handle=task_handle(call), model=call.model, cost=0.0)


_SENTENCE_LIMIT = re.compile(r"\bat most (\d{1,4}) sentences?\b", re.IGNORECASE)


def _sentence_limit(system: str | None) -> int | None:
    """The one instruction the local text model follows: "at most N sentences" in its system text."""
    match = _SENTENCE_LIMIT.search(system or "")
    return int(match.group(1)) if match else None


def _answer(text: str, max_tokens: int, sentence_limit: int | None = None) -> tuple[str, bool]:
    """The text's most representative sentences in their order: `sentence_limit` of them, else
    about a third, within `max_tokens` words (counted as `_words` counts them); and whether the
    answer was cut to fit."""
    sentences = _split_sentences(text)
    count = sentence_limit if sentence_limit else math.ceil(len(sentences) / 3)
    kept = extractive_summary(text, max(1, count))
    answer: list[str] = []
    used = 0
    for sentence in kept:
        size = len(_words(sentence))
        if used + size <= max_tokens:
            answer.append(sentence)
            used += size
            continue
        if not answer:  # the first sentence alone is too long: its first words
            tokens: list[str] = []
            for token in sentence.split():
                if used + len(_words(token)) > max_tokens:
                    break
                tokens.append(token)
                used += len(_words(token))
            return " ".join(tokens), True
        return " ".join(answer), True
    return " ".join(answer), False


def _describe_image(data: bytes) -> str:
    if len(data) > _MAX_IMAGE_BYTES:
        raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes")
    info = parse_png(data)
    caption = f"a {info.width}x{info.height} image"
    if info.bit_depth == 8 and info.interlace == 0 and info.colour_type in _CHANNELS:
        if info.width * info.height > _MAX_DECODE_PIXELS:
            raise InputTooLargeError(f"image has more than {_MAX_DECODE_PIXELS} pixels")
        caption += f", mostly {nearest_colour_name(average_colour(info))}"
    return caption


def _local_size(aspect_ratio: str, short: int = 64) -> tuple[int, int]:
    """(width, height) with `short` pixels on the short side for a "W:H" ratio."""
    raw_width, _, raw_height = aspect_ratio.partition(":")
    if not (raw_width.isdigit() and raw_height.isdigit()) or not int(raw_width) or not int(raw_height):
        raise InvalidInputError(f"aspect ratio {aspect_ratio[:20]!r} is not W:H")
    width, height = int(raw_width), int(raw_height)
    if width >= height:
        return min(512, round(short * width / height)), short
    return short, min(512, round(short * height / width))
