"""The local provider's text work, standard library only: word tokens, the extractive answer
and summary, the hashed bag-of-words embedding, the sentiment and question label, and a
schema-valid JSON value made from the text (`fill_schema`)."""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any


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


def word_tokens(text: str) -> list[str]:
    """Lower-case word tokens of `text`."""
    return _WORD.findall(text.lower())


def _content_words(text: str) -> list[str]:
    """Word tokens of `text` without stop words and one-letter words."""
    return [word for word in word_tokens(text) if word not in _STOP_WORDS and len(word) > 1]


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


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
    for token in word_tokens(text):
        digest = text_digest(token)
        index = int.from_bytes(digest[:8], "big") % dimensions
        vector[index] += 1.0 if digest[8] & 1 else -1.0
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        return vector
    return [round(value / norm, 6) for value in vector]


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
    label, _ = _label(text, word_tokens(text))
    if label in values:
        return label
    words = set(word_tokens(text))
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
        _, score = _label(text, word_tokens(text))
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


_SENTENCE_LIMIT = re.compile(r"\bat most (\d{1,4}) sentences?\b", re.IGNORECASE)


def sentence_limit_of(system: str | None) -> int | None:
    """The one instruction the local text model follows: "at most N sentences" in its system text."""
    match = _SENTENCE_LIMIT.search(system or "")
    return int(match.group(1)) if match else None


def extract_answer(text: str, max_tokens: int, sentence_limit: int | None = None) -> tuple[str, bool]:
    """The text's most representative sentences in their order: `sentence_limit` of them, else
    about a third, within `max_tokens` words (counted as `word_tokens` counts them); and whether the
    answer was cut to fit."""
    sentences = _split_sentences(text)
    count = sentence_limit if sentence_limit else math.ceil(len(sentences) / 3)
    kept = extractive_summary(text, max(1, count))
    answer: list[str] = []
    used = 0
    for sentence in kept:
        size = len(word_tokens(sentence))
        if used + size <= max_tokens:
            answer.append(sentence)
            used += size
            continue
        if not answer:  # the first sentence alone is too long: its first words
            tokens: list[str] = []
            for token in sentence.split():
                if used + len(word_tokens(token)) > max_tokens:
                    break
                tokens.append(token)
                used += len(word_tokens(token))
            return " ".join(tokens), True
        return " ".join(answer), True
    return " ".join(answer), False
