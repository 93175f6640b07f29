"""The HTTP side's bounds: JSON depth without recursion, numbers, query integers, settings."""

from __future__ import annotations

import json

import pytest

from durable_host.engine.client import ClientError
from durable_host.functions.config import ConfigError
from durable_host.http.limits import Limits, check_json, json_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[[[", "]]]"]', 1),  # brackets inside strings do not count
        ('["\\"[[[[", {"k\\\\": [[]]}]', 4),  # nor do escaped quotes end a string
        ("[[], [[]], [[[]]]]", 4),
    ],
)
def test_json_depth_counts_nesting_and_ignores_strings(text: str, depth: int) -> None:
    json.loads(text)
    assert json_depth(text, depth) <= depth  # at the limit: accepted
    if depth:
        assert json_depth(text, depth - 1) == depth  # one over the limit: refused


def test_depth_just_over_the_limit_is_refused_and_at_the_limit_accepted() -> None:
    at = "[" * 64 + "]" * 64
    over = "[" * 65 + "]" * 65

    assert check_json(at.encode(), "body", 64) == at
    with pytest.raises(ClientError) as refused:
        check_json(over.encode(), "body", 64)
    assert refused.value.status == 400 and "deeper than 64" in refused.value.message


def test_a_body_too_deep_for_the_parser_is_a_400_not_a_recursion_error() -> None:
    with pytest.raises(ClientError) as refused:
        check_json(b"[" * 200_000 + b"]" * 200_000, "request body", 64)
    assert refused.value.status == 400 and "deeper than 64" in refused.value.message


@pytest.mark.parametrize(
    "body", [b"NaN", b"[Infinity]", b'{"x": -Infinity}', b"1e999", b"[-1e400]"]
)
def test_non_finite_numbers_are_refused(body: bytes) -> None:
    with pytest.raises(ClientError) as refused:
        check_json(body, "request body", 64)
    assert refused.value.status == 400


def test_invalid_utf8_and_lone_surrogate_escapes() -> None:
    with pytest.raises(ClientError):
        check_json(b'"\xed\xa0\x80"', "body", 64)  # a surrogate encoded in UTF-8 is not UTF-8
    with pytest.raises(ClientError, match="lone surrogate"):
        check_json(b'{"text": "a\\ud800b"}', "body", 64)  # valid JSON, but no UTF-8 form (I-JSON)
    with pytest.raises(ClientError, match="lone surrogate"):
        check_json(b'["\\udc00"]', "body", 64)
    pair = b'"\\ud83d\\ude00"'
    assert check_json(pair, "body", 64) == pair.decode()  # a surrogate pair is one character
    assert check_json(b'"\\\\ud800"', "body", 64)  # an escaped backslash, then text


def test_limits_from_the_environment() -> None:
    limits = Limits.from_env(
        {"DURABLE_HOST_MAX_INPUT_BYTES": "1024", "DURABLE_HOST_HEADER_TIMEOUT": "2.5"}
    )

    assert limits.max_input_bytes == 1024 and limits.header_timeout == 2.5
    assert limits.max_request_bytes == Limits().max_request_bytes
    with pytest.raises(ConfigError, match="DURABLE_HOST_MAX_CONNECTIONS"):
        Limits.from_env({"DURABLE_HOST_MAX_CONNECTIONS": "many"})
    with pytest.raises(ConfigError, match="positive"):
        Limits.from_env({"DURABLE_HOST_MAX_JSON_DEPTH": "0"})


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "Infinity"])
def test_a_time_limit_that_is_no_finite_number_is_refused(text: str) -> None:
    # float() reads these; a NaN timeout compares false both ways and would never fire.
    with pytest.raises(ConfigError, match="DURABLE_HOST_HEADER_TIMEOUT"):
        Limits.from_env({"DURABLE_HOST_HEADER_TIMEOUT": text})
