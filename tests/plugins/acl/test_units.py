"""ACL pieces without a daemon: address patterns (RocketMQ's forms, fuzzed), permission checks,
signatures (their order and what they cover), and the accounts file loader (fuzzed YAML)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.plugins.acl.accounts import AclFile, AclFileError
from rmq.plugins.acl.addresses import AddressPatternError, compile_pattern
from rmq.protocol.access import ANY, DENY, PUB, SUB, allowed
from rmq.protocol.acl import sign, verify


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.1.*", ["192.168.1.7", "192.168.1.255"], ["192.168.2.7"]),
    ("10.10.*.*", ["10.10.0.1", "10.10.255.9"], ["10.11.0.1"]),
    ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.1.0"]),
    ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
    ("10.0.0.1,10.0.0.2", ["10.0.0.2"], ["10.0.0.3"]),
    ("127.0.0.1", ["127.0.0.1", "::ffff:127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["0:0:0:0:0:0:0:1", "::1"], ["::2"]),
])
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    m = compile_pattern(pattern)
    assert all(m(ip) for ip in yes) and not any(m(ip) for ip in no)


@pytest.mark.parametrize("bad", ["10.x.1.1", "*.1.1.1", "1.2.3.4-2", "1.2.300-400.4", "1.2.3", "a.{1,2}.3.4", "192.168.{1,2}"])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(AddressPatternError):
        compile_pattern(bad)


@given(st.text(max_size=60), st.text(max_size=40))
def test_pattern_compiler_fuzz(pattern: str, ip: str) -> None:
    try:
        m = compile_pattern(pattern)
    except AddressPatternError:
        return
    assert m(ip) in (True, False)


def test_permissions() -> None:
    assert allowed(PUB, PUB | SUB) and allowed(SUB, SUB) and not allowed(PUB, SUB)
    assert not allowed(PUB, DENY | PUB) and allowed(ANY, SUB) and not allowed(ANY, DENY)


def test_signature_covers_sorted_values_and_body() -> None:
    ext = {"b": "TopicA", "a": "PG"}
    sign(ext, b"body", "ak12345", "secret1")
    mac = hmac.new(b"secret1", b"ak12345" + b"PG" + b"TopicA" + b"body", hashlib.sha1)  # sorted: AccessKey, a, b
    assert ext["Signature"] == base64.b64encode(mac.digest()).decode()
    assert verify(ext, b"body", "secret1") and not verify(ext, b"body2", "secret1")
    assert not verify(ext, b"body", "secret2") and not verify({**ext, "a": "PG2"}, b"body", "secret1")
    ext2 = {"AccessKey": "ak12345", "_UNIQUE_KEY_QUERY": "true"}
    mac = hmac.new(b"s3cret!", b"ak12345", hashlib.sha1)  # a <= 4.9.3 client left the field out
    ext2["Signature"] = base64.b64encode(mac.digest()).decode()
    assert verify(ext2, None, "s3cret!")


def test_accounts_file_errors_name_the_entry(tmp_path: Path) -> None:
    f = tmp_path / "plain_acl.yml"
    for text, want in [("accounts: {a: 1}", "accounts: expected a list"),
                       ("accounts:\n  - accessKey: abcdefgh\n", "accounts[0].secretKey"),
                       ("accounts:\n  - {accessKey: abcdefgh, secretKey: 12345678}\n"
                        "  - {accessKey: abcdefgh, secretKey: 12345678}\n", "appears twice"),
                       ("globalWhiteRemoteAddresses: [10.x.0.1]", "globalWhiteRemoteAddresses[0]"),
                       ("acounts: []", "unknown key 'acounts'"),
                       ("accounts: [", "invalid YAML")]:
        f.write_text(text)
        with pytest.raises(AclFileError, match=re.escape(want)):
            AclFile(f).load()
    f.write_text("accounts:\n  - {accessKey: abcdefgh, secretKey: 12345678, topicPerms: [T=PUB], groupPerms: [G=SUB]}")
    acl = AclFile(f)
    acl.load()
    a = acl.accounts["abcdefgh"]
    assert a.secret_key == "12345678" and a.topic_perms == {"T": PUB} and a.group_perms == {"%RETRY%G": SUB}
    assert a.default_topic_perm == DENY
    acl.save()
    again = AclFile(f)
    again.load()
    assert again.accounts["abcdefgh"].topic_perms == {"T": PUB} and again.counter == 1


@given(st.text(max_size=300))
def test_accounts_loader_fuzz(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    f = tmp_path_factory.mktemp("acl") / "plain_acl.yml"
    f.write_bytes(text.encode("utf-8", "replace"))
    try:
        AclFile(f).load()
    except AclFileError:
        pass
