"""The pure ownership core: stable partitions, fair shares, one member's move."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from durable_host import ownership as o

UNITS = list(range(4))


def test_fnv1a_matches_the_published_vectors():
    # Test vectors of the FNV-1a 32-bit reference (draft-eastlake-fnv).
    assert o.fnv1a_32(b"") == 0x811C9DC5
    assert o.fnv1a_32(b"a") == 0xE40C292C
    assert o.fnv1a_32(b"foobar") == 0xBF9CF968


def test_partition_is_stable_across_processes():
    ids = ["order-1", "@counter@c1", "é-unicode", ""]
    here = [o.partition_of(i, 16) for i in ids]
    code = (
        "from durable_host.ownership import partition_of;"
        f"print([partition_of(i, 16) for i in {ids!r}])"
    )
    # A fresh interpreter has another string-hash salt: Python's hash() would differ.
    env = {"PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == str(here)


def test_partitions_spread_ids():
    counts = [0] * 4
    for n in range(4000):
        counts[o.partition_of(f"instance-{n}", 4)] += 1
    assert min(counts) > 800, counts


@pytest.mark.parametrize("value", [0, 17, -1, "x", 2.5, True, None])
def test_partition_count_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match="partitionCount"):
        o.check_partition_count(value)


def test_partition_count_accepts_1_to_16():
    assert [o.check_partition_count(v) for v in (1, "4", 16)] == [1, 4, 16]


def test_shares_sum_to_the_units_and_differ_by_at_most_one():
    for n in range(1, 7):
        members = [f"h{i}" for i in range(n)]
        got = o.shares(list(range(16)), members, {})
        assert sum(got.values()) == 16
        assert max(got.values()) - min(got.values()) <= 1


def test_remainder_goes_to_those_holding_most_so_a_balanced_hub_stays():
    holdings = {0: "b", 1: "b", 2: "a", 3: "c"}
    assert o.shares(UNITS, ["a", "b", "c"], holdings) == {"b": 2, "a": 1, "c": 1}
    for me in "abc":
        assert o.plan(UNITS, ["a", "b", "c"], holdings, me) == o.Plan(share=2 if me == "b" else 1)


def test_alone_takes_everything_free():
    assert o.plan(UNITS, ["a"], {}, "a") == o.Plan(take=(0, 1, 2, 3), share=4)


def test_newcomer_takes_nothing_held_and_the_holder_releases_above_its_share():
    holdings = {u: "a" for u in UNITS}
    assert o.plan(UNITS, ["a", "b"], holdings, "b") == o.Plan(share=2)
    assert o.plan(UNITS, ["a", "b"], holdings, "a") == o.Plan(release=(3, 2), share=2)
    after = {0: "a", 1: "a"}
    assert o.plan(UNITS, ["a", "b"], after, "b") == o.Plan(take=(2, 3), share=2)


def test_dead_holders_units_count_as_free_after_free_ones():
    holdings = {0: "gone", 1: "a", 2: None, 3: "gone"}
    assert o.plan(UNITS, ["a", "b"], holdings, "b") == o.Plan(take=(2, 0), share=2)
    assert o.plan(UNITS, ["a", "b"], {**holdings, 2: "b"}, "b") == o.Plan(take=(0,), share=2)


def test_draining_member_releases_everything_and_others_share_it():
    holdings = {0: "a", 1: "a", 2: "b", 3: "b"}
    assert o.plan(UNITS, ["a", "b"], holdings, "a", draining=True) == o.Plan(release=(1, 0))
    # "a" is no live member any more: its units are taken as soon as their leases allow.
    assert o.plan(UNITS, ["b"], holdings, "b") == o.Plan(take=(0, 1), share=4)


def test_rounds_converge_to_a_fair_share_from_any_start():
    members = ["a", "b", "c"]
    for start in itertools.product([None, "a", "b", "c", "x"], repeat=4):
        holdings: dict[int, str | None] = dict(enumerate(start))
        for _ in range(6):  # bounded: release, then take, per round
            for me in members:
                move = o.plan(UNITS, members, holdings, me)
                for u in move.release:
                    holdings[u] = None
                for u in move.take:
                    if holdings.get(u) not in members:
                        holdings[u] = me
        counts = sorted(sum(1 for h in holdings.values() if h == m) for m in members)
        assert counts == [1, 1, 2], (start, holdings)


def test_host_json_partition_count_default_given_and_refused(tmp_path):
    from durable_host import config

    def parse(provider):
        data = {"extensions": {"durableTask": {"storageProvider": provider}}}
        return config.parse_host_json(tmp_path, data, {})

    assert config.parse_host_json(tmp_path, {}, {}).partition_count == 4
    assert parse({"partitionCount": 16}).partition_count == 16
    with pytest.raises(config.ConfigError, match="storageProvider.partitionCount.*not 17"):
        parse({"partitionCount": 17})
