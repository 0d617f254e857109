"""Hypothesis profiles for rmq's fuzz suites: a few seconds in ``make test``, a million inputs in ``make fuzz``.

Decorate a property with ``@fuzz_settings()`` (or ``@fuzz_settings(300)`` for a different
quick count). The profile is chosen by the environment, never loaded globally, so other
property tests keep their own settings:

* ``RMQ_FUZZ`` unset — profile ``rmq-quick``: ``quick`` examples per property (default 100);
* ``RMQ_FUZZ=1`` — profile ``rmq-fuzz``: ``RMQ_FUZZ_EXAMPLES`` examples per property
  (default 60 000; ``make fuzz`` runs every fuzz property with it).
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

__all__ = ["FUZZ_ENV", "compiler_present", "decoder_takes", "fuzz_settings", "fuzzing", "mutate"]

FUZZ_ENV = "RMQ_FUZZ"
EXAMPLES_ENV = "RMQ_FUZZ_EXAMPLES"

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("rmq-quick", max_examples=100, deadline=None, suppress_health_check=_SUPPRESS)
settings.register_profile(
    "rmq-fuzz",
    max_examples=int(os.environ.get(EXAMPLES_ENV, "60000")),
    deadline=None,
    suppress_health_check=_SUPPRESS,
    database=None,  # a million passing inputs are not worth keeping; failures are printed
    print_blob=True,
)


def fuzzing() -> bool:
    """True in a ``make fuzz`` run."""
    return os.environ.get(FUZZ_ENV, "") not in ("", "0")


def fuzz_settings(quick: int | None = None) -> settings:
    """Settings for one fuzz property: ``quick`` examples normally, the fuzz profile's count under ``RMQ_FUZZ``."""
    if fuzzing():
        return settings(settings.get_profile("rmq-fuzz"))
    base = settings.get_profile("rmq-quick")
    return settings(base, max_examples=quick) if quick is not None else settings(base)


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    """Up to four bit flips, inserts, deletes or a truncation of ``data``: a valid input made nearly valid,
    where decoders' edge cases are."""
    b = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "truncate":
            b = b[: draw(st.integers(0, len(b)))]
        elif op == "insert":
            i = draw(st.integers(0, len(b)))
            b[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif b:
            i = draw(st.integers(0, len(b) - 1))
            if op == "flip":
                b[i] ^= 1 << draw(st.integers(0, 7))
            else:
                del b[i]
    return bytes(b)


def decoder_takes(data: st.DataObject, frame: bytes, common: bool,
                  decode: Callable[[bytes, int, int], Any]) -> tuple[Any, bytes] | None:
    """A compiled request decoder (``decode(src, pos, max_frame)``: None or a tuple led by the frame's end) on
    ``frame`` -- mutated unless ``common`` --, after 0..3 bytes, before more, under a limit of any size: what it
    took and the frame's bytes, or None. Checked: what it took is a whole frame within the read and the limit,
    and a ``common`` frame, whole and within the limit, is taken."""
    before = data.draw(st.binary(max_size=3))
    src = before + (mutate(frame, data.draw) if not common and data.draw(st.booleans()) else frame)
    src += data.draw(st.sampled_from([b"", frame, b"\x00\x00"]))
    limit = data.draw(st.sampled_from([1 << 24, len(frame) + 3, len(frame) - 1, 8]))
    pos = len(before)
    got = decode(src, pos, limit)
    event("taken" if got is not None else "left to the Python path")
    if got is None:
        assert not (common and src[pos:].startswith(frame) and limit >= len(frame))
        return None
    end = got[0]
    assert pos + 8 <= end <= len(src) and end - pos <= limit
    return got, src[pos:end]


def compiler_present() -> bool:
    """Whether the C compiler Python was built with is here: then rmq's extensions must have been built
    (their differential tests fail rather than compare the pure path with itself)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None
