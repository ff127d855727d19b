"""The local provider's media work, standard library only: PNG encoding, decoding and a
prompt's rendered pattern, an image's size and main colour (its description), and a WAV of one
tone per word; and the frame size of an aspect ratio."""

from __future__ import annotations

import io
import math
import struct
import wave
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aijobs.errors import InputTooLargeError, InvalidInputError
from aijobs.providers.local_text import text_digest, word_tokens

_MAX_IMAGE_BYTES = 20 * 1024 * 1024
_MAX_DECODE_PIXELS = 4096 * 4096


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
    for word in word_tokens(prompt):
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
    digest = text_digest(prompt)
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
MAX_AUDIO_SECONDS = 60.0


def speech_samples(words: int) -> int:
    return words * _TONE_SAMPLES + max(0, words - 1) * _GAP_SAMPLES


def _tone(word: str) -> bytes:
    """120 ms of a sine tone (200-800 Hz from the word's hash) with 10 ms fades, 16-bit LE."""
    frequency = 200 + int.from_bytes(text_digest(word)[:2], "big") % 600
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


# --- the provider's image steps ---------------------------------------------------------------


def describe_image(data: bytes) -> str:
    if len(data) > _MAX_IMAGE_BYTES:
        raise InputTooLargeError(f"image is larger than {_MAX_IMAGE_BYTES} bytes")
    info = parse_png(data)
    caption = f"a {info.width}x{info.height} image"
    if info.bit_depth == 8 and info.interlace == 0 and info.colour_type in _CHANNELS:
        if info.width * info.height > _MAX_DECODE_PIXELS:
            raise InputTooLargeError(f"image has more than {_MAX_DECODE_PIXELS} pixels")
        caption += f", mostly {nearest_colour_name(average_colour(info))}"
    return caption


def local_size(aspect_ratio: str, short: int = 64) -> tuple[int, int]:
    """(width, height) with `short` pixels on the short side for a "W:H" ratio."""
    raw_width, _, raw_height = aspect_ratio.partition(":")
    if not (raw_width.isdigit() and raw_height.isdigit()) or not int(raw_width) or not int(raw_height):
        raise InvalidInputError(f"aspect ratio {aspect_ratio[:20]!r} is not W:H")
    width, height = int(raw_width), int(raw_height)
    if width >= height:
        return min(512, round(short * width / height)), short
    return short, min(512, round(short * height / width))
