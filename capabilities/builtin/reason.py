"""``reason``: a question handed to a larger model behind an OpenAI-compatible endpoint.

The frontend is a small speech model; for anything that needs more knowledge or careful
thought it delegates ``reason`` with the question in words. This capability POSTs the
question, with the evidence text and recent dialogue as context, to
``<url>/chat/completions`` (llama.cpp ``llama-server``, Ollama, vLLM, or any server
speaking that shape) and answers with the model's text.

- **One user message.** The context (recent dialogue, most recent last, and the request
  as the frontend wrote it) and the question go in a single user message after the
  system prompt. The dialogue turns carry no speaker, so passing them as prior turns
  would guess roles, and several chat templates (Gemma, Mistral) refuse two user
  messages in a row.
- **Evidence.** The contract asks for ``none``: the harness still freezes and sends the
  text and the dialogue with every call; only audio and frames need asking for.
- **Time.** The wait is ``min(timeout_s, time left to the call's deadline)``, enforced
  on the whole exchange, not only per socket read.
- **Cancel.** urllib cannot abort a request in flight, so the POST runs on a short-lived
  daemon thread while the handler waits for whichever comes first: the answer, the
  cancel token or the end of the wait. A cancel ends the call at once (``CallCancelled``)
  and frees the transport's worker; the abandoned request finishes or times out on its
  own thread and its answer is dropped. The server may go on generating until then.
- **Failures** are results, never exceptions: ``unavailable`` (retryable: no connection,
  no answer in time, HTTP 408, 429 or 5xx), ``unauthorized`` (401, 403: check the key
  file), ``not_found`` (404: check the URL path and the model name), ``rejected`` (any
  other HTTP error, redirects included: the key never follows one), ``bad_response``
  (the body is not a chat completion; the message names what is missing), ``expired``.
- **Key.** ``key_file`` holds the API key on one line, mode 0600 or stricter (as the
  broker credentials); it is sent as ``Authorization: Bearer`` and never logged.
  Environment proxies are ignored: the server is reached directly.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import math
import queue
import re
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import CallCancelled, Capability, Context
from venus.capabilities.result import ToolResult
from venus.errors import CapabilityError

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions for a voice assistant, whose words are spoken aloud. Answer in "
    "a few short, plain sentences: no lists, tables, markdown, code or links. If the "
    "question needs live information you do not have (the time, the weather, a device), "
    "say so briefly."
)
MAX_QUESTION_CHARS = 4000
MAX_TEXT_CHARS = 2000  # of the evidence text (the harness's own bound)
MAX_TURNS = 8  # dialogue turns passed on, most recent kept (the harness's own bound)
MAX_RESPONSE_BYTES = 1 << 20  # a chat completion of max_tokens is far smaller
MAX_ERROR_CHARS = 200  # of a server's error message, quoted in a failure
CONTRACT_SLACK_S = 5.0  # the contract's timeout exceeds the HTTP wait: the handler answers first
FRESHNESS_S = 120.0  # an answer to a question two minutes old is still worth saying
KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: safe in a header
THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)  # a reasoning model's private preamble

CANCELLED = object()  # put on the answers queue by the cancel watcher


def reason_capability(
    url: str,
    *,
    model: str,
    key_file: Path | None = None,
    timeout_s: float = 60.0,
    max_tokens: int = 512,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
) -> Capability:
    """The ``reason`` capability for the chat endpoint under ``url`` (``.../v1``).

    CapabilityError, naming what to fix, for a bad URL, model, timeout or token count and
    for an unreadable, malformed or too open key file."""
    endpoint = chat_endpoint(url)
    if not isinstance(model, str) or not model.strip():
        raise CapabilityError("reason: model must be a model name (llama-server accepts any)")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise CapabilityError(f"reason: timeout_s must be a number of seconds, got {timeout_s!r}")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise CapabilityError(f"reason: timeout_s must be positive, got {timeout_s!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise CapabilityError(f"reason: max_tokens must be a positive integer, got {max_tokens!r}")
    key = read_key(key_file) if key_file is not None else None
    host = urlsplit(endpoint).hostname or ""
    if key is not None and endpoint.startswith("http://") and not _loopback(host):
        log.warning("reason: the API key goes to %s in clear text; use https", host)
    log.info("reason: model %s at %s%s", model, endpoint, f" (key from {key_file})" if key else "")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    def handle(ctx: Context) -> ToolResult:
        left_s = ctx.deadline_s - time.time()
        if left_s <= 0:
            return ToolResult.failed("expired", f"the deadline passed {-left_s:.1f} s ago")
        wait_s = min(float(timeout_s), left_s)
        body = {
            "model": model,
            "messages": messages(ctx.arguments["question"], ctx.evidence, system_prompt),
            "max_tokens": max_tokens,
            "stream": False,
        }
        request = urllib.request.Request(
            endpoint, json.dumps(body).encode(), headers=headers, method="POST"
        )
        ctx.progress(None, f"asking {model}")
        started = time.monotonic()
        answers: queue.Queue[ToolResult | object] = queue.Queue()
        _thread(lambda: answers.put(exchange(opener, request, wait_s, model)), ctx.item_id)
        _thread(lambda: _watch(ctx.cancelled, wait_s, answers), ctx.item_id)
        try:
            answer = answers.get(timeout=wait_s)
        except queue.Empty:
            answer = _no_answer(endpoint, wait_s)
        if answer is CANCELLED:
            raise CallCancelled("cancelled while the model was answering")
        assert isinstance(answer, ToolResult)
        elapsed_s = time.monotonic() - started
        if answer.error is not None:
            log.info("reason: %s after %.1f s: %s", answer.error.code, elapsed_s, answer.text())
        else:
            log.debug("reason: answered in %.1f s", elapsed_s)
        return answer

    return Capability(_contract(float(timeout_s)), handle)


# --- configuration ------------------------------------------------------------------------
def chat_endpoint(url: str) -> str:
    """``<url>/chat/completions`` for a base URL such as ``http://127.0.0.1:8080/v1``."""
    example = "such as http://127.0.0.1:8080/v1"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except (ValueError, TypeError, AttributeError) as e:
        raise CapabilityError(f"reason: url {url!r} is not a URL; give one {example}") from e
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CapabilityError(f"reason: url {url!r} must be an http(s) URL, {example}")
    if parts.username or parts.password:
        raise CapabilityError("reason: url must not hold credentials; put the key in key_file")
    if parts.query or parts.fragment:
        raise CapabilityError(f"reason: url {url!r} must have no query or fragment; {example}")
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        raise CapabilityError(
            f"reason: url {url!r}: give the base URL (ending in /v1), not the endpoint"
        )
    return f"{parts.scheme}://{parts.netloc}{path}/chat/completions"


def read_key(path: Path) -> str:
    """The API key from ``path``: alone on one line, the file readable by its owner only."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CapabilityError(f"API key file {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise CapabilityError(f"API key file {path} is not UTF-8 text") from e
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CapabilityError(
            f"API key file {path} is open to other users (mode {stat.S_IMODE(mode):o}); "
            f"run chmod 600 {path}"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or not KEY.fullmatch(lines[0]):
        raise CapabilityError(
            f"API key file {path}: put the key alone on one line (printable ASCII, no spaces)"
        )
    return lines[0]


def _contract(timeout_s: float) -> Contract:
    return Contract(
        name="reason",
        title="Reason",
        description=(
            "Ask a larger language model to think a question through: explanations, "
            "advice, planning, comparisons, definitions, or anything needing more "
            "knowledge or care than a quick reply. Put the whole question in plain words, "
            "with the facts it depends on; the recent conversation goes along. It has no "
            "live data (time, weather, devices): use the other tools for those. The "
            "answer is a few sentences to say."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUESTION_CHARS,
                    "description": "the question, complete and self-contained",
                }
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": "the model's answer"},
                "model": {"type": "string", "description": "the model that answered"},
                "usage": {
                    "type": "object",
                    "description": "token counts, when the server gives them",
                    "additionalProperties": {"type": "integer"},
                },
            },
            "required": ["answer", "model"],
        },
        annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": True},
        timeout_s=timeout_s + CONTRACT_SLACK_S,
        # a long configured timeout must not be cut short by the deadline (capture + this)
        freshness_s=max(FRESHNESS_S, timeout_s + CONTRACT_SLACK_S),
        evidence="none",  # the text and the dialogue come with every call
        idempotent=True,
        cancellable=True,
        deliver="when_idle",
    )


# --- the request --------------------------------------------------------------------------
def messages(
    question: str, evidence: Mapping[str, Any], system_prompt: str
) -> list[dict[str, str]]:
    """The chat: the system prompt, then one user message with the context and question."""
    parts: list[str] = []
    dialogue = evidence.get("dialogue")
    listed = dialogue if isinstance(dialogue, list | tuple) else ()
    turns = [t for t in listed if isinstance(t, str) and t.strip()]
    if turns:
        said = "\n".join(f"- {t.strip()}" for t in turns[-MAX_TURNS:])
        parts.append(f"Recent conversation, most recent last:\n{said}")
    text = evidence.get("text")
    if isinstance(text, str) and text.strip() and text.strip() != question.strip():
        parts.append(f"The request as the voice assistant wrote it:\n{text[:MAX_TEXT_CHARS]}")
    parts.append(f"Question: {question}" if parts else question)
    out = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*out, {"role": "user", "content": "\n\n".join(parts)}]


# --- the exchange (on its own thread) -----------------------------------------------------
def exchange(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    wait_s: float,
    model: str,
) -> ToolResult:
    """POST ``request`` and read the answer; every failure becomes a failed result."""
    # urllib, not an HTTP client library: one POST, and no new dependency on the Jetson
    endpoint = request.full_url
    try:
        with opener.open(request, timeout=wait_s) as response:
            data = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        return _http_failure(endpoint, e)
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            return _no_answer(endpoint, wait_s)
        return _unreachable(endpoint, e.reason)
    except TimeoutError:
        return _no_answer(endpoint, wait_s)
    except (OSError, http.client.HTTPException) as e:  # reset, closed mid-answer, garbled
        return _unreachable(endpoint, e)
    except Exception as e:  # this thread's last stop: the handler waits for a result
        log.warning("reason: the request to %s failed", endpoint, exc_info=True)
        return ToolResult.failed("error", f"{type(e).__name__}: {e}")
    if len(data) > MAX_RESPONSE_BYTES:
        return _bad(endpoint, f"the response is over {MAX_RESPONSE_BYTES} bytes")
    return parse_completion(endpoint, data, model)


def parse_completion(endpoint: str, data: bytes, model: str) -> ToolResult:
    """The answer in a chat completion body, or ``bad_response`` naming what is missing."""
    try:
        doc = json.loads(data)
    except ValueError:  # UnicodeDecodeError included
        return _bad(endpoint, f"the response is not JSON: {_snippet(_text(data))!r}")
    if not isinstance(doc, dict):
        return _bad(endpoint, "the response is not a JSON object")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return _bad(endpoint, "the response has no choices")
    choice = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        return _bad(endpoint, "the response has no choices[0].message.content text")
    answer = THINK.sub("", content).strip()
    if not answer:
        out_of_tokens = choice.get("finish_reason") == "length"
        why = " (it ran out of tokens: raise max_tokens)" if out_of_tokens else ""
        return _bad(endpoint, f"the model's answer is empty{why}")
    named = doc.get("model")
    structured: dict[str, Any] = {
        "answer": answer,
        "model": named if isinstance(named, str) and named else model,
    }
    usage = doc.get("usage")
    if isinstance(usage, dict):
        counts = {k: v for k, v in usage.items() if type(v) is int}
        structured["usage"] = counts
    return ToolResult.ok(answer, structured)


def _http_failure(endpoint: str, e: urllib.error.HTTPError) -> ToolResult:
    said = _server_message(e)
    status = f"{endpoint} answered HTTP {e.code}" + (f" ({said})" if said else "")
    if e.code in (401, 403):
        return ToolResult.failed("unauthorized", f"{status}; check the API key file")
    if e.code == 404:
        return ToolResult.failed(
            "not_found", f"{status}; check the URL (it usually ends in /v1) and the model name"
        )
    if e.code in (408, 429) or e.code >= 500:
        return ToolResult.failed("unavailable", f"{status}; try again shortly", retryable=True)
    if 300 <= e.code < 400:
        where = e.headers.get("Location", "elsewhere") if e.headers else "elsewhere"
        return ToolResult.failed(
            "rejected", f"{status}: redirected to {where}; configure the final URL"
        )
    return ToolResult.failed("rejected", status)


def _server_message(e: urllib.error.HTTPError) -> str:
    """The error the server gave, short: OpenAI's ``{"error": {"message"}}`` or its text."""
    try:
        data = e.read(MAX_RESPONSE_BYTES)
    except Exception:  # a body cut short or timed out: the status alone says enough
        return ""
    try:
        doc = json.loads(data)
    except ValueError:
        return _snippet(_text(data))
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return _snippet(error if isinstance(error, str) else _text(data))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _snippet(text: str) -> str:
    """``text`` on one line, cut to ``MAX_ERROR_CHARS``."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _no_answer(endpoint: str, wait_s: float) -> ToolResult:
    message = f"no answer from {endpoint} within {wait_s:.1f} s"
    return ToolResult.failed("unavailable", message, retryable=True)


def _unreachable(endpoint: str, reason: object) -> ToolResult:
    message = f"cannot reach {endpoint}: {reason}; is the model server running?"
    return ToolResult.failed("unavailable", message, retryable=True)


def _bad(endpoint: str, what: str) -> ToolResult:
    return ToolResult.failed("bad_response", f"{endpoint}: {what}")


def _watch(
    cancelled: threading.Event, wait_s: float, answers: queue.Queue[ToolResult | object]
) -> None:
    """Put ``CANCELLED`` on ``answers`` if a cancel comes within ``wait_s``."""
    if cancelled.wait(wait_s):
        answers.put(CANCELLED)


def _thread(target: Callable[[], object], item_id: str) -> None:
    """A daemon thread: one that outlives its call never holds the process."""
    threading.Thread(target=target, name=f"venus-reason-{item_id[:8]}", daemon=True).start()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects become HTTP errors: the API key is never sent on to another URL."""

    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None
