"""Contract of the content store port, run against every implementation (files; blobs on
Azurite), with processes writing one text at once."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path
from typing import Any

import pytest

from adapters.content_store import (
    BlobContentStore,
    ContentCorrupt,
    ContentNotFound,
    ContentStore,
    FileContentStore,
)
from kernel.common.content import content_ref
from tests.adapters.conftest import FlakyContainer

# ("file", directory) or ("blob", connection string, container name)
Spec = tuple[str, ...]


def open_store(spec: Spec) -> ContentStore:
    if spec[0] == "file":
        return FileContentStore(Path(spec[1]))
    from adapters import app_state

    return BlobContentStore(app_state.container_client(spec[1], spec[2]))


def damage(spec: Spec, ref: str, data: bytes) -> None:
    """Overwrite what is stored under ``ref`` behind the store's back."""
    digest = ref.removeprefix("sha256:")
    if spec[0] == "file":
        (Path(spec[1]) / digest[:2] / digest).write_bytes(data)
        return
    from adapters import app_state

    container = app_state.container_client(spec[1], spec[2])
    container.get_blob_client(f"sha256/{digest}").upload_blob(data, overwrite=True)


@pytest.fixture(params=["file", "blob"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    if request.param == "file":
        return ("file", str(tmp_path / "content"))
    connection = request.getfixturevalue("azurite_connection")
    return ("blob", connection, f"t-{uuid.uuid4().hex[:16]}")


@pytest.fixture
def store(spec: Spec) -> ContentStore:
    return open_store(spec)


TEXT = "Ünïcode ✓ and a long line. " * 400


def test_a_text_is_stored_under_its_hash_and_read_back(store):
    ref = store.put(TEXT)
    assert ref == content_ref(TEXT)
    assert store.get(ref) == TEXT


def test_writing_the_same_text_again_is_harmless(store):
    assert store.put(TEXT) == store.put(TEXT) == content_ref(TEXT)
    assert store.get(content_ref(TEXT)) == TEXT
    assert store.get(store.put("")) == ""


@pytest.mark.parametrize(
    "ref", [content_ref("never stored"), "sha256:nothex", "sha256:" + "A" * 64, "md5:abc", ""]
)
def test_an_unknown_or_malformed_reference_is_not_found(store, ref):
    with pytest.raises(ContentNotFound):
        store.get(ref)


def test_a_damaged_copy_is_an_error_never_returned(store, spec):
    ref = store.put(TEXT)
    damage(spec, ref, TEXT.replace("✓", "x").encode())
    with pytest.raises(ContentCorrupt):
        store.get(ref)
    assert issubclass(ContentCorrupt, ContentNotFound)  # callers that handle "missing" handle it


def _put(spec: Spec, text: str, barrier: Any, results: Any) -> None:
    store = open_store(spec)
    barrier.wait()
    results.put(store.put(text))


def test_processes_writing_one_text_at_once_all_get_its_reference(spec):
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_put, args=(spec, TEXT, barrier, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    refs = {results.get(timeout=60) for _ in workers}
    for worker in workers:
        worker.join(timeout=10)
    assert refs == {content_ref(TEXT)}
    assert open_store(spec).get(content_ref(TEXT)) == TEXT


@pytest.mark.parametrize("fault", ["lost", "unsent"])
def test_a_put_whose_answer_was_lost_is_retried_harmlessly(request, fault):
    container = FlakyContainer(request.getfixturevalue("blob_container"))
    store = BlobContentStore(container)
    container.faults = [fault, fault]
    assert store.put(TEXT) == content_ref(TEXT)
    assert container.hits == 2
    assert store.get(content_ref(TEXT)) == TEXT
