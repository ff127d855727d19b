"""Compiled assets (aijobs_cdk.compiled): `.pyc` written by the runtime's Python version, never
checked against their sources, staged once per change, and a loud warning when they cannot be."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aijobs_cdk import LAMBDA_PYTHON_VERSION, compiled

THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    return root


def _pyc_flags(pyc: Path) -> int:
    return int.from_bytes(pyc.read_bytes()[4:8], "little")  # PEP 552: bit 0 hash-based, bit 1 checked


_FIND = compiled.find_interpreter  # the cached lookup itself (tests may replace the name)


@pytest.fixture(autouse=True)
def _fresh_lookup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _FIND.cache_clear()
    monkeypatch.setattr(compiled, "_warned", False)
    yield
    _FIND.cache_clear()


def test_a_tree_is_compiled_unchecked_for_the_interpreter_given(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    assert compiled.compile_tree(root, sys.executable)
    tag = sys.implementation.cache_tag
    pycs = sorted(path.name for path in root.rglob("*.pyc"))
    assert pycs == [f"__init__.{tag}.pyc", f"mod.{tag}.pyc"]
    assert _pyc_flags(root / "pkg" / "__pycache__" / f"mod.{tag}.pyc") == 0b01  # hash, not checked
    # Unchecked: the interpreter uses the file without comparing it with the source.
    (root / "pkg" / "mod.py").write_text("def f():\n    return 3\n")
    probe = f"import sys; sys.path.insert(0, {str(root)!r}); import pkg.mod; print(pkg.mod.f())"
    out = subprocess.run([sys.executable, "-B", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


def test_a_file_that_does_not_compile_fails_the_build(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    (root / "pkg" / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match=r"broken\.py"):
        compiled.compile_tree(root, sys.executable)


def test_the_configured_interpreter_is_used_only_at_the_runtime_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(compiled.INTERPRETER_ENV, sys.executable)
    monkeypatch.setattr(compiled, "LAMBDA_PYTHON_VERSION", THIS_PYTHON)
    assert compiled.find_interpreter() == sys.executable
    _FIND.cache_clear()
    monkeypatch.setattr(compiled, "LAMBDA_PYTHON_VERSION", "3.99")
    assert compiled.find_interpreter() is None  # a setting of the wrong version is not obeyed


def test_without_an_interpreter_the_sources_ship_and_the_build_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(compiled, "find_interpreter", lambda: None)
    root = _tree(tmp_path / "src")
    assert not compiled.compile_tree(root)
    assert not compiled.compile_tree(root)
    assert list(root.rglob("*.pyc")) == []
    warning = capsys.readouterr().err
    assert warning.count("SOURCES ONLY") == 1  # once per process, however many assets
    assert f"Python {LAMBDA_PYTHON_VERSION}" in warning
    assert compiled.INTERPRETER_ENV in warning


def test_a_tree_is_staged_once_per_change_of_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(compiled.INTERPRETER_ENV, sys.executable)
    monkeypatch.setattr(compiled, "LAMBDA_PYTHON_VERSION", THIS_PYTHON)
    source = _tree(tmp_path / "functions")
    (source / "pkg" / "__pycache__").mkdir()
    (source / "pkg" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"not ours")
    runs: list[Path] = []
    compile_tree = compiled.compile_tree

    def counted(root: Path) -> bool:
        runs.append(root)
        return compile_tree(root)

    monkeypatch.setattr(compiled, "compile_tree", counted)
    cache = tmp_path / "cache"
    first = compiled.staged(source, cache)
    assert compiled.staged(source, cache) == first
    assert len(runs) == 1
    assert not (first / "pkg" / "__pycache__" / "stale.cpython-311.pyc").exists()
    assert (first / "pkg" / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc").is_file()
    (source / "pkg" / "mod.py").write_text("def f():\n    return 4\n")
    second = compiled.staged(source, cache)
    assert second != first
    assert len(runs) == 2
    assert sorted(path.name for path in cache.iterdir()) == sorted([first.name, second.name])
    out = tmp_path / "asset"
    compiled.link_tree(second, out)
    spec = importlib.util.spec_from_file_location("staged_mod", out / "pkg" / "mod.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.f() == 4


def test_the_runtime_has_an_interpreter_on_this_machine() -> None:
    """The build machines carry Python 3.13 (pyenv): synth must find it, or every asset ships
    sources only. Set AIJOBS_LAMBDA_PYTHON where it lives elsewhere."""
    found = compiled.find_interpreter()
    assert found is not None, compiled.MISSING
