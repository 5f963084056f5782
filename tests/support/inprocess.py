"""Helpers for the in-process transport's tests: an event recorder, a held handler, an
echo capability and call requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context
from venus.capabilities.transport import CallRequest, Finished, TransportEvent

WAIT_S = 5.0  # every wait has a timeout; a pass never comes near it

ECHO = Contract(
    name="echo",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"echo": {"type": "string"}},
        "required": ["echo"],
    },
)


class Recorder:
    """An ``on_event`` sink that lets a test wait for an item's ``Finished``."""

    def __init__(self) -> None:
        self.events: list[TransportEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: TransportEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def of(self, item_id: str) -> list[TransportEvent]:
        with self._changed:
            return [e for e in self.events if getattr(e, "item_id", None) == item_id]

    def finished(self, item_id: str) -> Finished:
        with self._changed:
            ok = self._changed.wait_for(lambda: self._final(item_id) is not None, WAIT_S)
            assert ok, f"no Finished for {item_id} within {WAIT_S} s: {self.events}"
            final = self._final(item_id)
        assert final is not None
        return final

    def _final(self, item_id: str) -> Finished | None:
        return next(
            (e for e in self.events if isinstance(e, Finished) and e.item_id == item_id), None
        )


class Gate:
    """A handler held until ``release``; ``started`` says it is running."""

    def __init__(self, result: Any = "done", honour_cancel: bool = False) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.result = result
        self.honour_cancel = honour_cancel
        self.seen_token = False

    def __call__(self, ctx: Context) -> Any:
        self.started.set()
        if self.honour_cancel:
            assert ctx.cancelled.wait(WAIT_S), "the cancel token was never set"
            self.seen_token = True
            ctx.check_cancelled()
        assert self.release.wait(WAIT_S), "the test never released the handler"
        return self.result


def echo(ctx: Context) -> Mapping[str, Any]:
    ctx.progress(0.5, "half way")
    return {"echo": ctx.arguments["text"]}


def cap(name: str, handler: Callable[[Context], Any], **contract: Any) -> Capability:
    return Capability(Contract(name=name, **contract), handler)


def request(item_id: str = "i1", capability: str = "echo", **kw: Any) -> CallRequest:
    kw.setdefault("arguments", {"text": "hi"} if capability == "echo" else {})
    kw.setdefault("deadline_s", time.time() + 60)
    return CallRequest(item_id, capability, session_id="s1", site_id="kitchen", attempt=1, **kw)
