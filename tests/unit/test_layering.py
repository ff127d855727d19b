"""Imports only point down (docs/layout.md, "Layers"): every module of the layer package is placed
in one layer, and no import reaches a layer above its own.

Every `import` / `from ... import` statement counts, wherever it stands: at module level, inside a
function (the lazy imports that keep cold starts short) and under `if TYPE_CHECKING:`. A lazy
import still runs, and a type-only import still makes the lower module know the upper one's
types, so both keep their direction. Not counted: names handed to `importlib.import_module` (the
registries load a kind, workflow or provider module by name, each from inside its own package).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "layers/aijobs/python"

# Lowest first. A module may import its own layer and the layers below it. `pkg.*` is the package
# and everything in it; other entries are single modules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Pure models, errors, clients and parsers everyone uses.
    ("ground", (
        "aijobs", "aijobs.domain", "aijobs.errors", "aijobs.ids", "aijobs.observability",
        "aijobs.bounds", "aijobs.aws", "aijobs.alerts", "aijobs.bindings", "aijobs.cron",
        "aijobs.mappings", "aijobs.queues", "aijobs.aimd", "aijobs.pricing", "aijobs.provider_plan",
    )),
    # Data access: DynamoDB rows and S3 objects.
    ("stores", ("aijobs.store.*",)),
    # One typed settings model per function (see SETTINGS_MAY_IMPORT).
    ("settings", ("aijobs.settings.*",)),
    # What a job step calls: the provider port and adapters, the kinds, the spend brake,
    # webhook rows and delivery.
    ("services", (
        "aijobs.providers.*", "aijobs.kinds.*", "aijobs.spend", "aijobs.webhooks.*",
    )),
    # Split -> child jobs -> merge.
    ("workflows", ("aijobs.workflows.*",)),
    # What follows every final transition of a job (its webhook, its parent's merge step).
    ("job end", ("aijobs.job_end",)),
    # Each function's own code, and the operator actions the API and the CLI share.
    ("functions", (
        "aijobs.api.*", "aijobs.consumer.*", "aijobs.dead_letters", "aijobs.scheduled.*", "aijobs.operator",
    )),
    # The composition root: builds every function's collaborators.
    ("composition", ("aijobs.runtime",)),
)  # fmt: skip
# Build-time and tooling packages: the Lambda layer does not ship them, so no layer module may
# import them (the stage config's parser and the provider plan's derivation live in aijobs_cdk).
NOT_SHIPPED = ("aijobs_cdk", "aijobs_cli", "tests", "scripts")
# Settings read the environment: ground modules, the table's key layout (index buckets), themselves.
SETTINGS_MAY_IMPORT = ("ground", "aijobs.store.keys", "aijobs.settings.*")
# Two functions' own packages that never import each other.
APART = (("aijobs.api.*", "aijobs.consumer.*"),)
# Known upward imports, each with the reason it is still allowed.
ALLOWED: dict[tuple[str, str], str] = {}  # none today: keep it that way


def _matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return module == pattern[:-2] or module.startswith(pattern[:-1])
    return module == pattern


def _layer(module: str) -> int | None:
    found = [i for i, (_, patterns) in enumerate(LAYERS) if any(_matches(module, p) for p in patterns)]
    return found[0] if len(found) == 1 else None


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted((LIBRARY / "aijobs").rglob("*.py")):
        parts = path.relative_to(LIBRARY).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported aijobs module) for every import statement of `module`, at any depth."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from aijobs.store import results` imports the module aijobs.store.results.
            found += [
                (node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
                for alias in node.names
            ]
    return [(line, name) for line, name in found if name == "aijobs" or name.startswith("aijobs.")]


def _violations() -> list[str]:
    modules = _modules()
    known = set(modules)
    problems = [
        f"{module}: in no layer (or in two): place it in LAYERS"
        for module in sorted(known)
        if _layer(module) is None
    ]
    for module, path in sorted(modules.items()):
        own = _layer(module)
        for line, target in _imports(module, path, known):
            theirs = _layer(target)
            if own is None or theirs is None or (module, target) in ALLOWED:
                continue
            where = f"{module}:{line} imports {target}"
            if theirs > own:
                problems.append(f"{where}: {LAYERS[own][0]} may not import up to {LAYERS[theirs][0]}")
            if _matches(module, "aijobs.settings.*") and not (
                theirs == 0 or any(_matches(target, p) for p in SETTINGS_MAY_IMPORT[1:])
            ):
                problems.append(f"{where}: settings import only {', '.join(SETTINGS_MAY_IMPORT)}")
            for one, other in APART:
                for a, b in ((one, other), (other, one)):
                    if _matches(module, a) and _matches(target, b):
                        problems.append(f"{where}: {a} and {b} never import each other")
    return list(dict.fromkeys(problems))  # one line per offending import, even with two names


def test_imports_only_point_down() -> None:
    problems = _violations()
    assert not problems, "imports that point up:\n" + "\n".join(problems)


def _shipped_imports_of_tooling(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in NOT_SHIPPED]
    return found


def test_the_layer_imports_no_build_time_or_tooling_package() -> None:
    problems = [line for path in _modules().values() for line in _shipped_imports_of_tooling(path)]
    assert problems == []


def test_the_tooling_check_sees_a_build_time_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "def f():\n    from aijobs_cdk.stage_config import parse_stage_config\nimport aijobs.domain\n"
    )
    assert _shipped_imports_of_tooling(source) == ["probe.py:2 imports aijobs_cdk.stage_config"]


def test_the_allowed_upward_imports_still_exist() -> None:
    """An allowance outlives its import only by mistake: drop it with the import."""
    modules = _modules()
    known = set(modules)
    present = {
        (module, target) for module, path in modules.items() for _, target in _imports(module, path, known)
    }
    assert [pair for pair in ALLOWED if pair not in present] == []


def test_the_reader_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aijobs.domain import Job\n"
        "def f():\n    from aijobs.store import keys\n    import aijobs.errors\nfrom . import queues\n"
    )
    known = {"aijobs.store.keys", "aijobs.domain", "aijobs.errors", "aijobs.queues"}
    assert sorted(_imports("aijobs.probe", source, known)) == [
        (3, "aijobs.domain"), (5, "aijobs.store.keys"), (6, "aijobs.errors"), (7, "aijobs.queues")
    ]  # fmt: skip
