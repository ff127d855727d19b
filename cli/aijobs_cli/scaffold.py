"""`aijobs new-kind NAME --capability text|embedding|image|speech|video`: a working kind in one module.

It writes `layers/aijobs/python/aijobs/kinds/<name>.py` (a declaration with a useful default
prompt, an options model and models on every provider that offers the capability) and adds the
kind to `QUEUE_NAMES` in every stage file (`.env.<stage>`): one line each. Nothing else: the
consumer, the queues, IAM, the OpenAPI document, the test suite's contract and sample events all
derive from the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aijobs.kinds.base import check_kind_name
from aijobs.kinds.registry import NOT_KIND_MODULES, module_name
from aijobs.kinds.registry import kind as declared_kind
from aijobs.providers.base import CAPABILITY_NAMES
from aijobs.workflows.registry import WORKFLOWS
from aijobs_cdk.stage_config import RESERVED_QUEUE_NAMES

KINDS_FOLDER = Path("layers/aijobs/python/aijobs/kinds")


class ScaffoldError(ValueError):
    """A kind that cannot be scaffolded; the message says why."""


@dataclass(frozen=True)
class Scaffolded:
    module: Path
    stage_files: tuple[Path, ...]


_HEADER = '''"""`{name}`: {summary}

Scaffolded by `aijobs new-kind`; edit it freely. What a kind declares: aijobs/kinds/base.py;
how to add one: docs/how-to/add-a-kind.md.
"""

from __future__ import annotations

'''

_TEMPLATES = {
    "text": '''from pydantic import BaseModel, Field

from aijobs.kinds.base import Inputs, Kind, TextOptions


class Options(TextOptions):
    """Options of a `{name}` job (`options` at `POST /jobs`; anything else is a 422)."""

    style: str = Field(default="plain", pattern=r"^[a-z-]{{1,20}}$", description="how the answer reads")


class Output(BaseModel):
    """The answer, validated (a model's answer that does not match is retried, then final)."""

    answer: str = Field(description="the result for the user")


KIND = Kind(
    name="{name}",
    capability="text",
    description="an answer to a text, in the style its options ask for",
    system="You are a careful assistant. Answer the user's text in a {{options.style}} style.",
    prompt="{{input}}",
    options=Options,
    output=Output,
    models={{"bedrock": "us.amazon.nova-lite-v1:0", "openai": "gpt-4o-mini", "local": "local-text-1"}},
    inputs=Inputs(max_chars=50_000),
    price=1,
)
''',
    "embedding": """from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="{name}",
    capability="embedding",
    description="a vector per text (a string, or up to 100 texts as {{'texts': [...]}})",
    models={{
        "bedrock": "amazon.titan-embed-text-v2:0",
        "openai": "text-embedding-3-small",
        "local": "local-embedding-1",
    }},
    inputs=Inputs(max_chars=50_000, list_field="texts", max_items=100),
    price=1,
)
""",
    "image": """from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="{name}",
    capability="image",
    description="an image from a text prompt",
    prompt="{{input}}",
    models={{
        "bedrock": "stability.stable-image-core-v1:1",
        "openai": "gpt-image-1",
        "local": "local-image-1",
    }},
    inputs=Inputs(fields=("prompt", "text"), max_chars=4_000),
    price=5,
)
""",
    "speech": """from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="{name}",
    capability="speech",
    description="speech audio of a text",
    models={{"polly": None, "local": "local-tts-1"}},
    inputs=Inputs(max_chars=100_000),
    price=3,
)
""",
    "video": """from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="{name}",
    capability="video",
    description="a short video from a text prompt (asynchronous)",
    prompt="{{input}}",
    models={{"bedrock": "luma.ray-v2:0", "local": "local-video-1"}},
    inputs=Inputs(fields=("prompt", "text"), max_chars=5_000),
    price=20,
)
""",
}

_SUMMARIES = {
    "text": "a text -> an answer (text generation with a validated output)",
    "embedding": "texts -> vectors",
    "image": "a prompt -> images",
    "speech": "a text -> speech audio",
    "video": "a prompt -> a video, asynchronously",
}


def new_kind(root: Path, name: str, capability: str) -> Scaffolded:
    """Write the kind's module and add it to every stage file's QUEUE_NAMES under `root`."""
    if capability not in CAPABILITY_NAMES:
        raise ScaffoldError(f"capability must be one of {', '.join(CAPABILITY_NAMES)}, not {capability!r}")
    try:
        check_kind_name(name)
    except ValueError as error:
        raise ScaffoldError(str(error)) from None
    if name in WORKFLOWS or name in RESERVED_QUEUE_NAMES or module_name(name) in NOT_KIND_MODULES:
        raise ScaffoldError(f"{name!r} is taken (a workflow or one of the stage's own queues)")
    module = root / KINDS_FOLDER / f"{module_name(name)}.py"
    if module.exists() or declared_kind(name) is not None:
        raise ScaffoldError(f"kind {name!r} exists already: {module.relative_to(root)}")
    stage_files = tuple(sorted(root.glob(".env.*")))
    if not stage_files:
        raise ScaffoldError(f"no stage files (.env.<stage>) in {root}")
    edited = {path: _with_queue(path, name) for path in stage_files}
    text = _HEADER.format(name=name, summary=_SUMMARIES[capability])
    text += _TEMPLATES[capability].format(name=name)
    module.write_text(text, encoding="utf-8")
    for path, content in edited.items():
        path.write_text(content, encoding="utf-8")
    return Scaffolded(module=module, stage_files=stage_files)


def _with_queue(path: Path, name: str) -> str:
    """The stage file with `name` appended to its QUEUE_NAMES line (one line changed)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for index, line in enumerate(lines):
        key, sep, value = line.rstrip("\n").partition("=")
        if key.strip() == "QUEUE_NAMES" and sep:
            names = [entry.strip() for entry in value.split(";") if entry.strip()]
            if name in names:
                raise ScaffoldError(f"{path.name}: QUEUE_NAMES lists {name!r} already")
            lines[index] = f"QUEUE_NAMES={';'.join([*names, name])}\n"
            return "".join(lines)
    raise ScaffoldError(f"{path.name} has no QUEUE_NAMES line")
