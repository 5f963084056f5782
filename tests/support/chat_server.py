"""A local OpenAI-compatible chat server for tests: records every request and answers
each one as the test said (a completion, an HTTP error, garbage, or late)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT_S = 5.0  # for the server thread to end at stop
POLL_S = 0.05  # how often serve_forever looks for shutdown (its default, 0.5 s, slows teardown)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late (cut short when the server stops)


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # the JSON body, or None when it was not JSON


def completion(
    text: str, model: str = "served-model", finish_reason: str = "stop", **extra: Any
) -> Reply:
    """A chat completion answering ``text``, in the OpenAI shape."""
    doc = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        **extra,
    }
    return json_reply(200, doc)


def json_reply(status: int, doc: object, delay_s: float = 0.0) -> Reply:
    return Reply(status, json.dumps(doc).encode(), {"Content-Type": "application/json"}, delay_s)


class ChatServer:
    """``ThreadingHTTPServer`` on 127.0.0.1 at a free port, serving on its own thread."""

    def __init__(self) -> None:
        self.reply = completion("Forty-two.")
        self.seen: list[Seen] = []
        self.stopping = threading.Event()  # ends every delayed answer at once
        self.received = threading.Event()  # set by each request, as it arrives
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.seen.append(Seen("POST", self.path, headers, body))
                server.received.set()
                reply = server.reply
                if reply.delay_s:
                    server.stopping.wait(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:  # the client gave up waiting
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(POLL_S,), name="chat-server"
        )

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(WAIT_S)
