"""The aijobs CDK app: `stacks/` composes, `constructs/` holds one construct per capability."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
CODE_LAYER_DIR = REPO_ROOT / "layers" / "aijobs"
DEPS_REQUIREMENTS = REPO_ROOT / "layers" / "deps" / "requirements.txt"
# Built dependency layers, one folder per lock hash (aijobs_cdk.deps_layer); AIJOBS_DEPS_LAYER_CACHE
# points elsewhere (e.g. at a layer built on a machine with network access).
DEPS_LAYER_CACHE_DIR = REPO_ROOT / ".cache" / "deps-layer"
# The Lambda Python runtime and architecture of every function; the dependency layer is built for
# exactly these (lambda_defaults derives RUNTIME and ARCHITECTURE from them). 3.13, not the newer
# 3.14: every asset ships `.pyc` files, which only an interpreter of the runtime's own minor version
# can write, and the build machines carry a 3.13 (pyenv) but no 3.14 (aijobs_cdk.compiled).
LAMBDA_PYTHON_VERSION = "3.13"
LAMBDA_ARCHITECTURE = "arm64"
WHEEL_MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
_WHEEL_MACHINE = WHEEL_MACHINES[LAMBDA_ARCHITECTURE]


def wheel_platforms(machine: str) -> tuple[str, ...]:
    """Lambda's Python 3.12+ runtimes run on Amazon Linux 2023 (glibc 2.34): these platforms fit it."""
    return (f"manylinux2014_{machine}", f"manylinux_2_28_{machine}")


LAMBDA_WHEEL_PLATFORMS = wheel_platforms(_WHEEL_MACHINE)
# Set on every function, and on the import benchmark's fresh interpreters (which measure what
# Lambda loads): nothing the functions use registers a pydantic plugin, so pydantic need not scan
# every installed distribution for one at cold start.
LAMBDA_ONLY_ENV = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}
