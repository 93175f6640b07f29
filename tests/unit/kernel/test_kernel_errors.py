import pickle

import pydantic
import pytest

from kernel.common.errors import (
    ConflictError,
    CursorExpiredError,
    KernelError,
    NotFoundError,
    PermanentError,
    TransientError,
    ValidationError,
    join_path,
)


def test_to_dict_is_the_json_error_body() -> None:
    error = ValidationError("invalid_session_id", "bad id", "session_id")

    assert error.to_dict() == {
        "error": "invalid_session_id",
        "message": "bad id",
        "field": "session_id",
    }


@pytest.mark.parametrize(
    ("cls", "status"),
    [(ValidationError, 400), (CursorExpiredError, 410), (NotFoundError, 404),
     (ConflictError, 409), (TransientError, 503)],
)  # fmt: skip
def test_each_error_carries_its_http_status(cls: type[KernelError], status: int) -> None:
    assert cls("some_code", "m").http_status == status


def test_only_transient_errors_are_retryable() -> None:
    assert TransientError("x", "m").retryable
    assert not PermanentError("x", "m").retryable


def test_codes_must_be_snake_case() -> None:
    with pytest.raises(ValueError, match="snake_case"):
        KernelError("Not-Snake", "m")


def test_errors_survive_pickling_with_their_fields() -> None:
    error = pickle.loads(pickle.dumps(ConflictError("version_conflict", "v1 not v2", "doc")))

    assert (type(error), error.code, error.message, error.field) == (
        ConflictError, "version_conflict", "v1 not v2", "doc",
    )  # fmt: skip


def test_join_path_builds_readable_field_paths() -> None:
    assert join_path("entries", 2, "role") == "entries[2].role"
    assert join_path("documents[0].data", "recipients", "[1]") == "documents[0].data.recipients[1]"
    assert join_path(None, None) is None


def test_from_pydantic_keeps_the_location_of_the_first_error() -> None:
    class Model(pydantic.BaseModel):
        items: list[int]

    with pytest.raises(pydantic.ValidationError) as caught:
        Model.model_validate({"items": [1, "x", "y"]})

    error = ValidationError.from_pydantic(caught.value, at="body")
    assert (error.code, error.field) == ("invalid_request", "body.items[1]")
    assert "and 1 more" in error.message
