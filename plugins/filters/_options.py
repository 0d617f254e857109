"""Option tables of the filter plugins: they take none, so any key is a mistake (fail closed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rmq.kernel.options import structure_options


@attrs.frozen
class NoOptions:
    """The filter plugins have no settings today; the class exists so a key is rejected."""


def check_no_options(options: Mapping[str, Any] | None, where: str) -> NoOptions:
    """Validate a plugin's TOML table; ``where`` names it (``rmq.filters:tag``) in the error."""
    return structure_options(NoOptions, options, where)
