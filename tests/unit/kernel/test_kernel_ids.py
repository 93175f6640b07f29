import uuid

import pytest

from kernel.common import ids
from kernel.common.content import content_ref, is_content_ref, needs_reference
from kernel.common.errors import ValidationError


@pytest.mark.parametrize("value", ["a", "A-b_9", "x" * 64])
def test_valid_session_ids_are_returned_unchanged(value: str) -> None:
    assert ids.validate_session_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 65, "a b", "a/b", "a:b", "é", None, 5])
def test_invalid_session_ids_are_rejected_naming_the_field(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        ids.validate_session_id(value)

    assert (caught.value.code, caught.value.field) == ("invalid_session_id", "session_id")


@pytest.mark.parametrize("value", ["r", "x" * 128, "with space", "üñí-42"])
def test_valid_request_ids(value: str) -> None:
    assert ids.validate_request_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 129, "a\nb", "tab\there", None, 7])
def test_invalid_request_ids(value: object) -> None:
    with pytest.raises(ValidationError, match="invalid_request_id"):
        ids.validate_request_id(value)


def test_submission_id_is_a_pinned_uuid5_of_session_and_request() -> None:
    # Pinned: a change of NAMESPACE or of the name format would orphan every client retry.
    assert ids.submission_id("s1", "r1") == str(
        uuid.uuid5(uuid.UUID("d982cdf9-712b-42ec-8230-888ce3154549"), "submission:s1:r1")
    )
    assert ids.submission_id("s1", "r1") == ids.submission_id("s1", "r1")
    assert ids.submission_id("s1", "r1") != ids.submission_id("s2", "r1")
    assert ids.submission_id("s1", "r1") != ids.submission_id("s1", "r2")


def test_turn_instance_id_is_prefixed_by_its_session() -> None:
    sub = ids.submission_id("s1", "r1")

    turn = ids.turn_instance_id("s1", sub)

    assert turn == f"s1:turn:{sub}"
    assert ids.validate_instance_id(turn) == turn


def test_tool_task_id_names_round_and_call() -> None:
    assert ids.tool_task_id("sub", 2, 0) == "sub:tool:2:0"


@pytest.mark.parametrize(("round_no", "call_index"), [(-1, 0), (0, -1), (True, 0), (0, "1")])
def test_tool_task_id_rejects_bad_indexes(round_no: object, call_index: object) -> None:
    with pytest.raises(ValidationError, match="invalid_index"):
        ids.tool_task_id("sub", round_no, call_index)  # type: ignore[arg-type]


def test_child_task_id_is_readable_when_it_fits() -> None:
    assert ids.child_task_id("s1:turn:abc", "mail-3") == "s1:turn:abc:mail-3"


def test_child_task_id_hashes_when_the_readable_form_is_too_long() -> None:
    parent = "p" * 250

    first, second = ids.child_task_id(parent, "a"), ids.child_task_id(parent, "b")

    assert first != second
    assert first == ids.child_task_id(parent, "a")
    assert len(first) <= ids.MAX_INSTANCE_ID_CHARS
    assert first.startswith("p" * 200)
    assert ids.validate_instance_id(first) == first


def test_nested_child_ids_stay_valid_at_any_depth() -> None:
    task_id = "s1:turn:x"
    for depth in range(100):
        task_id = ids.child_task_id(task_id, f"k{depth}")

        assert ids.validate_instance_id(task_id) == task_id


@pytest.mark.parametrize("key", ["", "a:b", "a/b", "~x", "x" * 65])
def test_child_task_id_rejects_bad_keys(key: str) -> None:
    with pytest.raises(ValidationError, match="invalid_key"):
        ids.child_task_id("parent", key)


@pytest.mark.parametrize(
    "value", ["", "@session@x", "a/b", "a\\b", "a#b", "a?b", "a\x01", "x" * 257]
)
def test_invalid_instance_ids(value: str) -> None:
    with pytest.raises(ValidationError, match="invalid_instance_id"):
        ids.validate_instance_id(value)


def test_session_entity_key_is_the_validated_session_id() -> None:
    assert ids.session_entity_key("abc") == "abc"
    with pytest.raises(ValidationError):
        ids.session_entity_key("a/b")


def test_content_ref_is_the_sha256_of_the_utf8_text() -> None:
    ref = content_ref("héllo")

    assert ref == "sha256:" + __import__("hashlib").sha256("héllo".encode()).hexdigest()
    assert is_content_ref(ref)
    assert not is_content_ref("sha256:ABC")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("x" * 4096, False), ("x" * 4097, True), ("€" * 1365, False), ("€" * 1366, True)],
)
def test_needs_reference_counts_utf8_bytes(text: str, expected: bool) -> None:
    assert needs_reference(text) is expected
