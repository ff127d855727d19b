"""Input screening: the raw request is checked before routing.

Method, media type, body encoding, size, JSON depth and integer length: a hostile body never
reaches a recursive parser or serializer, nor an integer conversion that raises.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from aijobs.errors import (
    BodyTooLargeError,
    InvalidBodyEncodingError,
    JsonNumberTooLongError,
    JsonTooDeepError,
    MethodNotAllowedError,
    UnsupportedMediaTypeError,
)

# Far above any legitimate request: the largest configurable inline input (256 KiB) with every
# character JSON-escaped as \uXXXX is 1.5 MiB. Lambda itself would take up to 6 MB.
MAX_BODY_BYTES = 2 * 1024 * 1024
# Legitimate bodies nest a few levels (`input` / `options` objects); parsers and pydantic recurse.
MAX_JSON_DEPTH = 32
# Far beyond any count, size or id a client means (a 64-bit integer has 20 digits), and far below
# the 4,300 digits past which Python's int() raises ValueError inside the router (a 500).
MAX_JSON_INTEGER_DIGITS = 100
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# A JSON string (to its closing quote, or to the end if unterminated) or one bracket. Possessive
# quantifiers keep the scan linear on long strings.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.DOTALL)


def screened(event: dict[str, Any], method: str, allowed: list[str]) -> dict[str, Any]:
    """The event the router may see, or a RequestError.

    A wrong method on a known path is a 405; a body must be JSON (schema validation would half-parse
    a form-encoded body into confusing errors), valid UTF-8 (base64 bodies are decoded here), of a
    sane size and nesting depth, without integers too long to convert. The router then sees the
    decoded text.
    """
    if allowed and method not in allowed:
        raise MethodNotAllowedError(
            f"{method or 'this method'} is not allowed here", details={"allowed": allowed}
        )
    if allowed and method in _BODY_METHODS:
        return screened_body(event)
    return event


def allowed_methods(resolver: APIGatewayHttpResolver, path: str) -> list[str]:
    """The methods registered for `path`: powertools answers 404 for a method mismatch, we 405."""
    routes: Iterable[Any] = [*resolver._static_routes, *resolver._dynamic_routes]
    return sorted({route.method for route in routes if route.rule.match(path)})


def screened_body(event: dict[str, Any]) -> dict[str, Any]:
    """The event with its body as checked UTF-8 text (never base64), or a RequestError.

    A request without a body needs no `Content-Type` (`POST /jobs/{id}/cancel`; a route that needs
    a body answers 422 for the missing one)."""
    body = event.get("body")
    if not body:
        return event
    headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
    content_type = str(headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaTypeError(
            f"send the body as JSON with `Content-Type: application/json` (got {content_type or 'none'!r})"
        )
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            raise InvalidBodyEncodingError("the body is not valid base64", code="invalid_base64") from None
    else:
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:  # unpaired surrogates smuggled into a text body
            raise InvalidBodyEncodingError("the body is not valid UTF-8") from None
    if len(raw) > MAX_BODY_BYTES:
        raise BodyTooLargeError(
            f"the body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}",
            details={"limit": MAX_BODY_BYTES},
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidBodyEncodingError("the body is not valid UTF-8") from None
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise JsonTooDeepError(
            f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels", details={"limit": MAX_JSON_DEPTH}
        )
    if json_integer_too_long(text, MAX_JSON_INTEGER_DIGITS):
        raise JsonNumberTooLongError(
            f"the JSON body has an integer of more than {MAX_JSON_INTEGER_DIGITS} digits "
            "(send such a value as a string)",
            details={"limit": MAX_JSON_INTEGER_DIGITS},
        )
    return {**event, "body": text, "isBase64Encoded": False}


class _IntegerTooLong(Exception):
    pass


def json_integer_too_long(text: str, limit: int) -> bool:
    """True when `text` holds an integer literal of more than `limit` digits (outside strings).

    Parses `text` as the router will (json.loads, so only after the depth check), looking at each
    integer literal before it is converted. Invalid JSON is left to the router to refuse, unless an
    over-long integer comes before its first error (the router would convert that one too).
    """

    def parse_int(literal: str) -> int:
        if len(literal.lstrip("-")) > limit:
            raise _IntegerTooLong
        return int(literal)

    try:
        json.loads(text, parse_int=parse_int)
    except _IntegerTooLong:
        return True
    except ValueError:  # json.JSONDecodeError: not JSON at all
        return False
    return False


def json_depth_exceeds(text: str, limit: int) -> bool:
    """True when `text` opens more than `limit` nested arrays/objects, found without recursion.

    Brackets inside strings do not count. On invalid JSON the count may be off after the first
    error, but a parser stops there too, so it never recurses deeper than this scan saw.
    """
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False
