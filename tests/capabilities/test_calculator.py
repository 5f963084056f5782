"""The ``calculator`` built-in: safe arithmetic, unit conversion, and its contract."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from venus.capabilities.builtin import BUILTINS, builtin_transport
from venus.capabilities.builtin.calculator import (
    CALCULATOR,
    MAX_LENGTH,
    UNITS,
    CalculationError,
    calculate,
    calculator_capability,
    evaluate,
)
from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Context, InProcessTransport
from venus.capabilities.result import ToolResult
from venus.capabilities.transport import CallRequest, Finished, TransportEvent

WAIT_S = 5.0
FAST_S = 0.5  # a refused expression is refused at once, however nasty


def call(arguments: dict[str, Any], transport: InProcessTransport | None = None) -> Finished:
    """One call through an in-process transport, schemas and all."""
    done = threading.Event()
    finals: list[Finished] = []

    def sink(event: TransportEvent) -> None:
        if isinstance(event, Finished):
            finals.append(event)
            done.set()

    t = transport or InProcessTransport([calculator_capability()])
    t.start(sink)
    try:
        t.call(CallRequest("i1", "calculator", arguments, "s1", "kitchen", time.time() + 60, 1))
        assert done.wait(WAIT_S)
    finally:
        t.stop(timeout_s=WAIT_S)
    (final,) = finals
    return final


def run(arguments: dict[str, Any]) -> ToolResult:
    """The handler alone (no schema check first)."""
    request = CallRequest("i1", "calculator", arguments, "s1", "kitchen", time.time() + 60, 1)
    context = Context(request, arguments, threading.Event(), lambda p, m: None)
    result = calculator_capability().handler(context)
    assert isinstance(result, ToolResult)
    return result


def value(expression: str) -> int | float:
    structured = calculate({"expression": expression})[1]
    result: int | float = structured["value"]
    return result


def refusal(arguments: dict[str, Any]) -> str:
    """The handler's failure message, checking that it is a clean, quick refusal."""
    start = time.perf_counter()
    result = run(arguments)
    assert time.perf_counter() - start < FAST_S
    assert result.is_error and result.error is not None
    assert result.error.code == "invalid_arguments" and not result.retryable
    return result.error.message


# --- the contract and the acceptance example ----------------------------------------------
def test_the_contract() -> None:
    assert CALCULATOR.name == "calculator"
    assert CALCULATOR.idempotent and CALCULATOR.deliver == "when_idle"
    assert (CALCULATOR.freshness_s, CALCULATOR.timeout_s) == (3600.0, 2.0)
    assert CALCULATOR.output_schema is not None
    assert "expression" in CALCULATOR.description and "convert" in CALCULATOR.description
    assert Contract.from_tool(CALCULATOR.to_tool()) == CALCULATOR
    assert CALCULATOR in [c.contract for c in BUILTINS]
    assert CALCULATOR in builtin_transport().contracts()


def test_the_acceptance_example_through_the_transport() -> None:
    final = call({"expression": "2*(3+4)"})
    assert final.status == "completed"  # the output matched the output schema
    assert final.result.structured == {
        "expression": "2*(3+4)",
        "value": 14,
        "exact": True,
        "text": "2*(3+4) = 14",
    }
    assert final.result.text() == "2*(3+4) = 14"


def test_the_builtin_transport_serves_it() -> None:
    final = call({"expression": "6*7"}, builtin_transport())
    assert final.status == "completed" and final.result.text() == "6*7 = 42"


# --- arithmetic ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1+2*3", 7),
        ("(1+2)*3", 9),
        ("10-4-3", 3),
        ("2**10", 1024),
        ("2^10", 1024),  # ^ is power, not XOR
        ("2**3**2", 512),  # right-associative
        ("-2**2", -4),
        ("7/2", 3.5),
        ("7//2", 3),
        ("-7//2", -4),
        ("7%3", 1),
        ("+5", 5),
        ("2**-2", 0.25),
        ("1_000*3", 3000),
        ("2 × 3 ÷ 4 − 1", 0.5),
    ],
)
def test_operators_and_precedence(expression: str, expected: float) -> None:
    assert value(expression) == expected


@pytest.mark.parametrize(
    ("expression", "expected", "exact"),
    [
        ("0.1+0.2", 0.3, True),  # exact rationals: no 0.30000000000000004
        ("0.1*3", 0.3, True),
        ("1.1*1.1", 1.21, True),
        ("2/3*3", 2, True),
        ("1/3", 0.333333333333, False),  # rounded to 12 significant digits
        ("3.0", 3, True),
        ("2**0.5*2**0.5", 2, False),  # a float, rounded back to 2
        ("1e-300*1e-300", 0, False),
    ],
)
def test_decimals_stay_exact(expression: str, expected: float, exact: bool) -> None:
    structured = calculate({"expression": expression})[1]
    assert structured["value"] == expected and structured["exact"] is exact
    assert type(structured["value"]) is type(expected)  # 14, not 14.0


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sqrt(16)", 4),
        ("sqrt(2.25)", 1.5),
        ("sqrt(2)", 1.41421356237),
        ("abs(-3.5)", 3.5),
        ("round(2.5)", 3),  # half away from zero, as people round
        ("round(-2.5)", -3),
        ("round(2.675, 2)", 2.68),  # the decimal as written, not the binary double
        ("round(1234, -2)", 1200),
        ("min(3, 1, 2)", 1),
        ("max(1.5, 2, -1)", 2),
        ("floor(2.7) + ceil(2.1)", 5),
        ("2*pi", 6.28318530718),
        ("e", 2.71828182846),
        ("ln(e)", 1),
        ("log(8, 2)", 3),
        ("log10(1000)", 3),
        ("exp(0)", 1),
        ("sin(radians(30))", 0.5),
        ("degrees(pi)", 180),
        ("cos(0)", 1),
        ("10**100", 10**100),  # the largest magnitude allowed, exactly
    ],
)
def test_functions_and_constants(expression: str, expected: float) -> None:
    assert value(expression) == expected


def test_the_text_repeats_the_expression() -> None:
    result = run({"expression": " 1/8 "})
    assert result.text() == "1/8 = 0.125"
    assert result.structured is not None and result.structured["value"] == 0.125


# --- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('ls')", "attributes"),
        ("().__class__", "attributes"),
        ("(1).real", "attributes"),
        ("'a'*10", "not a number"),
        ("b'a'", "not a number"),
        ("f'{1}'", "strings"),
        ("x + 1", "unknown name 'x'"),
        ("sqrt", "is a function"),
        ("print(1)", "unknown function 'print'"),
        ("sum([1, 2])", "unknown function 'sum'"),
        ("sqrt(x=4)", "keyword"),
        ("max()", "takes 1+ arguments"),
        ("sqrt(1, 2)", "takes 1 arguments"),
        ("(lambda: 1)()", "lambdas"),
        ("lambda: 1", "lambdas"),
        ("[1, 2][0]", "indexing"),
        ("[1, 2]", "lists"),
        ("{1: 2}", "dicts"),
        ("1, 2", "tuples"),
        ("[x for x in (1, 2)]", "comprehensions"),
        ("(x for x in (1,))", "comprehensions"),
        ("3 > 2", "comparisons"),
        ("1 and 2", "and / or"),
        ("1 if 1 else 2", "if-else"),
        ("(y := 1)", "assignments"),
        ("not 1", "not"),
        ("~1", "~"),
        ("1 & 2", "&"),
        ("1 << 2000", "<<"),
        ("True + 1", "True is not a number"),
        ("None", "None is not a number"),
        ("1j", "imaginary"),
        ("import os", "not an arithmetic expression"),
        ("1 +", "not an arithmetic expression"),
        ("\x00", "not an arithmetic expression"),
        ("   ", "empty"),
        ("round(1, 0.5)", "whole number"),
    ],
)
def test_refused_constructs(expression: str, expected: str) -> None:
    assert expected in refusal({"expression": expression})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("9**9**9", "exponent is too large"),
        ("2**1001", "exponent is too large"),
        ("2**1000.5", "exponent is too large"),
        ("10**101", "too large"),
        ("10**100 + 1", "too large"),
        ("9**999", "too large"),
        ("1e308*10", "too large"),
        ("1e999", "too large"),
        ("exp(1000)", "too large"),
        ("9" * 150, "too large"),  # integer digits
        ("1" * (MAX_LENGTH + 1), f"at most {MAX_LENGTH}"),
        ("-" * 150 + "1", "nests more than"),
        ("-(" * 66 + "1" + ")" * 66, "nests more than"),
        ("1/0", "division by zero"),
        ("1//0.0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0**-1", "division by zero"),
        ("(-8)**(1/3)", "no real value"),
        ("sqrt(-1)", "sqrt(-1) has no real value"),
        ("ln(0)", "no real value"),
        ("log(8, 1)", "no real value"),
    ],
)
def test_resource_attacks_and_impossible_sums_fail_fast(expression: str, expected: str) -> None:
    assert expected in refusal({"expression": expression})


def test_small_results_of_big_powers_stay_cheap() -> None:
    start = time.perf_counter()
    assert value("0.5**1000") == pytest.approx(9.33263618503e-302)
    assert value("(0.5**1000)**1000 + (1/3)**999") == 0  # exactness given up, not time
    assert time.perf_counter() - start < FAST_S


def test_deep_parentheses_alone_are_fine() -> None:
    assert evaluate("(" * 90 + "7" + ")" * 90) == 7


def test_refusals_through_the_transport() -> None:
    for arguments, expected in (
        ({"expression": "__import__('os')"}, "unknown function"),
        ({"expression": "1" * (MAX_LENGTH + 1)}, "$.expression"),  # the schema says so first
        ({}, "invalid arguments for calculator"),
        ({"expression": "1", "convert": {"value": 1, "from": "m", "to": "km"}}, "calculator"),
        ({"expression": 5}, "$.expression"),
        ({"convert": {"value": "1", "from": "m", "to": "km"}}, "$.convert.value"),
        ({"convert": {"value": 1, "from": "kg", "to": "m"}}, "mass"),
    ):
        final = call(arguments)
        assert final.status == "failed" and final.result.error is not None, arguments
        assert final.result.error.code == "invalid_arguments" and not final.result.retryable
        assert expected in final.result.error.message, (arguments, final.result.error.message)


def test_the_handler_checks_its_arguments_itself() -> None:
    assert "exactly one" in refusal({})
    assert "exactly one" in refusal({"expression": "1", "convert": {}})
    assert "must be a string" in refusal({"expression": 5})
    assert "'convert' must be" in refusal({"convert": {"value": 1}})
    assert "must be a number" in refusal({"convert": {"value": True, "from": "m", "to": "m"}})


# --- unit conversion -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("amount", "source", "target", "text"),
    [
        (100, "C", "F", "100 °C = 212 °F"),
        (32, "fahrenheit", "celsius", "32 °F = 0 °C"),
        (-40, "°F", "°C", "-40 °F = -40 °C"),
        (0, "K", "degrees Celsius", "0 K = -273.15 °C"),
        (20.5, "celsius", "kelvin", "20.5 °C = 293.65 K"),
        (1, "mile", "km", "1 mi = 1.609344 km"),
        (5, "km", "mi", "5 km = 3.10685596119 mi"),
        (1, "Kilometres", "metres", "1 km = 1000 m"),
        (12, "in", "ft", "12 in = 1 ft"),
        (1, "yd", "cm", "1 yd = 91.44 cm"),
        (1, "kg", "lb", "1 kg = 2.20462262185 lb"),
        (16, "oz", "pounds", "16 oz = 1 lb"),
        (1, "gal", "L", "1 gal = 3.785411784 L"),
        (1, "cup", "fl oz", "1 cup = 8 fl oz"),
        (250, "ml", "cups", "250 mL = 1.05668820943 cup"),
        (1.5, "days", "hours", "1.5 day = 36 h"),
        (90, "min", "h", "90 min = 1.5 h"),
        (100, "km/h", "mph", "100 km/h = 62.1371192237 mph"),
        (10, "m/s", "km/h", "10 m/s = 36 km/h"),
        (1, "kn", "km/h", "1 kn = 1.852 km/h"),
        (1, "GiB", "MB", "1 GiB = 1073.741824 MB"),
        (2048, "KiB", "MiB", "2048 KiB = 2 MiB"),
        (1, "KB", "B", "1 kB = 1000 B"),
    ],
)
def test_conversions(amount: float, source: str, target: str, text: str) -> None:
    result = run({"convert": {"value": amount, "from": source, "to": target}})
    assert result.text() == text


def test_a_conversion_through_the_transport() -> None:
    final = call({"convert": {"value": 100, "from": "celsius", "to": "fahrenheit"}})
    assert final.status == "completed"
    assert final.result.structured == {
        "conversion": {"value": 100, "from": "°C", "to": "°F", "dimension": "temperature"},
        "value": 212,
        "exact": True,
        "text": "100 °C = 212 °F",
    }


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("kg", "m", "cannot convert kilogram (mass) to metre (length)"),
        ("°C", "km/h", "temperature"),
        ("oz", "ml", "fl oz"),
        ("furlong", "m", "unknown unit 'furlong'"),
        ("kilometr", "m", "did you mean km?"),
    ],
)
def test_incompatible_and_unknown_units(source: str, target: str, expected: str) -> None:
    assert expected in refusal({"convert": {"value": 1, "from": source, "to": target}})


def test_below_absolute_zero_and_too_large() -> None:
    assert "below absolute zero" in refusal({"convert": {"value": -300, "from": "C", "to": "K"}})
    assert "too large" in refusal({"convert": {"value": 1e300, "from": "m", "to": "km"}})


def test_every_unit_converts_to_itself() -> None:
    for alias, unit in UNITS.items():
        structured = calculate({"convert": {"value": 3, "from": alias, "to": unit.symbol}})[1]
        assert structured["value"] == 3 and structured["exact"], alias


def test_errors_are_capability_errors() -> None:
    with pytest.raises(CalculationError, match="division by zero"):
        evaluate("1/0")
