"""Loading rmq's optional C extensions (issue #30): the build pip made, or another one an environment
variable names (``make fuzz-asan`` points the tests at AddressSanitizer builds this way)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["load_extension", "select"]


def load_extension(name: str, env: str) -> Any:
    """``rmq.protocol.<name>``, or the build the variable ``env`` names; None when it was not built."""
    alt = os.getenv(env)
    full = f"rmq.protocol.{name}"
    if alt:
        spec = importlib.util.spec_from_file_location(full, alt)
        if spec is None or spec.loader is None:
            raise ImportError(f"{env}={alt} is not an extension module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[spec.name] = module
        return module
    try:
        return importlib.import_module(full)
    except ImportError:
        return None


def select(load: Callable[[], Any]) -> tuple[Any, str]:
    """(the compiled module that serves or None, that choice in words for ``rmqd``'s start line):
    ``RMQ_PURE`` set means the pure path; else the module ``load`` returns, when it was built."""
    if os.getenv("RMQ_PURE"):
        return None, "pure (RMQ_PURE set)"
    module = load()
    return module, "compiled" if module is not None else "pure (no compiler at install)"
