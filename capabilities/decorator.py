"""``@capability``: a typed Python function made a ``Capability``.

::

    @capability(description="The weather forecast for a city.", timeout_s=10)
    def weather(ctx: Context, city: str, days: int = 1) -> dict[str, Any]:
        ctx.progress(0.5, "asking the forecast service")
        ctx.check_cancelled()
        return {"city": city, "days": days, "summary": "sunny"}

The input schema is derived from the parameters (``schema_for`` says how) unless
``input_schema=`` is given. The function runs on a worker thread with the validated
arguments as keyword arguments; a parameter annotated ``Context`` gets the call's
context (progress, the ``cancelled`` token, the evidence). An ``async def`` function
runs to its end in ``asyncio.run`` on that thread: it may await network I/O, but shares
no event loop with other calls. Serve the result with ``venus.capabilities.worker.Worker``
(over MQTT) or an ``InProcessTransport``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union

from venus.capabilities.contract import Contract, Deliver, Evidence
from venus.capabilities.inprocess import Capability, Context
from venus.errors import CapabilityError

JSON_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def capability(
    *,
    name: str | None = None,
    title: str = "",
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    annotations: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
    freshness_s: float = 300.0,
    evidence: Evidence = "none",
    idempotent: bool = False,
    cancellable: bool = True,
    deliver: Deliver = "when_idle",
) -> Callable[[Callable[..., Any]], Capability]:
    """Make a typed function a ``Capability`` (see the module's doc).

    ``name`` defaults to the function's name, ``description`` to its docstring. The
    function returns a mapping (structured content, checked against ``output_schema``
    when given), a string (text), a ``ToolResult`` or None; it raises ``CallCancelled``
    to end cancelled, ``RetryableError`` for a retryable failure, anything else for a
    failure.
    """

    def wrap(fn: Callable[..., Any]) -> Capability:
        schema, context_params = (
            (dict(input_schema), _context_params(fn))
            if input_schema is not None
            else schema_for(fn)
        )
        contract = Contract(
            name=name or fn.__name__,
            title=title,
            description=description if description is not None else inspect.getdoc(fn) or "",
            input_schema=schema,
            output_schema=None if output_schema is None else dict(output_schema),
            annotations=dict(annotations or {}),
            timeout_s=timeout_s,
            freshness_s=freshness_s,
            evidence=evidence,
            idempotent=idempotent,
            cancellable=cancellable,
            deliver=deliver,
        )
        run_async = inspect.iscoroutinefunction(fn)

        def handle(ctx: Context) -> Any:
            kwargs = dict(ctx.arguments)
            for p in context_params:
                kwargs[p] = ctx
            if run_async:
                return asyncio.run(fn(**kwargs))
            return fn(**kwargs)

        return Capability(contract, handle)

    return wrap


def schema_for(fn: Callable[..., Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The input schema from ``fn``'s parameters, and the parameters that get the Context.

    Types: ``str``, ``int``, ``float``, ``bool``, ``list[T]``, ``dict`` / ``dict[str, T]``,
    ``Literal[...]`` (an enum), ``Any`` (anything), ``T | None`` / ``Optional[T]`` (null
    allowed). A parameter with a default is not required (a JSON default is shown as
    ``default``); extra arguments are refused (``additionalProperties: false``). Any
    other annotation, ``*args`` or ``**kwargs`` is a CapabilityError: pass
    ``input_schema=`` instead.
    """
    where = f"capability function {getattr(fn, '__qualname__', fn)!r}"
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # a NameError in a string annotation, mostly
        raise CapabilityError(f"{where}: cannot resolve its annotations: {e}") from e
    properties: dict[str, Any] = {}
    required: list[str] = []
    context: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise CapabilityError(
                f"{where}: parameter {p.name} is {p.kind.description}; use plain named "
                "parameters, or pass input_schema="
            )
        if p.name not in hints:
            raise CapabilityError(f"{where}: parameter {p.name} has no annotation")
        if hints[p.name] is Context:
            context.append(p.name)
            continue
        properties[p.name] = _type_schema(hints[p.name], f"{where}: parameter {p.name}")
        if p.default is p.empty:
            required.append(p.name)
        elif _is_json(p.default):
            properties[p.name]["default"] = p.default
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema, tuple(context)


def _context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    return tuple(n for n, t in hints.items() if t is Context and n != "return")


def _type_schema(t: object, where: str) -> dict[str, Any]:
    if t in JSON_TYPES:
        return {"type": JSON_TYPES[t]}
    if t is Any:
        return {}
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is list or origin is list:
        return {"type": "array", **({"items": _type_schema(args[0], where)} if args else {})}
    if t is dict or origin is dict:
        if args and args[0] is not str:
            raise CapabilityError(f"{where}: JSON object keys are strings, not {args[0]!r}")
        extra = {"additionalProperties": _type_schema(args[1], where)} if args else {}
        return {"type": "object", **extra}
    if origin is Literal and all(_is_json(a) for a in args):
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        schemas = [_type_schema(a, where) for a in others]
        if len(others) < len(args):
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    raise CapabilityError(
        f"{where}: type {t!r} has no JSON Schema here (str, int, float, bool, list[...], "
        "dict, Literal, Optional); pass input_schema= instead"
    )


def _is_json(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True
