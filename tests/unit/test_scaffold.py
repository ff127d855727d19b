"""`aijobs new-kind` refuses names that would overwrite the kinds package's own modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from aijobs.kinds.registry import NOT_KIND_MODULES
from aijobs_cli.scaffold import ScaffoldError, new_kind


@pytest.mark.parametrize("name", sorted(NOT_KIND_MODULES))
def test_a_module_of_the_kinds_package_is_not_a_kind_name(tmp_path: Path, name: str) -> None:
    (tmp_path / ".env.dev").write_text("QUEUE_NAMES=summary\n")
    with pytest.raises(ScaffoldError, match="is taken"):
        new_kind(tmp_path, name, "text")
    assert not list(tmp_path.rglob("*.py"))
    assert (tmp_path / ".env.dev").read_text() == "QUEUE_NAMES=summary\n"
