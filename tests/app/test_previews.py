"""Streamed previews end to end: a real streaming model server on loopback, a real host.

The model server answers ``stream: true`` with server-sent events: the same reply as a plain
call, its text word by word. Gates stop a stream after a given number of text chunks until the
test releases them (a real signal, not a sleep), so the test sees the preview at a known point:

* while a reply streams, the change stream (and the page) shows the text so far as a preview,
  growing; once the response is committed the entry holds the whole text and no preview is left;
* a tool's progress is written under its tool task and cleaned up by the first reader that
  finds it superseded;
* the histories and the session entity are the same with streaming on and off;
* a host killed with SIGKILL mid-stream reruns the call after its restart, a reconnecting reader
  sees the latest preview meanwhile, and the final entry appears exactly once.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kernel.common import ids
from tests.app.turn_support import (
    Held,
    ModelServer,
    _completion,
    start_turn_host,
    submit,
    view,
    wait_final,
)
from tests.browser import DevTools, browser, needs_chromium  # noqa: F401 - browser: a fixture
from tests.harness import HostProcess, store_specs, wait_for

TEXT = "please answer with a long enough sentence so the stream has several words"
ANSWER = f'You said: "{TEXT}" (13 words).'
WORDS = re.findall(r"\s*\S+", ANSWER)


class StreamingModelServer(ModelServer):
    """``ModelServer`` that streams when asked to; ``gates``: one ``{after_chunk: Held}`` per
    coming streamed request (popped in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[dict[int, Held]] = []
        self.streamed = 0

    def stop(self) -> None:
        for plan in self.gates:
            for held in plan.values():
                held.release()
        super().stop()

    async def _completions(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]
        body = await request.json()
        if not body.get("stream"):
            return await super()._completions(request)
        messages = body["messages"]
        with self._lock:
            self.requests.append({"messages": messages, "stream": True, "at": time.time()})
            plan = self.gates.pop(0) if self.gates else {}
            self.streamed += 1
        spec = (self.script(messages) if self.script else None) or {}
        reply = _completion(messages, spec, body.get("model", ""))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n, chunk in enumerate(sse_chunks(reply, body), start=1):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            held = plan.get(n)
            if held is not None:
                held.arrived.set()
                await asyncio.to_thread(held.released.wait, 60)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def sse_chunks(reply: dict[str, Any], body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The chunks of ``reply`` as an OpenAI-compatible server streams them."""
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": 0}
    head["model"] = reply["model"]
    choice = reply["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    for word in re.findall(r"\s*\S+", message.get("content") or ""):
        yield chunk({"content": word})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    yield chunk({}, choice["finish_reason"])
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**head, "choices": [], "usage": reply["usage"]}


@pytest.fixture
def model() -> Iterator[StreamingModelServer]:
    server = StreamingModelServer()
    server.start()
    yield server
    server.stop()


def host_env(model: ModelServer, tmp: Path, previews: bool = True) -> dict[str, str]:
    return {
        "AGENT_MODEL_BASE_URL": model.base_url,
        "AGENT_MODEL_NAME": "test-model",
        "AGENT_PREVIEWS": "on" if previews else "off",
        "AGENT_PREVIEW_INTERVAL_MS": "20",
        "AGENT_PREVIEW_DIR": str(tmp / "previews"),  # the file store's
        "AGENT_PREVIEW_CONTAINER": f"previews-{uuid.uuid4().hex[:12]}",  # on Azure only
        "AGENT_TOOL_LEASE_S": "0.5",
    }


@pytest.fixture(params=store_specs())
def make_host(
    request: pytest.FixtureRequest, tmp_path: Path, model: StreamingModelServer
) -> Iterator[Callable[..., HostProcess]]:
    hosts: list[HostProcess] = []

    def factory(name: str = "h", previews: bool = True) -> HostProcess:
        tmp = tmp_path / name
        tmp.mkdir()
        host = start_turn_host(request, str(request.param), tmp, host_env(model, tmp, previews))
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.kill()


def changes(host: HostProcess, session: str, query: str = "after=0") -> dict[str, Any]:
    response = host.get(f"/api/sessions/{session}/changes?{query}")
    return response.json() if response.status == 200 else {}


def model_text(page: dict[str, Any]) -> str | None:
    found = [p for p in page.get("previews", []) if p["kind"] == "model_text"]
    return found[0]["text"] if found else None


def wait_preview(host: HostProcess, session: str, text: str) -> dict[str, Any]:
    """The change answer whose model-text preview is ``text`` (long-polling on the tag)."""
    tag = ""

    def probe() -> dict[str, Any] | None:
        nonlocal tag
        page = changes(host, session, f"after=0&wait=2&previews={tag}")
        tag = page.get("previewTag", tag)
        return page if model_text(page) == text else None

    return wait_for(probe, 30, f"the preview {text!r}", interval=0)


def gates(*after: int) -> tuple[dict[int, Held], list[Held]]:
    held = [Held() for _ in after]
    return dict(zip(after, held, strict=True)), held


def round_task(session: str, sub: str, n: int = 1) -> str:
    return f"{ids.turn_instance_id(session, sub)}:run:round-{n}"


def test_streamed_text_grows_as_a_preview_then_the_entry_replaces_it(make_host, model):
    host = make_host()
    plan, (first, second) = gates(3, 8)
    model.gates.append(plan)
    sub = submit(host, "grow", TEXT)

    assert first.arrived.wait(30)
    early = wait_preview(host, "grow", "".join(WORDS[:3]))
    first.release()
    assert second.arrived.wait(30)
    later = wait_preview(host, "grow", "".join(WORDS[:8]))
    (preview,) = later["previews"]
    reconnected = changes(host, "grow")  # a new reader, no tag: sees the latest preview
    second.release()
    final = wait_final(host, "grow", sub)

    assert early["previewTag"] != later["previewTag"]
    assert preview["preview"] is True
    assert preview["task"] == round_task("grow", sub)
    assert preview["submission_id"] == sub and preview["round"] == 1
    assert model_text(reconnected) == "".join(WORDS[:8])
    assert final["status"] == "completed" and final["answer"] == ANSWER
    after = changes(host, "grow")
    assert after["previews"] == [] and after["previewTag"] == ""
    assistant = [e for e in view(host, "grow")["entries"] if e["role"] == "assistant"]
    assert [e["text"] for e in assistant] == [ANSWER]
    assert not any(e.get("preview") for e in view(host, "grow")["entries"])
    # No entry of the change log is a preview: previews are never records.
    assert all("preview" not in json.dumps(r["items"]) for r in after["changes"])


def test_the_entry_and_its_preview_never_show_together(make_host, model):
    host = make_host()
    plan, (held,) = gates(3)
    model.gates.append(plan)
    sub = submit(host, "apart", TEXT)
    seen: list[tuple[bool, str | None]] = []

    def probe() -> bool:
        page = changes(host, "apart", "after=0&previews=")
        texts = [e for r in page.get("changes", []) for e in r["items"] if e["type"] == "entry"]
        committed = any(e["role"] == "assistant" for e in texts)
        seen.append((committed, model_text(page)))
        return committed

    assert held.arrived.wait(30)
    wait_preview(host, "apart", "".join(WORDS[:3]))
    probe()  # held mid-stream: the preview shows and the entry does not
    held.release()
    wait_for(probe, 30, "the answer entry", interval=0.005)
    wait_final(host, "apart", sub)

    assert seen[0] == (False, "".join(WORDS[:3]))
    assert all(text is None for committed, text in seen if committed)


def store_of(host: HostProcess) -> Any:
    """The preview store the host's app writes to (files on SQLite, blobs on Azure)."""
    from adapters import app_state
    from adapters.previews import BlobPreviewStore, FilePreviewStore

    if "AzureWebJobsStorage" in host.env:
        connection = host.env["AzureWebJobsStorage"]
        container = app_state.container_client(connection, host.env["AGENT_PREVIEW_CONTAINER"])
        return BlobPreviewStore(container)
    return FilePreviewStore(Path(host.env["AGENT_PREVIEW_DIR"]))


def test_tool_progress_is_written_under_the_tool_task_and_cleaned_up_by_a_reader(make_host):
    host = make_host()
    sub = submit(host, "tools", "calculate 6*7")
    wait_final(host, "tools", sub)
    store = store_of(host)

    kept = {p["task"]: p for p in store.list("tools")}  # nobody followed previews yet
    progress = kept[ids.tool_task_id(sub, 1, 0)]
    page = changes(host, "tools", "after=0&previews=")

    assert progress["kind"] == "tool_progress" and progress["text"] == "running calculator"
    assert page["previews"] == []  # superseded: the tool completed
    assert store.list("tools") == []  # and the reader that found them deleted them


def test_a_bad_previews_tag_is_refused_and_changes_nothing(make_host):
    host = make_host()
    submit(host, "bad", "hello")

    response = host.get("/api/sessions/bad/changes?after=0&previews=not-a-tag")

    assert response.status == 400
    assert response.json()["field"] == "previews"


def histories(host: HostProcess, session: str, sub: str) -> dict[str, list[dict[str, Any]]]:
    turn = ids.turn_instance_id(session, sub)
    names = [turn, f"{turn}:run", f"{turn}:run:round-1", f"{turn}:run:round-2"]
    names.append(ids.tool_task_id(sub, 1, 0))
    out = {}
    for name in names:
        # The submission is final once the session commits it; the turn that asked for the
        # commit completes an episode later, so its history is read once it has ended.
        host.wait_for_status(name, timeout=30)
        status = host.status(name, "?showHistory=true&showHistoryOutput=true&showInput=true")
        assert status is not None, name
        out[name] = status["historyEvents"]
    return out


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


def masked(value: Any) -> str:
    """Times and generated ids (the run's nonce) masked: what else differs is content."""
    return _UUID.sub("<id>", _TIME.sub("<time>", json.dumps(value, sort_keys=True)))


def entity_state(host: HostProcess, session: str) -> Any:
    from tests.harness import WEBHOOK

    return host.get(f"{WEBHOOK}/entities/session/{session}").json()


def test_history_and_session_are_the_same_with_streaming_on_and_off(make_host, model):
    text = f"calculate 2+3 and then {TEXT}"
    runs = {}
    for previews in (True, False):
        host = make_host("on" if previews else "off", previews=previews)
        plan, (held,) = gates(2)
        if previews:
            model.gates += [{}, plan]  # the tool round streams through, the answer holds
        sub = submit(host, "same", text)
        if previews:
            # A preview was written mid-answer, so the comparison covers a streamed round.
            assert held.arrived.wait(30)
            wait_for(lambda h=host: model_text(changes(h, "same")), 30, "a preview of the answer")
            held.release()
        assert wait_final(host, "same", sub)["status"] == "completed"
        runs[previews] = (histories(host, "same", sub), entity_state(host, "same"))
        host.kill()
    (on_history, on_state), (off_history, off_state) = runs[True], runs[False]

    assert model.streamed == 2  # the tool round and the answer round, of the streaming host
    for name in on_history:
        assert len(on_history[name]) == len(off_history[name]), name
        assert masked(on_history[name]) == masked(off_history[name]), name
    assert masked(on_state) == masked(off_state)
    on_bytes = sum(len(json.dumps(h)) for h in on_history.values())
    off_bytes = sum(len(json.dumps(h)) for h in off_history.values())
    assert on_bytes == off_bytes


@pytest.mark.crash
def test_sigkill_mid_stream_reruns_the_call_and_the_entry_lands_once(make_host, model):
    host = make_host()
    killed_plan, (mid,) = gates(4)
    rerun_plan, (before_first,) = gates(1)
    model.gates += [killed_plan, rerun_plan]
    sub = submit(host, "crash", TEXT)
    assert mid.arrived.wait(30)
    wait_preview(host, "crash", "".join(WORDS[:4]))

    host.kill()
    mid.release()  # the killed call's stream ends with nobody reading it
    host.start()
    assert before_first.arrived.wait(60)
    reconnected = changes(host, "crash")  # the rerun holds after its first chunk
    before_first.release()
    final = wait_final(host, "crash", sub, timeout=60)

    assert model_text(reconnected) in {"".join(WORDS[:4]), WORDS[0]}
    assert final["status"] == "completed" and final["answer"] == ANSWER
    assert model.streamed == 2
    assistant = [e for e in view(host, "crash")["entries"] if e["role"] == "assistant"]
    assert [e["text"] for e in assistant] == [ANSWER]
    assert changes(host, "crash")["previews"] == []


@needs_chromium
def test_the_page_shows_the_preview_growing_then_the_entry(make_host, model, browser):  # noqa: F811
    host = make_host()
    plan, (first, second) = gates(2, 6)
    model.gates.append(plan)
    browser.open(f"{host.base_url}/api/sessions/pagestream/page")
    shown = "document.querySelector('#entries li.preview .preview-text')?.textContent ?? null"
    wait_for(
        lambda: browser.evaluate("document.body?.dataset.state ?? 'connecting'") != "connecting", 20
    )

    sub = submit(host, "pagestream", TEXT)
    assert first.arrived.wait(30)
    wait_for(lambda: browser.evaluate(shown) == "".join(WORDS[:2]), 20, "the first preview")
    first.release()
    assert second.arrived.wait(30)
    wait_for(lambda: browser.evaluate(shown) == "".join(WORDS[:6]), 20, "the preview growing")
    second.release()
    wait_final(host, "pagestream", sub)

    last = "[...document.querySelectorAll('#entries li')].map(li => li.textContent).pop()"
    wait_for(lambda: browser.evaluate(shown) is None, 20, "the preview to go")
    assert ANSWER in browser.evaluate(last)
