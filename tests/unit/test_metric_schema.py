"""Every `emit()` call sends its metric with exactly the dimensions METRIC_DIMENSIONS declares.

The dashboard (aijobs_cdk.constructs.dashboard) graphs each metric with the declared dimension
set; CloudWatch treats any other set as another metric, so a mismatch would be a blank graph.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from aijobs import observability
from aijobs.observability import ERROR_CLASS_DIMENSION, KIND_DIMENSION, METRIC_DIMENSIONS

PACKAGE = Path(observability.__file__).parent
# emit()'s keyword arguments that are not dimensions, and the ones it renames.
NOT_DIMENSIONS = {"value", "unit"}
RENAMED = {"kind": KIND_DIMENSION, "error_class": ERROR_CLASS_DIMENSION}


def _metric_constants() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(observability).items()
        if name.startswith("METRIC_") and isinstance(value, str)
    }


@functools.cache
def _emit_calls() -> list[tuple[str, str, set[str]]]:
    """(where, metric constant name, dimension names) of every emit() call in the layer."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "emit"
            ):
                continue
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            assert node.args, f"{where}: emit() needs a METRIC_* constant"
            assert isinstance(node.args[0], ast.Name), f"{where}: emit() needs a METRIC_* constant"
            assert all(k.arg is not None for k in node.keywords), f"{where}: no **dimensions splats"
            dimensions = {
                RENAMED.get(str(k.arg), str(k.arg)) for k in node.keywords if k.arg not in NOT_DIMENSIONS
            }
            calls.append((where, node.args[0].id, dimensions))
    return calls


def test_every_metric_constant_declares_its_dimensions() -> None:
    assert set(METRIC_DIMENSIONS) == set(_metric_constants().values())


def test_every_emit_call_uses_the_declared_dimensions() -> None:
    constants = _metric_constants()
    calls = _emit_calls()
    assert len(calls) >= len(METRIC_DIMENSIONS)
    for where, constant, dimensions in calls:
        assert constant in constants, (
            f"{where}: {constant} is not a METRIC_* constant of aijobs.observability"
        )
        declared = set(METRIC_DIMENSIONS[constants[constant]])
        assert dimensions == declared, f"{where}: {constant} emitted with {dimensions}, declared {declared}"


def test_every_declared_metric_is_emitted_somewhere() -> None:
    emitted = {constant for _, constant, _ in _emit_calls()}
    assert emitted == set(_metric_constants())
