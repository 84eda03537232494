"""The scripted chat-completions server, spoken to with a plain HTTP client."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from actors.child.scripted_model import (
    Fail,
    Gate,
    ScriptedModel,
    Step,
    Text,
    ToolCall,
    ToolCalls,
    models_json,
)

pytestmark = pytest.mark.timeout(20)


def post(model: ScriptedModel, body: dict[str, Any]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        model.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers["Content-Type"], err.read()


def sse(raw: bytes) -> list[Any]:
    """Parse an SSE body into its data payloads; ``[DONE]`` stays a string."""
    assert raw.endswith(b"\n\n"), raw[-40:]
    payloads: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block.removeprefix("data: ")
        payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def ask(model: ScriptedModel, stream: bool = True, **extra: Any) -> tuple[int, str, bytes]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    return post(model, {**body, "stream": stream, **extra})


def test_text_step_streams_deltas_then_stop_then_usage_then_done() -> None:
    text = "The quick brown fox jumps over the lazy dog, " * 3
    with ScriptedModel([Text(text)]) as model:
        status, ctype, raw = ask(model)
    assert status == 200
    assert ctype == "text/event-stream"
    chunks = sse(raw)
    assert chunks[-1] == "[DONE]"
    usage = chunks[-2]
    assert usage["choices"] == []
    assert usage["usage"]["total_tokens"] == (
        usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
    )
    body = chunks[:-2]
    assert all(c["object"] == "chat.completion.chunk" for c in body)
    assert body[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"].get("content", "") for c in body]
    assert "".join(deltas) == text
    assert len([d for d in deltas if d]) > 1, "long text arrives in several deltas"
    assert [c["choices"][0]["finish_reason"] for c in body][-1] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in body[:-1])


def test_tool_call_steps_stream_indexed_calls_then_tool_calls_finish() -> None:
    steps: list[Step] = [
        ToolCall("bash", {"command": "echo hello"}),
        ToolCalls(
            ToolCall("read", {"path": "a.txt"}, id="call-read"),
            ToolCall("write", {"path": "b.txt", "content": "x"}),
            text="Two at once.",
        ),
    ]
    with ScriptedModel(steps) as model:
        first = sse(ask(model)[2])
        second = sse(ask(model)[2])

    calls = [tc for c in first[:-2] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls == [
        {
            "index": 0,
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": "echo hello"})},
        }
    ]
    assert first[-3]["choices"][0]["finish_reason"] == "tool_calls"

    deltas = [c["choices"][0]["delta"] for c in second[:-2]]
    assert "".join(d.get("content", "") for d in deltas) == "Two at once."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert [(tc["index"], tc["id"], tc["function"]["name"]) for tc in calls] == [
        (0, "call-read", "read"),
        (1, "call_2_1", "write"),
    ]
    assert json.loads(calls[1]["function"]["arguments"]) == {"path": "b.txt", "content": "x"}
    assert second[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_requests_are_recorded_in_order_and_exhausted_script_says_default() -> None:
    with ScriptedModel([Text("one")], default=Text("fallback")) as model:
        ask(model, tools=[{"type": "function", "function": {"name": "bash"}}])
        _, _, raw = ask(model)
        model.add_steps(Text("three"))
        _, _, raw3 = ask(model)
        seen = model.wait_for_requests(3, timeout=5)
    assert [r["tools"][0]["function"]["name"] for r in seen[:1]] == ["bash"]
    assert all(r["messages"] == [{"role": "user", "content": "hi"}] for r in seen)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(raw)[:-2])
    assert text == "fallback"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(raw3)[:-2])
    assert text == "three"


def test_default_answer_is_ok() -> None:
    with ScriptedModel() as model:
        chunks = sse(ask(model)[2])
        assert model.pending_steps == 0
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-2]) == "ok"


def test_wait_for_requests_times_out_with_a_clear_error() -> None:
    with ScriptedModel() as model, pytest.raises(TimeoutError, match="got 0"):
        model.wait_for_requests(1, timeout=0.05)


def test_non_streaming_answer() -> None:
    with ScriptedModel([ToolCall("bash", {"command": "ls"}), Text("plain")]) as model:
        status, ctype, raw = ask(model, stream=False)
        _, _, raw2 = ask(model, stream=False)
    assert (status, ctype) == (200, "application/json")
    completion = json.loads(raw)
    assert completion["object"] == "chat.completion"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "bash"
    plain = json.loads(raw2)["choices"][0]
    assert (plain["message"]["content"], plain["finish_reason"]) == ("plain", "stop")


def test_gate_holds_the_answer_until_the_event_is_set() -> None:
    gate = threading.Event()
    answered = threading.Event()
    result: list[bytes] = []
    with ScriptedModel([Gate(gate, then=Text("released"))]) as model:

        def client() -> None:
            result.append(ask(model)[2])
            answered.set()

        thread = threading.Thread(target=client)
        thread.start()
        model.wait_for_requests(1, timeout=5)  # recorded before the gate
        assert not answered.is_set()  # held: the gate is closed
        gate.set()
        assert answered.wait(5)
        thread.join(5)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(result[0])[:-2])
    assert text == "released"


def test_close_releases_a_held_gate() -> None:
    gate = threading.Event()
    statuses: list[int] = []
    model = ScriptedModel([Gate(gate)])

    def client() -> None:
        try:
            statuses.append(ask(model)[0])
        except OSError:
            statuses.append(-1)  # the connection went away with the server: also fine

    thread = threading.Thread(target=client)
    thread.start()
    model.wait_for_requests(1, timeout=5)
    model.close()
    thread.join(5)
    assert not thread.is_alive()
    assert statuses in ([504], [-1])


def test_gate_timeout_answers_504() -> None:
    with ScriptedModel([Gate(threading.Event(), timeout=0.05)]) as model:
        status, _, raw = ask(model)
    assert status == 504
    assert "gate" in json.loads(raw)["error"]["message"]


def test_fail_step_and_unknown_routes() -> None:
    with ScriptedModel([Fail(429, "slow down")]) as model:
        status, _, raw = ask(model)
        assert (status, json.loads(raw)["error"]["message"]) == (429, "slow down")
        assert post(model, {})[0] == 200  # script exhausted: default answer
        request = urllib.request.Request(model.base_url + "/embeddings", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        err.value.close()
        assert err.value.code == 404
        assert len(model.requests) == 2


def test_models_endpoint_and_models_json() -> None:
    with ScriptedModel(model="m1") as model:
        with urllib.request.urlopen(model.base_url + "/models", timeout=5) as response:
            listing = json.loads(response.read())
        assert listing["data"][0]["id"] == "m1"
        assert model.base_url == f"http://127.0.0.1:{model.port}/v1"
        config = models_json(model.base_url, provider="p", model="m1")
    provider = config["providers"]["p"]
    assert provider["baseUrl"] == model.base_url
    assert provider["api"] == "openai-completions"
    assert provider["models"][0]["id"] == "m1"
    assert provider["compat"] == {"supportsDeveloperRole": False, "supportsReasoningEffort": False}


def test_rejects_a_non_loopback_host_and_bad_steps() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedModel(host="0.0.0.0")
    with pytest.raises(TypeError):
        ScriptedModel(["not a step"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        ToolCalls()


def test_refusing_steps_answer_429_with_retry_after_529_and_500() -> None:
    steps = [
        Fail(429, "Please try again in 2s.", retry_after=2),
        Fail(529, "Overloaded"),
        Fail(500),
    ]
    with ScriptedModel(steps) as model:
        for status, message, retry_after in [
            (429, "Please try again in 2s.", "2"),
            (529, "Overloaded", None),
            (500, "scripted failure", None),
        ]:
            request = urllib.request.Request(
                model.base_url + "/chat/completions", data=b"{}", method="POST"
            )
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=5)
            with err.value:
                assert err.value.code == status
                assert err.value.headers.get("Retry-After") == retry_after
                assert json.loads(err.value.read())["error"]["message"] == message
