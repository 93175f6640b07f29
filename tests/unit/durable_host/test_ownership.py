"""The pure ownership core: stable partitions, fair shares, one member's move."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from durable_host.cluster import ownership as o

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
        "from durable_host.cluster.ownership import partition_of;"
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
    from durable_host.functions import config

    def parse(provider):
        data = {"extensions": {"durableTask": {"storageProvider": provider}}}
        return config.parse_host_json(tmp_path, data, {})

    assert config.parse_host_json(tmp_path, {}, {}).partition_count == 4
    assert parse({"partitionCount": 16}).partition_count == 16
    with pytest.raises(config.ConfigError, match="storageProvider.partitionCount.*not 17"):
        parse({"partitionCount": 17})


def _member(name: str, version: str, match: str = "Strict", draining: bool = False) -> o.Member:
    return o.Member(name, version, draining, {"match": match} if match else {})


def test_a_member_runs_the_versions_its_heartbeat_strategy_allows():
    assert _member("a", "2.0").runs("2.0") and not _member("a", "2.0").runs("1.0")
    older = _member("a", "2.0", "CurrentOrOlder")
    assert older.runs("1.0") and older.runs("") and not older.runs("3.0")
    assert _member("a", "", "").runs("9.9")  # no strategy announced: it checks nothing
    assert not _member("a", "2.0", "Sideways").runs("2.0")  # unknown: not counted on


def test_handovers_go_to_a_live_host_of_the_version_after_the_dwell():
    members = [_member("v1", "1.0"), _member("v2", "2.0")]
    parked = {2: ["1.0"], 3: ["1.0", "3.0"]}
    assert o.handovers(parked, members, "v2", {2: 30.0, 3: 30.0}, 10.0) == {2: "1.0"}
    assert o.handovers(parked, members, "v2", {2: 30.0, 3: 30.0}, 10.0, limit=2) == {
        2: "1.0",
        3: "1.0",
    }
    assert o.handovers(parked, members, "v2", {2: 5.0, 3: 30.0}, 10.0) == {3: "1.0"}
    assert o.handovers(parked, members, "v2", {3: 30.0}, 10.0) == {3: "1.0"}  # 2 not held
    assert o.handovers({2: ["3.0"]}, members, "v2", {2: 30.0}, 10.0) == {}  # nobody runs 3.0
    gone = [_member("v1", "1.0", draining=True), _member("v2", "2.0")]
    assert o.handovers(parked, gone, "v2", {2: 30.0, 3: 30.0}, 10.0, limit=2) == {}


def test_a_handed_over_unit_is_taken_by_its_version_beyond_the_share_and_left_by_others():
    holdings = {0: "v1", 1: "v1", 2: "v2", 3: None}
    wanted = {3: "1.0"}
    v1, v2 = _member("v1", "1.0"), _member("v2", "2.0")
    take_v1 = o.plan(
        UNITS, ["v1", "v2"], holdings, "v1", wanted=wanted, runs=v1.runs, others_run=v2.runs
    )
    assert take_v1.take == (3,)  # v1 holds its share already and still takes it
    take_v2 = o.plan(
        UNITS, ["v1", "v2"], holdings, "v2", wanted=wanted, runs=v2.runs, others_run=v1.runs
    )
    assert take_v2.take == ()  # short of its share, but the unit is v1's to take
    # Nobody of that version lives: the unit is free for anyone.
    alone = o.plan(
        UNITS,
        ["v2"],
        {**holdings, 0: None, 1: None},
        "v2",
        wanted=wanted,
        runs=v2.runs,
        others_run=lambda _v: False,
    )
    assert alone.take == (0, 1, 3)


def test_kept_units_are_not_released_for_balance():
    holdings = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert o.plan(UNITS, ["a", "b"], holdings, "a").release == (2,)
    assert o.plan(UNITS, ["a", "b"], holdings, "a", keep=[2]).release == (1,)
    assert o.plan(UNITS, ["a", "b"], holdings, "a", keep=[0, 1, 2]) == o.Plan(share=2)


def test_a_member_is_dead_once_its_heartbeat_stays_unchanged_for_the_silence():
    silence = o.Silence(5.0)

    def beat(token: str) -> list[o.Member]:
        return [o.Member("me", beat="x"), o.Member("b", beat=token)]

    assert silence.observe(beat("1"), "me", 100.0) == set()  # first seen: given the silence
    assert silence.observe(beat("1"), "me", 104.9) == set()
    assert silence.observe(beat("1"), "me", 105.0) == {"b"}
    assert silence.is_dead("b")
    assert silence.observe(beat("2"), "me", 106.0) == set()  # it beat again: alive
    assert not silence.is_dead("b")
    # The observer stalled for a minute: the token changed meanwhile, so b is alive.
    assert silence.observe(beat("3"), "me", 166.0) == set()
    # Never the observer itself, and never a member whose heartbeat carries no token.
    assert silence.observe([o.Member("me", beat="x"), o.Member("c")], "me", 999.0) == set()


def test_a_dead_member_stays_dead_for_claims_after_its_heartbeat_is_gone():
    silence = o.Silence(5.0)
    silence.observe([o.Member("b", beat="1")], "me", 0.0)
    assert silence.observe([o.Member("b", beat="1")], "me", 6.0) == {"b"}
    assert silence.observe([], "me", 30.0) == set()  # its heartbeat expired: no member
    assert silence.is_dead("b")
    silence.observe([], "me", 30.0 + 3600)
    assert not silence.is_dead("b")  # forgotten after an hour
