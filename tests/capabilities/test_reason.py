"""The ``reason`` built-in against a real local chat server, through the in-process
transport as the daemon runs it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, Reply, completion, json_reply
from support.inprocess import Recorder, request

from venus.capabilities.builtin.reason import (
    CONTRACT_SLACK_S,
    DEFAULT_SYSTEM_PROMPT,
    MAX_TURNS,
    chat_endpoint,
    messages,
    parse_completion,
    reason_capability,
)
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import Finished, Progress
from venus.errors import CapabilityError

KEY = "sk-test-0123456789"
QUESTION = "Why is the sky blue?"
EVIDENCE = {
    "sha256": "0" * 64,
    "text": '{"name": "reason", "arguments": {"question": "sky?"}}',
    "dialogue": ["It is sunny in Paris today.", "The sky looks very blue."],
    "audio": None,
    "frame": None,
}
FAST_S = 3.0  # generous bound on a failure that must come well before the timeout


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer().start()
    yield s
    s.stop()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "reason.key"
    path.write_text(f"{KEY}\n")
    path.chmod(0o600)
    return path


def ask(
    make: Callable[..., InProcessTransport],
    recorder: Recorder,
    capability: Capability,
    question: str = QUESTION,
    **kw: Any,
) -> Finished:
    t = make(capability)
    t.call(request("r1", "reason", arguments={"question": question}, **kw))
    return recorder.finished("r1")


def error_of(final: Finished) -> tuple[str, bool, str]:
    assert final.status == "failed", final
    error = final.result.error
    assert error is not None
    return error.code, error.retryable, error.message


# --- the contract and the configuration ----------------------------------------------------
def test_the_contract() -> None:
    contract = reason_capability("http://127.0.0.1:8080/v1", model="m", timeout_s=30).contract
    assert contract.name == "reason" and contract.title and "question" in contract.description
    assert contract.timeout_s == 30 + CONTRACT_SLACK_S and contract.freshness_s == 120.0
    assert contract.evidence == "none" and contract.deliver == "when_idle"
    assert contract.idempotent and contract.cancellable
    assert contract.annotations["readOnlyHint"] and contract.annotations["openWorldHint"]
    assert contract.input_schema["required"] == ["question"]
    assert contract.input_schema["additionalProperties"] is False
    assert Contract.from_tool(contract.to_tool()) == contract
    long = reason_capability("http://127.0.0.1:8080/v1", model="m", timeout_s=300).contract
    assert long.freshness_s >= long.timeout_s  # the deadline does not cut a long wait short


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/chat/completions"),
        ("http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434/v1/chat/completions"),
        ("https://llm.example.org", "https://llm.example.org/chat/completions"),
    ],
)
def test_the_endpoint(url: str, endpoint: str) -> None:
    assert chat_endpoint(url) == endpoint


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://127.0.0.1/v1", "http(s) URL"),
        ("127.0.0.1:8080/v1", "http(s) URL"),
        ("http:///v1", "http(s) URL"),
        ("http://127.0.0.1:99999/v1", "not a URL"),
        ("http://user:secret@127.0.0.1/v1", "key_file"),
        ("http://127.0.0.1/v1?x=1", "no query"),
        ("http://127.0.0.1:8080/v1/chat/completions", "base URL"),
    ],
)
def test_bad_urls_are_refused(url: str, expected: str) -> None:
    with pytest.raises(CapabilityError, match=r"reason: .*") as e:
        reason_capability(url, model="m")
    assert expected in str(e.value)
    assert "secret" not in str(e.value)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"model": ""}, "model"),
        ({"model": "m", "timeout_s": 0}, "timeout_s"),
        ({"model": "m", "timeout_s": float("inf")}, "timeout_s"),
        ({"model": "m", "max_tokens": 0}, "max_tokens"),
    ],
)
def test_bad_settings_are_refused(kw: dict[str, Any], expected: str) -> None:
    with pytest.raises(CapabilityError, match=expected):
        reason_capability("http://127.0.0.1:8080/v1", **kw)


def test_a_key_file_open_to_others_is_refused(key_file: Path) -> None:
    key_file.chmod(0o644)
    with pytest.raises(CapabilityError, match="open to other users") as e:
        reason_capability("http://127.0.0.1:8080/v1", model="m", key_file=key_file)
    assert f"chmod 600 {key_file}" in str(e.value) and KEY not in str(e.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(f"{KEY}\nsecond\n", "one line"), (f"{KEY} more\n", "no spaces"), ("\n", "one line")],
)
def test_a_malformed_key_file_is_refused(key_file: Path, text: str, expected: str) -> None:
    key_file.write_text(text)
    with pytest.raises(CapabilityError, match=expected) as e:
        reason_capability("http://127.0.0.1:8080/v1", model="m", key_file=key_file)
    assert str(key_file) in str(e.value) and KEY not in str(e.value)


def test_a_missing_key_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.key"
    with pytest.raises(CapabilityError, match=f"API key file {missing}: No such file"):
        reason_capability("http://127.0.0.1:8080/v1", model="m", key_file=missing)


# --- calls ---------------------------------------------------------------------------------
def test_an_answer(
    make: Callable[..., InProcessTransport],
    recorder: Recorder,
    server: ChatServer,
    key_file: Path,
) -> None:
    usage = {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}
    server.reply = completion("Rayleigh scattering.", model="qwen3-8b", usage=usage)
    capability = reason_capability(server.url, model="local", key_file=key_file, max_tokens=99)
    final = ask(make, recorder, capability, evidence=EVIDENCE)
    assert final.status == "completed", final
    assert final.result.text() == "Rayleigh scattering."
    assert final.result.structured == {
        "answer": "Rayleigh scattering.",
        "model": "qwen3-8b",
        "usage": usage,
    }
    assert any(isinstance(e, Progress) for e in recorder.of("r1"))
    (seen,) = server.seen
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    body = seen.body
    assert (body["model"], body["max_tokens"], body["stream"]) == ("local", 99, False)
    system, user = body["messages"]
    assert system == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert user["role"] == "user" and user["content"].endswith(f"Question: {QUESTION}")
    for said in (EVIDENCE["text"], *EVIDENCE["dialogue"]):
        assert said in user["content"]


@pytest.mark.parametrize("slash", ["", "/"])
def test_no_key_no_authorization(
    make: Callable[..., InProcessTransport],
    recorder: Recorder,
    server: ChatServer,
    slash: str,
) -> None:
    server.reply = completion("Yes.")
    final = ask(make, recorder, reason_capability(server.url + slash, model="llama3.2"))
    assert final.status == "completed" and final.result.text() == "Yes."
    (seen,) = server.seen
    assert seen.path == "/v1/chat/completions" and "authorization" not in seen.headers
    assert seen.body["messages"][-1] == {"role": "user", "content": QUESTION}  # no evidence


@pytest.mark.parametrize(
    ("reply", "code", "retryable", "expected"),
    [
        (json_reply(401, {"error": {"message": "Invalid API Key"}}), "unauthorized", False, "key"),
        (json_reply(403, {"error": "forbidden"}), "unauthorized", False, "check the API key file"),
        (json_reply(404, {"error": "model 'x' not found"}), "not_found", False, "/v1"),
        (Reply(500, b"boom"), "unavailable", True, "HTTP 500 (boom)"),
        (json_reply(503, {"error": {"message": "Loading model"}}), "unavailable", True, "Loading"),
        (json_reply(429, {"error": {"message": "slow down"}}), "unavailable", True, "HTTP 429"),
        (json_reply(400, {"error": {"message": "context too long"}}), "rejected", False, "too"),
        (Reply(302, b"", {"Location": "http://elsewhere/v1"}), "rejected", False, "elsewhere"),
        (Reply(200, b"<html>hello</html>"), "bad_response", False, "not JSON"),
        (json_reply(200, {"object": "chat.completion"}), "bad_response", False, "no choices"),
        (
            json_reply(200, {"choices": [{"message": {"role": "assistant"}}]}),
            "bad_response",
            False,
            "choices[0].message.content",
        ),
        (completion("", finish_reason="length"), "bad_response", False, "raise max_tokens"),
    ],
)
def test_failures(
    make: Callable[..., InProcessTransport],
    recorder: Recorder,
    server: ChatServer,
    key_file: Path,
    reply: Reply,
    code: str,
    retryable: bool,
    expected: str,
) -> None:
    server.reply = reply
    final = ask(make, recorder, reason_capability(server.url, model="m", key_file=key_file))
    got_code, got_retryable, message = error_of(final)
    assert (got_code, got_retryable) == (code, retryable), message
    assert expected in message and KEY not in message
    assert len(server.seen) == 1  # a redirect is not followed: the key stays here


def test_nobody_listening(make: Callable[..., InProcessTransport], recorder: Recorder) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free again once closed: nothing listens there
    final = ask(make, recorder, reason_capability(f"http://127.0.0.1:{port}/v1", model="m"))
    code, retryable, message = error_of(final)
    assert (code, retryable) == ("unavailable", True) and "cannot reach" in message


def test_a_slow_server_times_out(
    make: Callable[..., InProcessTransport], recorder: Recorder, server: ChatServer
) -> None:
    server.reply = Reply(200, b"{}", delay_s=30.0)
    started = time.monotonic()
    final = ask(make, recorder, reason_capability(server.url, model="m", timeout_s=0.5))
    assert time.monotonic() - started < FAST_S
    code, retryable, message = error_of(final)
    assert (code, retryable) == ("unavailable", True) and "within 0.5 s" in message


def test_the_deadline_shortens_the_wait(
    make: Callable[..., InProcessTransport], recorder: Recorder, server: ChatServer
) -> None:
    server.reply = Reply(200, b"{}", delay_s=30.0)
    capability = reason_capability(server.url, model="m", timeout_s=60.0)
    started = time.monotonic()
    final = ask(make, recorder, capability, deadline_s=time.time() + 0.5)
    assert time.monotonic() - started < FAST_S
    assert error_of(final)[:2] == ("unavailable", True)


def test_a_passed_deadline_expires(server: ChatServer) -> None:
    arguments = {"question": QUESTION}
    late = request("r1", "reason", arguments=arguments, deadline_s=time.time() - 1)
    context = Context(late, arguments, threading.Event(), lambda p, m: None)
    result = reason_capability(server.url, model="m").handler(context)
    assert isinstance(result, ToolResult) and result.error is not None
    assert result.error.code == "expired" and server.seen == []


def test_a_cancel_ends_the_wait(
    make: Callable[..., InProcessTransport], recorder: Recorder, server: ChatServer
) -> None:
    server.reply = Reply(200, b"{}", delay_s=30.0)
    t = make(reason_capability(server.url, model="m"))
    t.call(request("r1", "reason", arguments={"question": QUESTION}))
    assert server.received.wait(FAST_S)  # the request is at the server, waiting
    started = time.monotonic()
    t.cancel("r1", "never mind")
    final = recorder.finished("r1")
    assert time.monotonic() - started < FAST_S
    assert final == Finished("r1", "cancelled", ToolResult.failed("cancelled", "never mind"))


# --- the pieces ----------------------------------------------------------------------------
def test_the_messages() -> None:
    turns = [f"turn {i}" for i in range(MAX_TURNS + 3)]
    system, user = messages("What now?", {"dialogue": turns, "text": "What now?"}, "Be brief.")
    assert system == {"role": "system", "content": "Be brief."}
    content = user["content"]
    assert "turn 2\n" not in content and f"- turn {MAX_TURNS + 2}" in content  # the last ones
    assert "wrote it" not in content  # the text only repeated the question
    assert content.endswith("Question: What now?")
    assert messages("Hi?", {"dialogue": "not a list", "text": 5}, "") == [
        {"role": "user", "content": "Hi?"}
    ]


def test_a_reasoning_preamble_is_dropped() -> None:
    body = completion("<think>\nHmm, let me see.\n</think>\n\nBlue light scatters more.").body
    result = parse_completion("http://x/v1/chat/completions", body, "fallback")
    assert result.text() == "Blue light scatters more."
    assert result.structured == {"answer": "Blue light scatters more.", "model": "served-model"}
