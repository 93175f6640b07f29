"""The app's version comparison is the runtime's (the host's tests pin the same table)."""

import pytest

from kernel.common import versions


@pytest.mark.parametrize(
    ("source", "other", "expected"),
    [
        ("1.0", "1.0", 0),
        ("1.1", "1.0", 1),
        ("", "1.0", -1),
        ("1.0", "", 1),
        ("", None, 0),
        ("1.10", "1.9", 1),
        ("1.0", "1.0.0", -1),
        ("10", "9", -1),
        ("V2", "v2", 0),
    ],
)
def test_versions_compare_as_the_runtime_compares_them(source, other, expected):
    assert versions.compare(source, other) == expected


def test_at_least_reads_as_the_branch_an_orchestrator_takes():
    assert versions.at_least("2.0", "2.0") and versions.at_least("2.1", "2.0")
    assert not versions.at_least("1.0", "2.0") and not versions.at_least("", "1.0")
    assert versions.at_least("", "")
