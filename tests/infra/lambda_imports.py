"""Import handler modules the way Lambda does: from a function's code and layer assets alone.

Run by tests/infra/test_deps_layer.py as `python -I -S -B lambda_imports.py '<json spec>'`, so no
site-packages, no PYTHONPATH and no current directory is on sys.path: only the standard library,
`spec["paths"]` (the function's code asset, then the layers' `python/` folders, as /var/task and
/opt/python) and two stand-ins for what this machine is not:

- the Lambda runtime's own packages (boto3, botocore and their dependencies) come from the test
  venv, only by those top-level names and only after every asset path was searched;
- when this interpreter cannot load the layer's compiled extensions (Lambda's Python version or
  architecture differs from this machine's), each one is loaded from the test venv's build of the
  same pinned version instead, after checking that the asset holds a binary for `spec["soabi"]`.
  Everything else, including all pure-Python package code, is imported from the assets.

Prints a JSON report; exits 1 with the traceback when an import fails.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import pkgutil
import sys
import sysconfig
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


class LambdaRuntimePackages(importlib.abc.MetaPathFinder):
    """The packages Lambda's Python runtime itself provides, searched after everything else."""

    def __init__(self, names: Sequence[str], site: str) -> None:
        self.names = set(names)
        self.site = site

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.site])


class HostBuildOfLambdaExtension(importlib.abc.MetaPathFinder):
    """Loads the host's build of an extension module the asset holds for Lambda's platform only."""

    def __init__(self, assets: Sequence[str], soabi: str, site: str) -> None:
        self.assets = [Path(asset) for asset in assets]
        self.soabi = soabi
        self.site = Path(site)
        self.swapped: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = fullname.rpartition(".")[2]
        for entry in map(Path, path if path is not None else sys.path):
            asset = next((root for root in self.assets if entry.is_relative_to(root)), None)
            binaries = sorted(entry.glob(f"{name}.*.so")) if asset is not None else []
            if asset is None or not binaries:
                continue
            built_for = {binary.name.removeprefix(name + ".").removesuffix(".so") for binary in binaries}
            if self.soabi not in built_for and "abi3" not in built_for:
                raise ImportError(f"{entry / name}: built for {sorted(built_for)}, not for {self.soabi}")
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                host = self.site / entry.relative_to(asset) / (name + suffix)
                if host.is_file():
                    self.swapped.append(fullname)
                    return importlib.util.spec_from_file_location(fullname, host)
            raise ImportError(f"{fullname}: the test venv has no build of it to stand in for {binaries[0]}")
        return None


def _origin(module: ModuleType) -> str | None:
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    return origin if isinstance(origin, str) and origin not in {"built-in", "frozen"} else None


def main(spec: dict[str, Any]) -> int:
    sys.path[:0] = spec["paths"]
    runtime = LambdaRuntimePackages(spec["runtime_packages"], spec["site"])
    sys.meta_path.append(runtime)
    extensions = HostBuildOfLambdaExtension(spec["paths"], spec["soabi"], spec["site"])
    if sysconfig.get_config_var("SOABI") != spec["soabi"]:
        sys.meta_path.insert(0, extensions)
    imported: list[str] = []
    try:
        for module_name, attribute in spec["handlers"]:
            handler = getattr(importlib.import_module(module_name), attribute)
            if not callable(handler):
                raise TypeError(f"{module_name}.{attribute} is not callable")
            imported.append(module_name)
        # Modules a handler imports lazily (inside functions) must resolve as well.
        for module_name in spec.get("modules", []):
            importlib.import_module(module_name)
            imported.append(module_name)
        for package in spec["packages"]:
            root = importlib.import_module(package)
            for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
                importlib.import_module(info.name)
                imported.append(info.name)
    except Exception:
        traceback.print_exc()
        return 1
    from_venv = sorted(
        name
        for name, module in sys.modules.items()
        if (origin := _origin(module)) and Path(origin).is_relative_to(spec["site"])
    )
    stand_ins = set(extensions.swapped)
    leaked = [
        name for name in from_venv if name.partition(".")[0] not in runtime.names and name not in stand_ins
    ]
    if leaked:
        print(f"imported from the test venv, not from the assets: {leaked}", file=sys.stderr)
        return 1
    runtime_modules = [name for name in from_venv if name not in stand_ins]
    report = {"imported": imported, "swapped": extensions.swapped, "from_runtime": runtime_modules}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
