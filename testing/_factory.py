"""How a contract finds the object factory under test: a fixture if the test module defines one, else a method.

Contracts let a plugin author write ``make_<thing>`` either as a plain method or
as a fixture (when building needs other fixtures); this lookup is that rule, once.
"""

from __future__ import annotations

from typing import Any

import pytest


def fixture_or_method(request: pytest.FixtureRequest, name: str, method: Any) -> Any:
    """The fixture called ``name`` when one is visible to the test, otherwise ``method``."""
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        return method
