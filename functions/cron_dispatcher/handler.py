"""Entry point placeholder: the job lifecycle issue wires this handler."""

from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    raise NotImplementedError("this function is wired by the job lifecycle work")
