"""AGENT_MCP_SERVERS: the shapes accepted, the errors naming server and field, secrets."""

from __future__ import annotations

import json

import pytest

from kernel.turn.mcp_config import McpConfigError, parse


def servers(**spec: object) -> str:
    return json.dumps({"mcpServers": spec})


def test_stdio_and_http_servers_with_their_kernel_fields() -> None:
    git, docs = parse(
        servers(
            git={
                "command": "mcp-server-git",
                "args": ["-r", "/repo"],
                "env": {"A": "b"},
                "cwd": "/srv",
                "replay": {"git_add": "unsafe"},
                "onInterrupted": "attention",
            },
            docs={
                "type": "streamable-http",
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer %DOCS_TOKEN%"},
                "timeoutS": 5,
                "taskTimeoutS": 120,
            },
        )
    )

    assert (git.transport, git.command, git.args, git.cwd) == (
        "stdio",
        "mcp-server-git",
        ("-r", "/repo"),
        "/srv",
    )
    assert (git.replay, git.on_interrupted, git.max_attempts) == (
        {"git_add": "unsafe"},
        "attention",
        3,
    )
    assert (docs.transport, docs.url, docs.timeout_s, docs.on_interrupted) == (
        "http",
        "https://mcp.example.com/mcp",
        5.0,
        "report",
    )
    assert (docs.task_timeout_s, git.task_timeout_s) == (120.0, 3600.0)


def test_an_empty_setting_is_no_server() -> None:
    assert parse("") == ()


@pytest.mark.parametrize(
    ("spec", "server", "field"),
    [
        ({"git": {"command": ""}}, "git", "command"),
        ({"git": {"command": "x", "args": ["a", 1]}}, "git", "args[1]"),
        ({"git": {"command": "x", "url": "http://a"}}, "git", None),
        ({"git": {}}, "git", None),
        ({"git": {"command": "x", "headers": {}}}, "git", "headers"),
        ({"web": {"url": "ftp://x"}}, "web", "url"),
        ({"web": {"url": "http://x", "headers": {"A": 1}}}, "web", "headers.A"),
        ({"web": {"url": "http://x", "replay": {"t": "maybe"}}}, "web", "replay.t"),
        ({"web": {"url": "http://x", "onInterrupted": "retry"}}, "web", "onInterrupted"),
        ({"web": {"url": "http://x", "timeoutS": 0}}, "web", "timeoutS"),
        ({"web": {"url": "http://x", "taskTimeoutS": "1h"}}, "web", "taskTimeoutS"),
        ({"web": {"url": "http://x", "taskTimeoutS": 1e9}}, "web", "taskTimeoutS"),
        ({"web": {"url": "http://x", "type": "stdio"}}, "web", "type"),
        ({"web": {"url": "http://x", "colour": "red"}}, "web", "colour"),
        ({"a__b": {"url": "http://x"}}, "a__b", None),
    ],
)
def test_bad_configuration_names_the_server_and_the_field(
    spec: dict[str, object], server: str, field: str | None
) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse(servers(**spec))

    assert (caught.value.server, caught.value.field) == (server, field)
    assert str(caught.value).startswith(f'AGENT_MCP_SERVERS: server "{server}":')


def test_a_text_that_is_not_the_shape_is_refused() -> None:
    with pytest.raises(McpConfigError, match="not valid JSON"):
        parse("{nope")
    with pytest.raises(McpConfigError, match="mcpServers"):
        parse('{"servers": {}}')


def test_placeholders_are_read_from_the_settings_when_reached_and_never_kept() -> None:
    [docs] = parse(
        servers(docs={"url": "http://x", "headers": {"Authorization": "Bearer %TOKEN%"}})
    )

    _env, headers = docs.resolve({"TOKEN": "s3cret"})

    assert headers == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(docs) and "s3cret" not in json.dumps(docs.describe())
    with pytest.raises(
        McpConfigError, match="headers.Authorization: the app setting TOKEN is not set"
    ):
        docs.resolve({})
