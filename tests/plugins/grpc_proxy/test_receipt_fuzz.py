"""Receipt handles are peer bytes: whatever a client sends as one, ``unseal`` answers the fields of a handle
this broker sealed for that group and topic, or None — never an exception, never another group's handle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmq.plugins.grpc_proxy.receipts import Receipts
from rmq.testing.fuzz import fuzz_settings

RECEIPT = "0 1764000000000 30000 2 T 0 12 3"  # the POP receipt's eight fields


def sealer() -> Receipts:
    return Receipts(b"k" * 32)


@fuzz_settings(500)
@given(st.text(max_size=200), st.text(max_size=40), st.text(max_size=40))
def test_any_text_unseals_to_none_or_fields(sealed: str, group: str, topic: str) -> None:
    parts = sealer().unseal(group, topic, sealed)
    assert parts is None  # nothing a peer can type without the key is ours


@fuzz_settings(300)
@given(st.integers(min_value=0), st.characters(codec="utf-8"), st.text(max_size=8))
def test_a_sealed_handle_altered_anywhere_is_refused(at: int, ch: str, group_suffix: str) -> None:
    svc = sealer()
    sealed = svc.seal("CG", "T", RECEIPT)
    assert svc.unseal("CG", "T", sealed) == RECEIPT.split(" ")
    i = at % len(sealed)
    altered = sealed[:i] + ch + sealed[i + 1:]
    if altered != sealed:
        assert svc.unseal("CG", "T", altered) is None
    if group_suffix:
        assert svc.unseal("CG" + group_suffix, "T", sealed) is None  # another group's handle


@fuzz_settings(300)
@given(st.text(max_size=300), st.text(max_size=20))
def test_dashboard_csrf_tokens_of_any_text_are_refused_not_raised(token: str, user: str) -> None:
    """The same rule on the dashboard's forms: a CSRF token is peer text (cookie and form field)."""
    from rmq.plugins.dashboard.app import Backend

    b = Backend.__new__(Backend)
    b._csrf_key = b"k" * 32
    assert b.csrf_valid(token, user) is False
    assert b.csrf_valid(b.csrf_token(user), user) is True
