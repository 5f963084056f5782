"""Normalized results: an MCP ``CallToolResult`` plus, when failed, a typed error.

Every final answer of a capability, however it was produced, becomes a ``ToolResult``:
``content`` (MCP content blocks, usually ``{"type": "text", "text": ...}``),
``structured`` (MCP ``structuredContent``, matching the contract's ``outputSchema``),
``is_error``, and ``error`` (code, message, retryable) for failures. ``text()`` is what
the harness injects for the frontend between ``<|result|>`` and ``<|/result|>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from venus.errors import CapabilityError


@dataclass(frozen=True)
class ToolError:
    # timeout, cancelled, expired, daemon_restarted, no_provider, provider_lost,
    # invalid_arguments, invalid_output, error, ...
    code: str
    message: str
    retryable: bool = False


@dataclass(frozen=True)
class ToolResult:
    content: tuple[Mapping[str, Any], ...] = ()
    structured: Mapping[str, Any] | None = None
    is_error: bool = False
    error: ToolError | None = field(default=None)

    @classmethod
    def ok(cls, text: str = "", structured: Mapping[str, Any] | None = None) -> ToolResult:
        if not text and structured is not None:
            text = json.dumps(structured, ensure_ascii=False, sort_keys=True)
        return cls(content=({"type": "text", "text": text},), structured=structured)

    @classmethod
    def failed(cls, code: str, message: str, retryable: bool = False) -> ToolResult:
        return cls(
            content=({"type": "text", "text": message},),
            is_error=True,
            error=ToolError(code, message, retryable),
        )

    @property
    def retryable(self) -> bool:
        return self.error is not None and self.error.retryable

    def text(self) -> str:
        """The text blocks joined; the structured content as JSON when there is none."""
        texts = [str(c.get("text", "")) for c in self.content if c.get("type") == "text"]
        if any(texts):
            return "\n".join(t for t in texts if t)
        if self.structured is not None:
            return json.dumps(self.structured, ensure_ascii=False, sort_keys=True)
        return ""

    def to_json(self) -> dict[str, Any]:
        """The MCP CallToolResult (``content``, ``structuredContent``, ``isError``) and
        ``error`` when failed."""
        out: dict[str, Any] = {"content": [dict(c) for c in self.content], "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = dict(self.structured)
        if self.error is not None:
            e = self.error
            out["error"] = {"code": e.code, "message": e.message, "retryable": e.retryable}
        return out

    @classmethod
    def from_json(cls, data: Any, source: str = "result") -> ToolResult:
        """Parse a CallToolResult; CapabilityError names what is wrong and where.

        A plain MCP error (``isError`` true, no ``error``) gets the code ``error`` and
        its text as the message, so every failure carries a ``ToolError``.
        """
        if not isinstance(data, Mapping):
            raise CapabilityError(f"{source}: a result is a JSON object")
        content = data.get("content", [])
        structured = data.get("structuredContent")
        error = data.get("error")
        is_error = data.get("isError", error is not None)
        if not isinstance(content, list) or not all(isinstance(c, Mapping) for c in content):
            raise CapabilityError(f"{source}: 'content' must be a list of objects")
        for i, block in enumerate(content):
            if not isinstance(block.get("type"), str):
                raise CapabilityError(f"{source}: content[{i}] has no string 'type'")
            if block["type"] == "text" and not isinstance(block.get("text"), str):
                raise CapabilityError(
                    f"{source}: content[{i}] is a text block without a string 'text'"
                )
        if structured is not None and not isinstance(structured, Mapping):
            raise CapabilityError(f"{source}: 'structuredContent' must be an object")
        if not isinstance(is_error, bool):
            raise CapabilityError(f"{source}: 'isError' must be true or false")
        err = None
        if error is not None:
            if not is_error:
                raise CapabilityError(f"{source}: 'error' is set but 'isError' is false")
            if not isinstance(error, Mapping) or not isinstance(error.get("code"), str):
                raise CapabilityError(f"{source}: 'error' must be an object with a string 'code'")
            message, retryable = error.get("message", ""), error.get("retryable", False)
            if not isinstance(message, str):
                raise CapabilityError(f"{source}: 'error.message' must be a string")
            if not isinstance(retryable, bool):
                raise CapabilityError(f"{source}: 'error.retryable' must be true or false")
            err = ToolError(error["code"], message, retryable)
        result = cls(
            content=tuple(dict(c) for c in content),
            structured=dict(structured) if structured is not None else None,
            is_error=is_error,
            error=err,
        )
        if is_error and err is None:
            message = result.text() or "the capability reported an error"
            result = cls(result.content, result.structured, True, ToolError("error", message))
        return result
