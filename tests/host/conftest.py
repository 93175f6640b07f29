"""One shared host per module and store kind, for API tests that do not kill it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import APPS, HostProcess, store_spec_for, store_specs


@pytest.fixture(scope="module", params=store_specs())
def shared_host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    tmp: Path = tmp_path_factory.mktemp("shared")
    marks = tmp / "marks.txt"
    host = HostProcess(
        APPS / "basic", store_spec_for(str(request.param), tmp), env={"BASIC_APP_MARKS": str(marks)}
    )
    host.start()
    yield host
    host.kill()
