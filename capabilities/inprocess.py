"""Capabilities that live in the daemon's own process, behind the ``Transport`` protocol.

A ``Capability`` is a contract and a handler. ``InProcessTransport.call`` checks the
arguments against the contract's input schema, answers ``Accepted``, runs the handler on
one of its worker threads and answers one ``Finished`` with the normalized result (a
returned mapping is structured content, a string is text, ``None`` is an empty success).

Exactly one ``Finished`` per item id. Each call is a ``_Call`` whose phase moves, under
the transport's lock, ``PENDING`` (``call`` is checking it and answering ``Accepted``)
-> ``QUEUED`` (waiting for a worker) -> ``RUNNING`` (the handler runs) -> ``DONE``; the
thread that moves it to ``DONE`` emits ``Finished``, after releasing the lock (so
``on_event`` may call back into the transport). The races:

- cancel while ``PENDING``: recorded; ``call`` answers cancelled right after
  ``Accepted``, so ``Accepted`` never follows ``Finished``.
- cancel while ``QUEUED``: answered cancelled at once, on the canceller's thread; the
  handler never runs.
- cancel while ``RUNNING``: the context's ``cancelled`` token is set and the call ends
  when the handler returns. Cancel wins if it was asked before the worker recorded the
  handler's return: the result is then dropped and the answer is cancelled. A contract
  with ``cancellable=False`` runs to its end: once its handler has started, a cancel is
  logged and ignored.
- cancel after ``Finished``, or for an unknown id: ignored.
- ``call`` with an item id already in flight: logged and ignored (answering it would be a
  second ``Finished`` for that id).

``stop`` answers queued calls cancelled, sets the token of running ones and waits for
the workers; a handler still running when the wait ends is answered then (cancelled, or
failed ``provider_lost`` if it could not be cancelled) and its result dropped. Timeouts
are the harness's job: the transport only refuses to start a call whose deadline passed.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import validators  # type: ignore[import-untyped]

from venus.capabilities.contract import Contract
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import (
    Accepted,
    CallRequest,
    EventSink,
    FinalStatus,
    Finished,
    Progress,
    TransportEvent,
)
from venus.errors import CapabilityError

log = logging.getLogger(__name__)

STOPPED = "the in-process capabilities were stopped"
MAX_SCHEMA_ERRORS = 3  # validation errors quoted in one message


class CallCancelled(Exception):
    """Raised by ``Context.check_cancelled`` (or by a handler) to end a cancelled call."""


class RetryableError(Exception):
    """A handler's failure worth retrying (a busy service, a dropped connection): the call
    fails with code ``error``, retryable, and this exception's text as the message."""


class Context:
    """What a handler gets: the request, a progress reporter and the cancel token."""

    def __init__(
        self,
        request: CallRequest,
        arguments: Mapping[str, Any],
        cancelled: threading.Event,
        report: Callable[[float | None, str], None],
    ) -> None:
        self.item_id = request.item_id
        self.arguments = arguments  # a private copy, checked against the input schema
        self.evidence = request.evidence
        self.deadline_s = request.deadline_s  # time.time() after which the result is useless
        self.attempt = request.attempt  # 1 for the first dispatch
        self.session_id = request.session_id
        self.site_id = request.site_id
        self.cancelled = cancelled  # set when a cancel was asked
        self._report = report

    def progress(self, progress: float | None, message: str = "") -> None:
        """Emit ``Progress`` (``progress`` in 0..1 when known)."""
        if progress is not None and not 0.0 <= progress <= 1.0:
            raise ValueError(f"progress {progress!r} is outside 0..1")
        self._report(progress, message)

    def check_cancelled(self) -> None:
        """Raise ``CallCancelled`` if a cancel was asked; call it between steps."""
        if self.cancelled.is_set():
            raise CallCancelled("cancelled")


Handler = Callable[[Context], ToolResult | Mapping[str, Any] | str | None]


@dataclass(frozen=True)
class Capability:
    contract: Contract
    handler: Handler


@dataclass(frozen=True)
class _Entry:
    capability: Capability
    inputs: Any  # a jsonschema validator for the input schema
    outputs: Any | None  # and for the output schema, when there is one


class _Phase(enum.Enum):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


@dataclass(eq=False)
class _Call:
    request: CallRequest
    entry: _Entry | None  # None: no such capability
    token: threading.Event = field(default_factory=threading.Event)
    phase: _Phase = _Phase.PENDING
    cancel_reason: str | None = None  # the first cancel's reason


class InProcessTransport:
    name = "in-process"

    def __init__(
        self,
        capabilities: Sequence[Capability],
        max_workers: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_workers < 1:
            raise CapabilityError(f"max_workers must be at least 1, got {max_workers}")
        self._max_workers = max_workers
        self._clock = clock  # compared with CallRequest.deadline_s
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._calls: dict[str, _Call] = {}  # in flight (not DONE), by item id
        self._on_event: EventSink | None = None
        self._work: queue.Queue[_Call | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        self._running = False
        for capability in capabilities:
            self.add(capability)

    # --- life ----------------------------------------------------------------------------
    def start(self, on_event: EventSink) -> None:
        with self._lock:
            if self._running:
                raise CapabilityError("the in-process transport is already started")
            self._on_event = on_event
            self._work = queue.Queue()  # a fresh one: workers of an earlier run keep theirs
            self._workers = [
                threading.Thread(
                    target=self._worker, args=(self._work,), name=f"venus-capability-{i}"
                )
                for i in range(self._max_workers)
            ]
            for t in self._workers:
                t.daemon = True  # a handler that never returns must not hold the process
            self._running = True
            workers = list(self._workers)
        for t in workers:
            t.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what is in flight and wait up to ``timeout_s`` for the workers."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            work, workers = self._work, self._workers
            queued = [c for c in self._calls.values() if c.phase is _Phase.QUEUED]
            for c in queued:
                c.cancel_reason = STOPPED
                self._close(c)
            for c in self._calls.values():
                if c.phase is _Phase.RUNNING and self._cancellable(c):
                    c.cancel_reason = c.cancel_reason or STOPPED
                    c.token.set()
        for c in queued:
            self._emit(Finished(c.request.item_id, "cancelled", _cancelled(STOPPED)))
        for _ in workers:
            work.put(None)
        end = time.monotonic() + timeout_s
        for t in workers:
            t.join(max(0.0, end - time.monotonic()))
        with self._lock:
            left = [c for c in self._calls.values() if c.phase is _Phase.RUNNING]
            for c in left:
                self._close(c)
        for c in left:
            log.warning(
                "capability %s still running item %s after %.1f s; its result will be dropped",
                c.request.capability,
                c.request.item_id,
                timeout_s,
            )
            if c.cancel_reason is not None:
                self._emit(Finished(c.request.item_id, "cancelled", _cancelled(c.cancel_reason)))
            else:
                lost = ToolResult.failed("provider_lost", f"{STOPPED} before the call ended")
                self._emit(Finished(c.request.item_id, "failed", lost))

    # --- the registry --------------------------------------------------------------------
    def contracts(self) -> Sequence[Contract]:
        with self._lock:
            return tuple(e.capability.contract for e in self._entries.values())

    def add(self, capability: Capability) -> None:
        """Register a capability (also while running); a name taken -> CapabilityError."""
        contract = capability.contract
        outputs = None
        if contract.output_schema is not None:
            outputs = _validator(contract.output_schema)
        entry = _Entry(capability, _validator(contract.input_schema), outputs)
        with self._lock:
            if contract.name in self._entries:
                raise CapabilityError(
                    f"capability {contract.name!r} is registered twice in the in-process "
                    "transport; give each a distinct name"
                )
            self._entries[contract.name] = entry

    def remove(self, name: str) -> bool:
        """Unregister a capability (also while running): no new calls reach it, the calls
        in flight end as they would. False if there was none of that name."""
        with self._lock:
            return self._entries.pop(name, None) is not None

    # --- calls ---------------------------------------------------------------------------
    def call(self, request: CallRequest) -> None:
        """Dispatch; returns at once, the answer comes as events."""
        with self._lock:
            if self._on_event is None:
                raise CapabilityError("InProcessTransport.call before start(); start it first")
            if request.item_id in self._calls:
                log.warning(
                    "item %s is already in flight; ignored a second call for it",
                    request.item_id,
                )
                return
            call = _Call(request, self._entries.get(request.capability))
            self._calls[request.item_id] = call
            running = self._running
        arguments, refusal = self._screen(call, running)
        if refusal is not None:
            self._end(call, "failed", refusal)
            return
        call.request = dataclasses.replace(request, arguments=arguments)
        self._emit(Accepted(request.item_id))
        with self._lock:
            reason = call.cancel_reason or (None if self._running else STOPPED)
            if reason is None:
                call.phase = _Phase.QUEUED
                self._work.put(call)
        if reason is not None:
            self._end(call, "cancelled", _cancelled(reason))

    def cancel(self, item_id: str, reason: str) -> None:
        """Ask a call to stop; idempotent; it still ends with one ``Finished``."""
        with self._lock:
            call = self._calls.get(item_id)
            if call is None:
                log.debug("cancel for item %s, not in flight: ignored", item_id)
                return
            if call.phase is _Phase.RUNNING and not self._cancellable(call):
                log.info(
                    "capability %s is not cancellable; item %s runs to its end",
                    call.request.capability,
                    item_id,
                )
                return
            if call.cancel_reason is None:
                call.cancel_reason = reason
            call.token.set()
            first = call.cancel_reason
            now = call.phase is _Phase.QUEUED and self._close(call)
        if now:  # PENDING: call() answers; RUNNING: the worker does, when the handler returns
            self._emit(Finished(item_id, "cancelled", _cancelled(first)))

    # --- the workers ---------------------------------------------------------------------
    def _worker(self, work: queue.Queue[_Call | None]) -> None:
        while (call := work.get()) is not None:
            self._run(call)

    def _run(self, call: _Call) -> None:
        with self._lock:
            if call.phase is not _Phase.QUEUED:  # cancelled while queued, or stopped
                return
            late_s = self._clock() - call.request.deadline_s
            if late_s > 0:
                self._close(call)
            else:
                call.phase = _Phase.RUNNING
        if late_s > 0:
            message = f"the deadline passed {late_s:.1f} s before the call could start"
            self._emit(
                Finished(call.request.item_id, "failed", ToolResult.failed("expired", message))
            )
            return
        try:
            status, result = self._invoke(call)
        except BaseException:  # SystemExit and the like: answer, then let it end the thread
            self._end(call, "failed", ToolResult.failed("error", "the handler's thread ended"))
            raise
        with self._lock:
            closed = self._close(call)
            reason = call.cancel_reason
        if not closed:
            log.debug("dropped the result of item %s, answered at stop", call.request.item_id)
            return
        if reason is not None:
            status, result = "cancelled", _cancelled(reason)
        self._emit(Finished(call.request.item_id, status, result))

    def _invoke(self, call: _Call) -> tuple[FinalStatus, ToolResult]:
        """Run the handler; every Exception becomes a failed result."""
        assert call.entry is not None  # screened by call()
        request, entry = call.request, call.entry
        context = Context(
            request, request.arguments, call.token, lambda p, m: self._progress(call, p, m)
        )
        try:
            returned = entry.capability.handler(context)
        except CallCancelled as e:
            return "cancelled", _cancelled(str(e) or "the capability cancelled the call")
        except RetryableError as e:
            return "failed", ToolResult.failed("error", str(e) or type(e).__name__, True)
        except Exception as e:
            log.warning(
                "capability %s failed on item %s",
                request.capability,
                request.item_id,
                exc_info=True,
            )
            return "failed", ToolResult.failed("error", f"{type(e).__name__}: {e}")
        return _normalize(entry, returned)

    def _progress(self, call: _Call, progress: float | None, message: str) -> None:
        with self._lock:
            live = call.phase is _Phase.RUNNING
        if live:
            self._emit(Progress(call.request.item_id, progress, message))

    # --- helpers -------------------------------------------------------------------------
    def _screen(self, call: _Call, running: bool) -> tuple[dict[str, Any], ToolResult | None]:
        """The arguments (a JSON copy), or the failure that ends the call before it runs."""
        request, entry = call.request, call.entry
        if not running:
            return {}, ToolResult.failed("no_provider", STOPPED, retryable=True)
        if entry is None:
            with self._lock:
                known = ", ".join(sorted(self._entries)) or "none"
            message = f"no in-process capability {request.capability!r} (available: {known})"
            return {}, ToolResult.failed("no_provider", message)
        try:
            arguments = json.loads(json.dumps(dict(request.arguments)))
        except (TypeError, ValueError) as e:
            return {}, ToolResult.failed("invalid_arguments", f"arguments are not JSON: {e}")
        problems = _problems(entry.inputs, arguments)
        if problems:
            message = f"invalid arguments for {request.capability}: {problems}"
            return {}, ToolResult.failed("invalid_arguments", message)
        late_s = self._clock() - request.deadline_s
        if late_s > 0:
            message = f"the deadline passed {late_s:.1f} s before the call could start"
            return {}, ToolResult.failed("expired", message)
        return arguments, None

    def _close(self, call: _Call) -> bool:
        """Mark ``call`` DONE (the lock is held); False if it already was."""
        if call.phase is _Phase.DONE:
            return False
        call.phase = _Phase.DONE
        if self._calls.get(call.request.item_id) is call:
            del self._calls[call.request.item_id]
        return True

    def _end(self, call: _Call, status: FinalStatus, result: ToolResult) -> None:
        with self._lock:
            closed = self._close(call)
        if closed:
            self._emit(Finished(call.request.item_id, status, result))

    def _cancellable(self, call: _Call) -> bool:
        return call.entry is None or call.entry.capability.contract.cancellable

    def _emit(self, event: TransportEvent) -> None:
        sink = self._on_event
        if sink is None:
            return
        try:
            sink(event)
        except Exception:  # a broken sink must not break the one-Finished rule
            log.exception("on_event raised on %s", event)


def _normalize(entry: _Entry, returned: object) -> tuple[FinalStatus, ToolResult]:
    """A handler's return as a result, checked against the output schema."""
    name = entry.capability.contract.name
    try:
        if isinstance(returned, ToolResult):
            result = returned
        elif isinstance(returned, Mapping):
            result = ToolResult.ok(structured=dict(returned))
        elif isinstance(returned, str):
            result = ToolResult.ok(returned)
        elif returned is None:
            result = ToolResult.ok()
        else:
            message = (
                f"capability {name} returned a {type(returned).__name__}; "
                "return a ToolResult, a mapping, a str or None"
            )
            return "failed", ToolResult.failed("invalid_output", message)
        if result.is_error:
            return "failed", result
        structured = result.structured
        if structured is not None:
            structured = json.loads(json.dumps(dict(structured)))
    except (TypeError, ValueError) as e:
        return "failed", ToolResult.failed("invalid_output", f"{name}: output is not JSON: {e}")
    if entry.outputs is not None:
        if structured is None:
            message = f"capability {name} has an output schema but returned no structured content"
            return "failed", ToolResult.failed("invalid_output", message)
        problems = _problems(entry.outputs, structured)
        if problems:
            message = f"capability {name} returned output outside its schema: {problems}"
            return "failed", ToolResult.failed("invalid_output", message)
    return "completed", result


def _validator(schema: Mapping[str, Any]) -> Any:
    return validators.validator_for(schema)(schema)


def _problems(validator: Any, instance: object) -> str:
    """The schema violations as ``$.path: message; ...`` ("" if none)."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: str(e.json_path))
    text = "; ".join(f"{e.json_path}: {e.message}" for e in errors[:MAX_SCHEMA_ERRORS])
    if len(errors) > MAX_SCHEMA_ERRORS:
        text += f" (and {len(errors) - MAX_SCHEMA_ERRORS} more)"
    return text


def _cancelled(reason: str) -> ToolResult:
    return ToolResult.failed("cancelled", reason)
