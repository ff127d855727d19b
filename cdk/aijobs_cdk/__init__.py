"""The aijobs CDK app: `stacks/` composes, `constructs/` holds one construct per capability."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
CODE_LAYER_DIR = REPO_ROOT / "layers" / "aijobs"
DEPS_REQUIREMENTS = REPO_ROOT / "layers" / "deps" / "requirements.txt"
# Written by scripts/build_deps_layer.py (never by Docker); absent until that script has run.
DEPS_LAYER_BUILD_DIR = REPO_ROOT / "build" / "deps-layer"
# The Lambda Python runtime; the dependency layer is built for exactly this version.
LAMBDA_PYTHON_VERSION = "3.14"
# Lambda arm64 (Graviton) runs on Amazon Linux 2023 (glibc 2.34): these wheel platforms fit it.
LAMBDA_WHEEL_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
