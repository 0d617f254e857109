"""Option tables of the filter plugins: they take none, so any key is a mistake (fail closed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import cattrs


@attrs.frozen
class NoOptions:
    """The filter plugins have no settings today; the class exists so a key is rejected by cattrs."""


_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


def check_no_options(options: Mapping[str, Any] | None, where: str) -> NoOptions:
    """Validate a plugin's TOML table; ``where`` names it (``rmq.filters:tag``) in the error."""
    if options is None:
        return NoOptions()
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: options must be a table, got {type(options).__name__}")
    try:
        return _CONVERTER.structure(dict(options), NoOptions)
    except (cattrs.BaseValidationError, cattrs.ForbiddenExtraKeysError):
        keys = ", ".join(repr(k) for k in sorted(map(str, options)))
        raise ValueError(f"{where}: unknown option(s) {keys}; this plugin takes no options") from None
