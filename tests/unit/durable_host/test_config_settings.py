"""host.json app-setting references (``%Name%``) and the script root the app sees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable_host.functions import config


def test_a_hub_name_reference_is_resolved_from_the_app_settings(tmp_path: Path) -> None:
    data = {
        "extensions": {"durableTask": {"hubName": "%TASKHUB_NAME%", "defaultVersion": "v%V%.0"}}
    }

    cfg = config.parse_host_json(tmp_path, data, {"TASKHUB_NAME": "OrdersHub", "V": "2"})

    assert cfg.hub_name == "OrdersHub" and cfg.default_version == "v2.0"


def test_a_reference_to_a_missing_setting_is_a_startup_error_naming_it(tmp_path: Path) -> None:
    data = {"extensions": {"durableTask": {"hubName": "%TASKHUB_NAME%"}}}

    with pytest.raises(config.ConfigError, match="%TASKHUB_NAME%.*not set"):
        config.parse_host_json(tmp_path, data, {})


def test_text_without_a_reference_is_kept(tmp_path: Path) -> None:
    data = {"extensions": {"durableTask": {"hubName": "Hub50", "defaultVersion": "50% done"}}}

    assert config.parse_host_json(tmp_path, data, {}).default_version == "50% done"


def test_load_reads_local_settings_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "host.json").write_text(
        '{"extensions": {"durableTask": {"hubName": "%HUB_FOR_TEST%"}}}'
    )
    (tmp_path / "local.settings.json").write_text(
        '{"Values": {"HUB_FOR_TEST": "FromLocalSettings"}}'
    )
    monkeypatch.setenv("HUB_FOR_TEST", "registered, so the undo removes what the test adds")
    monkeypatch.delenv("HUB_FOR_TEST")

    config.apply_local_settings(tmp_path)

    assert config.load(tmp_path).hub_name == "FromLocalSettings"


def test_the_script_root_is_the_app_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.SCRIPT_ROOT, "/somewhere/else")

    config.set_script_root(tmp_path)

    assert os.environ[config.SCRIPT_ROOT] == str(tmp_path.resolve())
