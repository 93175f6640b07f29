"""Principals: the header counts only when the setting trusts the proxy that sets it."""

from __future__ import annotations

import azure.functions as func
import pytest

from api import principals
from kernel.common.errors import NotFoundError, ValidationError


def request(principal: str | None = None) -> func.HttpRequest:
    headers = {} if principal is None else {principals.HEADER: principal}
    return func.HttpRequest("GET", "http://h/api/sessions/s1", headers=headers, body=b"")


def test_without_the_setting_the_header_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(principals.TRUST_SETTING, raising=False)

    who = principals.caller(request("mallory"))

    assert who == principals.ANYONE and who.owner_fields() == {}
    assert who.may_see({"owner": "alice"})


def test_with_the_setting_a_session_is_its_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(principals.TRUST_SETTING, "1")
    alice, bob, nobody = (principals.caller(request(p)) for p in ("alice", "bob", None))

    assert alice.owner_fields() == {"owner": "alice"} and nobody.owner_fields() == {"owner": None}
    assert alice.may_see({"owner": "alice"}) and alice.may_see({"owner": None})
    assert bob.may_see(None) and nobody.may_see({"owner": None})
    for who in (bob, nobody):
        with pytest.raises(NotFoundError, match="session_not_found"):
            principals.check(who, {"owner": "alice"}, "s1")


def test_a_malformed_principal_is_a_bad_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(principals.TRUST_SETTING, "true")

    with pytest.raises(ValidationError, match="invalid_principal"):
        principals.caller(request("a b"))
