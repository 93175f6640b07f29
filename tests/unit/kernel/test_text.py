"""kernel.common.text: lone surrogates are found, refused with the field named, or scrubbed."""

from __future__ import annotations

import json

import pytest

from api import inputs
from kernel.common.errors import ValidationError
from kernel.common.text import lone_surrogate, require_unicode, scrub


def test_lone_surrogates_are_found_and_pairs_are_not() -> None:
    assert lone_surrogate("a\ud800b") == 1
    assert lone_surrogate("a\udfff") == 1
    assert lone_surrogate(json.loads('"\\ud83d\\ude00"')) is None  # a pair decodes to one char
    assert lone_surrogate("plain") is None


def test_require_unicode_names_the_field_and_scrub_replaces() -> None:
    with pytest.raises(ValidationError) as caught:
        require_unicode("x\udc00", "text")
    assert (caught.value.code, caught.value.field) == ("invalid_unicode", "text")
    assert require_unicode(3, "n") == 3
    assert scrub("a\ud800b").encode("utf-8") == "a\ufffdb".encode()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"requestId": "r", "text": "a\\ud800"}', "text"),
        (b'{"requestId": "r\\udc00", "text": "a"}', "requestId"),
        (b'{"te\\ud800xt": "a", "requestId": "r"}', "body"),
    ],
)
def test_a_submission_body_with_a_lone_surrogate_is_refused(raw: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.submission(raw)
    assert (caught.value.code, caught.value.field) == ("invalid_unicode", field)


def test_nested_strings_are_reported_by_path() -> None:
    with pytest.raises(ValidationError) as caught:
        inputs.unicode_strings({"a": [{"b": "\ud800"}]}, "body")
    assert caught.value.field == "a[0].b"
