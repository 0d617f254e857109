"""Confinement: the one way to turn client-supplied names into filesystem paths.

Topic and group names arrive from anyone who can reach a port. A store (bundled or
third-party) that names a directory or file after one must build the path with
:func:`confined_path` and remove it with :func:`remove_confined`; both refuse any
component that is not a plain name and any result that resolves (symlinks included)
outside the root it was given.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ConfinementError", "check_component", "confined_path", "remove_confined"]


class ConfinementError(ValueError):
    """A name would escape, or is not a plain path component."""


def check_component(name: str) -> str:
    """``name`` as one safe path component, else ``ConfinementError`` saying why."""
    if not isinstance(name, str) or not name:
        raise ConfinementError("an empty name is not a path component")
    if name in (".", ".."):
        raise ConfinementError(f"{name!r} is not a path component")
    bad = next((c for c in name if c in "/\\\x00" or not c.isprintable()), None)
    if bad is not None:
        raise ConfinementError(f"{name[:80]!r} contains {bad!r}, which a path component cannot hold")
    if os.path.isabs(name) or (os.sep != "/" and os.path.splitdrive(name)[0]):
        raise ConfinementError(f"{name[:80]!r} is an absolute path")
    return name


def confined_path(root: Path | str, *names: str) -> Path:
    """``root / name / …`` after checking every name and that the resolved path stays under ``root``.

    The root itself is trusted (it comes from configuration); everything below it may
    be a symlink planted by someone else, which is why the check resolves the result.
    """
    base = Path(root)
    path = base.joinpath(*(check_component(n) for n in names))
    real_root = base.resolve()
    real = path.resolve()
    if real != real_root and not real.is_relative_to(real_root):
        raise ConfinementError(f"{path} resolves to {real}, outside {real_root}")
    if real == real_root and names:
        raise ConfinementError(f"{path} resolves to the root {real_root} itself")
    return path


def remove_confined(root: Path | str, *names: str) -> bool:
    """Delete the file or directory tree ``root/names…``; never follows a symlink out of ``root``.

    A symlink at the target is removed as a link (its destination is untouched).
    Returns False when nothing was there.
    """
    if not names:
        raise ConfinementError("refusing to remove the root itself")
    for n in names:
        check_component(n)
    parent = confined_path(root, *names[:-1]) if len(names) > 1 else Path(root)
    target = parent / names[-1]
    if target.is_symlink():  # a planted link: remove the link, never what it points at
        target.unlink()
        return True
    path = confined_path(root, *names)
    if path.is_dir():
        shutil.rmtree(path)  # rmtree never follows symlinks inside the tree (it unlinks them)
        return True
    if path.exists():
        path.unlink()
        return True
    return False
