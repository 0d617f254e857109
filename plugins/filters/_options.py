"""Option tables of the filter plugins: they take none, so any key is a mistake (fail closed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rmq.kernel import NoOptions, structure_options


def check_no_options(options: Mapping[str, Any] | None, where: str) -> NoOptions:
    """Validate a plugin's TOML table; ``where`` names it (``rmq.filters:tag``) in the error."""
    return structure_options(NoOptions, options, where)
