"""Confinement: a path built from client-supplied names never leaves the root, symlinks included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.kernel.paths import ConfinementError, confined_path, remove_confined


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "store"
    (root / "consumequeue" / "T" / "0").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    os.symlink(outside, root / "consumequeue" / "evil")
    os.symlink(outside, root / "evil_top")
    return root, outside


@pytest.mark.parametrize("name", ["..", ".", "../x", "/etc", "a/b", "a\\b", "x\x00", "", "\n", "%2e%2e"])
def test_bad_components_are_refused(tree: tuple[Path, Path], name: str) -> None:
    root, _ = tree
    if name == "%2e%2e":  # encoded dots are a plain name: nothing decodes them
        assert confined_path(root, "consumequeue", name) == root / "consumequeue" / name
        return
    with pytest.raises(ConfinementError):
        confined_path(root, "consumequeue", name)


def test_symlinks_out_of_the_root_are_refused_and_removed_as_links(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    with pytest.raises(ConfinementError, match="outside"):
        confined_path(root, "consumequeue", "evil", "0")
    assert remove_confined(root, "consumequeue", "evil") and remove_confined(root, "evil_top")
    assert (outside / "precious").read_text() == "keep"
    assert not (root / "consumequeue" / "evil").exists()
    assert remove_confined(root, "consumequeue", "T") and not (root / "consumequeue" / "T").exists()
    assert not remove_confined(root, "consumequeue", "T")
    with pytest.raises(ConfinementError):
        remove_confined(root)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=20), min_size=1, max_size=4))
def test_no_name_sequence_escapes(tree: tuple[Path, Path], names: list[str]) -> None:
    root, _ = tree
    try:
        path = confined_path(root, *names)
    except ConfinementError:
        return
    real = path.resolve()
    assert real.is_relative_to(root.resolve()) and real != root.resolve()
