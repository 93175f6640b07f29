"""Incremental replay is on unless host.json's extendedSessionsEnabled is false (or the app
setting the Functions host maps onto it says so); DURABLE_HOST_SESSIONS overrides it either
way, 0 turning it off."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_host.core import sessions
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader
from durable_host.functions.config import ConfigError
from durable_host.store.sqlite.store import SqliteStore

APP = Path(__file__).resolve().parents[2] / "apps" / "parity"


@pytest.mark.parametrize(
    ("setting", "env", "expected"),
    [
        (None, None, True),
        (True, None, True),
        ("true", None, True),
        (False, None, False),
        ("FALSE", None, False),
        (True, "0", False),
        (None, "0", False),
        (False, "1", True),
    ],
)
def test_extended_sessions_setting(tmp_path, monkeypatch, setting, env, expected):
    durable = {} if setting is None else {"extendedSessionsEnabled": setting}
    config = config_mod.parse_host_json(tmp_path, {"extensions": {"durableTask": durable}})
    assert config.extended_sessions is (setting not in (False, "FALSE"))
    if env is None:
        monkeypatch.delenv("DURABLE_HOST_SESSIONS", raising=False)
    else:
        monkeypatch.setenv("DURABLE_HOST_SESSIONS", env)
    engine = Engine(loader.load_app(APP), SqliteStore(tmp_path / "t.db"), config, fast_replay=True)
    assert engine.sessions is expected


@pytest.mark.parametrize(
    ("setting", "app_setting", "expected"),
    [(None, "true", True), (True, "false", False), (True, None, True), (None, "True", True)],
)
def test_the_app_setting_overrides_host_json(tmp_path, setting, app_setting, expected):
    durable = {} if setting is None else {"extendedSessionsEnabled": setting}
    settings = (
        {}
        if app_setting is None
        else {
            "AzureFunctionsJobHost__extensions__durableTask__extendedSessionsEnabled": app_setting
        }
    )
    config = config_mod.parse_host_json(
        tmp_path, {"extensions": {"durableTask": durable}}, settings
    )
    assert config.extended_sessions is expected


@pytest.mark.parametrize(
    ("setting", "app_setting", "named"),
    [
        ("yes", None, "extensions.durableTask.extendedSessionsEnabled"),
        (1, None, "extensions.durableTask.extendedSessionsEnabled"),
        (None, "on", "AzureFunctionsJobHost__extensions__durableTask__extendedSessionsEnabled"),
    ],
)
def test_a_setting_that_is_not_a_boolean_is_refused_naming_it(
    tmp_path, setting, app_setting, named
):
    durable = {} if setting is None else {"extendedSessionsEnabled": setting}
    settings = (
        {}
        if app_setting is None
        else {
            "AzureFunctionsJobHost__extensions__durableTask__extendedSessionsEnabled": app_setting
        }
    )
    with pytest.raises(config_mod.ConfigError, match=named):
        config_mod.parse_host_json(tmp_path, {"extensions": {"durableTask": durable}}, settings)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, sessions.VERIFY_DOUBLING), ("doubling", sessions.VERIFY_DOUBLING), ("0", 0), ("7", 7)],
)
def test_the_full_replay_schedule_is_doubling_unless_a_count_is_given(
    tmp_path, monkeypatch, value, expected
):
    if value is None:
        monkeypatch.delenv("DURABLE_HOST_SESSION_VERIFY", raising=False)
    else:
        monkeypatch.setenv("DURABLE_HOST_SESSION_VERIFY", value)
    config = config_mod.parse_host_json(tmp_path, {})
    engine = Engine(loader.load_app(APP), SqliteStore(tmp_path / "t.db"), config, fast_replay=True)
    assert engine.session_verify == expected


@pytest.mark.parametrize("value", ["-1", "every tenth", "2.5", "halving"])
def test_a_full_replay_schedule_that_is_not_readable_is_refused_naming_it(
    tmp_path, monkeypatch, value
):
    monkeypatch.setenv("DURABLE_HOST_SESSION_VERIFY", value)
    config = config_mod.parse_host_json(tmp_path, {})
    with pytest.raises(ConfigError, match="DURABLE_HOST_SESSION_VERIFY=.*'doubling'"):
        Engine(loader.load_app(APP), SqliteStore(tmp_path / "t.db"), config, fast_replay=True)
