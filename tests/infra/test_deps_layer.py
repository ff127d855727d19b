"""The dependency layer synth ships: built for the functions' platform, complete, and never silent.

The import test runs every handler against the synthesized assets alone (tests/infra/lambda_imports.py
explains what stands in for Lambda there). This machine's Python may differ from the Lambda runtime
(both are reported): then compiled extensions cannot load from the asset and the test venv's build of
the same pinned version stands in for them, after the asset's binaries are checked for Lambda's
Python version and architecture.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import app as cdk_entry_point
import pytest

from aijobs_cdk import DEPS_REQUIREMENTS, LAMBDA_ARCHITECTURE, LAMBDA_PYTHON_VERSION, deps_layer
from aijobs_cdk.app_factory import build_app
from aijobs_cdk.deps_layer import DepsLayerBuildError
from tests.infra.template import Synth, cli_context, target_id

CHECKER = Path(__file__).with_name("lambda_imports.py")
# What Lambda's Python runtime provides itself (not bundled: see layers/deps/requirements.txt).
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")
_MACHINE = {"arm64": "aarch64", "x86_64": "x86_64"}[LAMBDA_ARCHITECTURE]
LAMBDA_SOABI = f"cpython-{LAMBDA_PYTHON_VERSION.replace('.', '')}-{_MACHINE}-linux-gnu"
_ELF_MACHINE = {"aarch64": 0xB7, "x86_64": 0x3E}[_MACHINE]
_SMALL: dict[str, object] = {"QUEUE_NAMES": "summary", "KIND_PRICES": ""}


def _asset(synth: Synth, code: dict[str, Any]) -> Path:
    path = synth.outdir / f"asset.{code['S3Key'].removesuffix('.zip')}"
    assert path.is_dir(), f"{code['S3Key']} has no asset folder in {synth.outdir}"
    return path


def _layer_assets(synth: Synth, function_id: str) -> list[Path]:
    refs = synth.props(function_id)["Layers"]
    return [_asset(synth, synth.props(target_id(ref))["Content"]) for ref in refs]


def _deps_asset(synth: Synth) -> Path:
    (layer_id,) = [
        logical_id for logical_id in synth.resources("AWS::Lambda::LayerVersion") if "DepsLayer" in logical_id
    ]
    return _asset(synth, synth.props(layer_id)["Content"]) / "python"


def _lambda_env(environment: dict[str, Any]) -> dict[str, str]:
    """The function's literal variables plus what Lambda sets; references have no value here."""
    literal = {
        key: value for key, value in environment.get("Variables", {}).items() if isinstance(value, str)
    }
    return {
        **literal,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": "import-check",
        "LANG": "C.UTF-8",
    }


def _run_checker(paths: list[Path], handlers: list[list[str]], env: dict[str, str]) -> Any:
    spec = {
        "paths": [str(path) for path in paths],
        "handlers": handlers,
        "packages": ["aijobs"],
        # Loaded on the first invocation in Lambda, not at import (observability.lambda_tracing).
        "modules": ["aws_xray_sdk.core", "aws_xray_sdk.ext.botocore.patch"],
        "runtime_packages": RUNTIME_PACKAGES,
        "site": sysconfig.get_paths()["purelib"],
        "soabi": LAMBDA_SOABI,
    }
    return subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(CHECKER), json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_every_handler_imports_from_its_assets_alone(dev: Synth) -> None:
    views: dict[tuple[Path, ...], tuple[list[list[str]], dict[str, str]]] = {}
    for function_id, props in dev.resources("AWS::Lambda::Function").items():
        if props["Properties"]["Runtime"] != f"python{LAMBDA_PYTHON_VERSION}":
            continue  # CDK's own helper functions (none today) bring no handler of ours
        layers = _layer_assets(dev, function_id)
        # /opt/python is the layers merged in order (a later layer wins): search them last-first.
        paths = (_asset(dev, props["Properties"]["Code"]), *[layer / "python" for layer in reversed(layers)])
        module, _, attribute = props["Properties"]["Handler"].rpartition(".")
        handlers, _env = views.setdefault(
            paths, ([], _lambda_env(props["Properties"].get("Environment", {})))
        )
        if [module, attribute] not in handlers:
            handlers.append([module, attribute])
    handler_modules = {module for handlers, _env in views.values() for module, _attribute in handlers}
    assert handler_modules >= {"api.handler", "queue_consumer.handler", "dlq_consumer.handler"}
    for paths, (handlers, env) in views.items():
        result = _run_checker(list(paths), handlers, env)
        assert result.returncode == 0, result.stderr[-4000:]
        report = json.loads(result.stdout)
        assert {module for module, _attribute in handlers} <= set(report["imported"])
        # What stood in for Lambda: its runtime's packages, and compiled modules when Pythons differ.
        host = sysconfig.get_config_var("SOABI")
        print(f"this Python {host}, Lambda {LAMBDA_SOABI}: stand-ins {report['swapped']}")
        if host == LAMBDA_SOABI:
            assert report["swapped"] == []  # a real import of the very binaries Lambda loads
        else:
            assert "pydantic_core._pydantic_core" in report["swapped"]
        assert {name.partition(".")[0] for name in report["from_runtime"]} <= set(RUNTIME_PACKAGES)


def test_import_check_fails_for_a_layer_without_pydantic(dev: Synth, tmp_path: Path) -> None:
    """The check above is only worth something if it notices a missing package."""
    (function_id, props), *_ = dev.functions_by_handler("api.handler.handler").items()
    layers = [tmp_path / f"layer{index}" for index, _ in enumerate(_layer_assets(dev, function_id))]
    for source, copy in zip(_layer_assets(dev, function_id), layers, strict=True):
        shutil.copytree(source, copy)
    (pydantic,) = [
        layer / "python" / "pydantic" for layer in layers if (layer / "python" / "pydantic").is_dir()
    ]
    shutil.rmtree(pydantic)
    paths = [_asset(dev, props["Code"]), *[layer / "python" for layer in reversed(layers)]]
    result = _run_checker(paths, [["api.handler", "handler"]], _lambda_env(props.get("Environment", {})))
    assert result.returncode == 1
    assert "No module named 'pydantic'" in result.stderr


def _pins() -> dict[str, str]:
    pins = {}
    for line in DEPS_REQUIREMENTS.read_text().splitlines():
        if line := line.split("#", 1)[0].strip():
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "_", name).lower()] = version
    return pins


def test_deps_layer_holds_the_lock_built_for_the_functions_platform(dev: Synth) -> None:
    for props in dev.resources("AWS::Lambda::Function").values():
        assert props["Properties"]["Runtime"] == f"python{LAMBDA_PYTHON_VERSION}"
        assert props["Properties"]["Architectures"] == [LAMBDA_ARCHITECTURE]
    site = _deps_asset(dev)
    installed = {
        path.name.lower().removesuffix(".dist-info").rpartition("-")[::2] for path in site.glob("*.dist-info")
    }
    assert installed == set(_pins().items())  # every pin, at its version, and nothing else
    assert not (site / "boto3").exists()
    assert not (site / "botocore").exists()  # the runtime's; aws-xray-sdk is installed --no-deps
    binaries = sorted(site.rglob("*.so"))
    assert any(binary.parent.name == "pydantic_core" for binary in binaries)
    for binary in binaries:
        assert binary.name.endswith((f".{LAMBDA_SOABI}.so", ".abi3.so")), binary.name
        with binary.open("rb") as elf:
            header = elf.read(20)
        assert header[:4] == b"\x7fELF"
        assert int.from_bytes(header[18:20], "little") == _ELF_MACHINE, f"{binary.name} is not {_MACHINE}"


def _missing_pyc(root: Path) -> list[str]:
    """The modules under `root` that Lambda's Python would have to compile (no unchecked-hash .pyc)."""
    tag = f"cpython-{LAMBDA_PYTHON_VERSION.replace('.', '')}"
    missing = []
    for source in root.rglob("*.py"):
        pyc = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        # PEP 552 flags: 0b01 is hash-based and never checked against the source.
        if not pyc.is_file() or int.from_bytes(pyc.read_bytes()[4:8], "little") != 0b01:
            missing.append(str(source.relative_to(root)))
    return missing


def test_every_asset_ships_compiled_for_the_runtime(dev: Synth) -> None:
    """/opt and /var/task are read-only: a module without its .pyc is compiled on every cold start."""
    (function_id, props), *_ = dev.functions_by_handler("api.handler.handler").items()
    for root in [
        _asset(dev, props["Code"]),
        *(layer / "python" for layer in _layer_assets(dev, function_id)),
    ]:
        sources = list(root.rglob("*.py"))
        assert sources, root
        assert _missing_pyc(root) == [], root
        # Nothing of the build machine's own Python (its cache tag) rides along.
        foreign = [
            path.name
            for path in root.rglob("*.pyc")
            if f".cpython-{LAMBDA_PYTHON_VERSION.replace('.', '')}" not in path.name
        ]
        assert foreign == [], root


def test_layers_do_not_shadow_each_other(dev: Synth) -> None:
    (function_id, _props), *_ = dev.functions_by_handler("api.handler.handler").items()
    tops = [{path.name for path in (layer / "python").iterdir()} for layer in _layer_assets(dev, function_id)]
    assert len(tops) == 2
    assert tops[0] & tops[1] == set()


def test_warm_cache_synth_needs_no_pip_and_reuses_cdk_out(
    dev: Synth, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dev` left this lock's layer in the cache: a fresh cdk.out only links it in."""

    def no_pip(*_args: object, **_kwargs: object) -> list[str]:
        raise AssertionError("pip must not run when the cache holds the layer")

    monkeypatch.setattr(deps_layer, "pip_command", no_pip)
    out = tmp_path / "cdk.out"
    build_app(cli_context(_SMALL), outdir=str(out))[0].synth()
    synth_layer = out / _deps_asset(dev).parent.name / "python"
    assert (synth_layer / "pydantic" / "__init__.py").is_file()

    def no_staging(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("an unchanged lock must reuse cdk.out's asset")

    monkeypatch.setattr(deps_layer, "stage", no_staging)
    build_app(cli_context(_SMALL), outdir=str(out))[0].synth()


def test_synth_fails_naming_the_fix_when_the_layer_cannot_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cache and no package index (offline): synth stops instead of shipping an empty layer."""
    monkeypatch.setenv(deps_layer.CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    with pytest.raises(DepsLayerBuildError) as failure:
        build_app(cli_context(_SMALL), outdir=str(tmp_path / "cdk.out"))
    message = str(failure.value)
    assert "No matching distribution found for aws-lambda-powertools" in message
    assert "make deps-layer" in message
    assert deps_layer.CACHE_ENV in message
    assert f"{deps_layer.layer_hash()}/python" in message
    assert list((tmp_path / "empty-cache").iterdir()) == []  # no half-built layer left to reuse

    # The CDK entry point turns it into a one-message exit (what `npx cdk synth` prints).
    monkeypatch.setattr(sys, "argv", ["cdk/app.py"])
    monkeypatch.setenv("CDK_CONTEXT_JSON", json.dumps(cli_context(_SMALL)))
    monkeypatch.setenv("CDK_OUTDIR", str(tmp_path / "cdk.out2"))
    with pytest.raises(SystemExit, match=r"^aijobs: cannot build the Lambda dependency layer"):
        cdk_entry_point.main()
