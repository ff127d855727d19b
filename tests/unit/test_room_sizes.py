"""One purpose per room (docs/layout.md): no module of the Lambda layer or the CLI above 700 lines,
no function (or method) above 80. Read from the source with `ast`, like the layering test."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aijobs_cdk import REPO_ROOT

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
ROOMS = (REPO_ROOT / "layers", REPO_ROOT / "cli")


def _modules() -> list[Path]:
    return sorted(path for root in ROOMS for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function or method of `source` longer than `limit` lines, its
    signature and decorators' line included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_the_rooms_are_found() -> None:
    names = {path.relative_to(REPO_ROOT).as_posix() for path in _modules()}
    assert "layers/aijobs/python/aijobs/store/jobs.py" in names
    assert "cli/aijobs_cli/main.py" in names


@pytest.mark.parametrize("path", _modules(), ids=lambda path: path.relative_to(REPO_ROOT).as_posix())
def test_a_module_stays_within_its_room(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = source.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{lines} lines: split it by purpose (at most {MAX_MODULE_LINES})"
    assert _long_functions(source, MAX_FUNCTION_LINES) == [], (
        f"split into named steps (at most {MAX_FUNCTION_LINES})"
    )


def test_the_function_check_counts_a_long_function_and_not_a_short_one() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(80))
    source = f"def short():\n    return 1\n\n\nclass A:\n    def long(self):\n{body}\n"
    assert _long_functions(source, MAX_FUNCTION_LINES) == [("long", 81)]
