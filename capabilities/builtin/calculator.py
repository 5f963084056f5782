"""``calculator``: arithmetic on a small, safe expression language, and unit conversion.

Arithmetic: the expression is parsed with ``ast.parse(expression, mode="eval")`` and the
tree is walked over an allow-list (numbers, ``+ - * / // % **``, unary ``+ -``,
parentheses, the functions in ``FUNCTIONS``, the constants ``pi`` and ``e``); any other
node is refused with a message saying what is allowed. Nothing is handed to Python to
evaluate. ``^`` means power (nobody asking a voice assistant means XOR), and ``×``, ``÷``
and ``−`` are read as ``*``, ``/`` and ``-``.

Numbers are exact rationals (``fractions.Fraction``) for as long as the operations allow,
so ``0.1 + 0.2`` is 3/10 and says 0.3: a float literal is read from its shortest repr
(``0.1`` is 1/10, not the binary double nearest to it). A square root that is not exact,
a fractional power, ``ln``, the trigonometric functions, ``pi`` and ``e`` turn the value
into a float; an inexact result is given to ``SIGNIFICANT`` digits. ``round`` rounds
halves away from zero, as people do (``round(2.5)`` is 3).

Every limit below stops a resource attack; a voice assistant needs nothing beyond them.
A refused or impossible calculation fails with ``invalid_arguments`` (not retryable).
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context
from venus.capabilities.result import ToolResult
from venus.errors import CapabilityError

MAX_LENGTH = 200  # characters of expression
MAX_DEPTH = 64  # nested operations in the tree (parentheses alone add none)
MAX_EXPONENT = 1000  # |exponent| of a power
MAX_DIGITS = 100  # a result, or any step, of magnitude above 10**100 is refused
MAX_MAGNITUDE = 10**MAX_DIGITS
MAX_EXACT_BITS = 2048  # numerator / denominator size kept exact; beyond, a float
MAX_ROUND_DIGITS = 100  # round(x, n): |n|
SIGNIFICANT = 12  # digits of an inexact result
TOO_LARGE = f"the result is too large (at most 1e{MAX_DIGITS})"

Number = Fraction | float  # exact while it can be; a float once something is irrational
SPELLINGS = {"×": "*", "·": "*", "÷": "/", "−": "-", "^": "**"}


class CalculationError(CapabilityError):
    """An expression or a conversion that cannot be answered; the message says why."""


# --- arithmetic ---------------------------------------------------------------------------
def evaluate(expression: str) -> Number:
    """The value of ``expression``; CalculationError says what is wrong with it."""
    text = expression.strip()
    for spelled, meant in SPELLINGS.items():
        text = text.replace(spelled, meant)
    if not text:
        raise CalculationError("the expression is empty; give one such as 2*(3+4)")
    if len(text) > MAX_LENGTH:
        raise CalculationError(
            f"the expression is {len(text)} characters long; at most {MAX_LENGTH} are allowed"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise CalculationError(f"{expression!r} is not an arithmetic expression ({e.msg})") from e
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        raise CalculationError(f"{expression!r} cannot be read as an expression") from e
    return _eval(tree.body, 1)


def _eval(node: ast.expr, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise CalculationError(f"the expression nests more than {MAX_DEPTH} operations deep")
    if isinstance(node, ast.Constant):
        return _literal(node.value)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id in FUNCTIONS:
            raise CalculationError(f"{node.id} is a function: call it, as in {node.id}(2)")
        raise CalculationError(f"unknown name {node.id!r}: only the constants pi and e exist")
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.UAdd | ast.USub):
            raise _refused(node.op)
        value = _eval(node.operand, depth + 1)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp):
        operation = OPERATIONS.get(type(node.op))
        if operation is None:
            raise _refused(node.op)
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        return _checked(operation(left, right))
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise _refused(node)


def _literal(value: object) -> Number:
    if isinstance(value, bool) or value is None or value is Ellipsis:
        raise CalculationError(f"{value!r} is not a number; {_allowed()}")
    if isinstance(value, int):
        return _checked(Fraction(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculationError(f"the number is too large (at most 1e{MAX_DIGITS})")
        return _checked(Fraction(repr(value)))  # 0.1 is 1/10, as written
    if isinstance(value, complex):
        raise CalculationError("imaginary numbers are not supported")
    raise CalculationError(f"text such as {value!r} is not a number; {_allowed()}")


def _checked(value: Number | int) -> Number:
    """``value`` if it is within the limits (a huge exact fraction becomes a float)."""
    if isinstance(value, int):
        value = Fraction(value)
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_MAGNITUDE:
        raise CalculationError(TOO_LARGE)
    if isinstance(value, Fraction) and value.denominator.bit_length() > MAX_EXACT_BITS:
        return float(value)
    return value


def _divide(kind: Callable[[Number, Number], Number | int]) -> Callable[[Number, Number], Number]:
    def divide(a: Number, b: Number) -> Number:
        if b == 0:
            raise CalculationError("division by zero: the result is undefined")
        return _checked(kind(a, b))

    return divide


def _power(base: Number, exponent: Number) -> Number:
    if not -MAX_EXPONENT <= exponent <= MAX_EXPONENT:
        raise CalculationError(f"the exponent is too large (at most {MAX_EXPONENT} either way)")
    if base == 0 and exponent < 0:
        raise CalculationError("division by zero: 0 to a negative power is undefined")
    try:
        if isinstance(exponent, Fraction) and exponent.denominator == 1:
            n = exponent.numerator
            if isinstance(base, Fraction) and base != 0:
                size = math.log10(abs(base.numerator)) - math.log10(base.denominator)
                if n * size > MAX_DIGITS:
                    raise CalculationError(TOO_LARGE)
                bits = max(base.numerator.bit_length(), base.denominator.bit_length())
                if abs(n) * bits <= MAX_EXACT_BITS:
                    return base**n
            return float(base) ** n
        if base < 0:
            raise CalculationError("a negative number to a fractional power has no real value")
        return math.pow(float(base), float(exponent))
    except OverflowError as e:
        raise CalculationError(TOO_LARGE) from e


def _call(node: ast.Call, depth: int) -> Number:
    if not isinstance(node.func, ast.Name):
        raise _refused(node.func)
    name = node.func.id
    if name not in FUNCTIONS:
        raise CalculationError(f"unknown function {name!r}; the functions are {_names()}")
    if node.keywords:
        raise CalculationError(f"{name}() takes no keyword arguments")
    low, high, function = FUNCTIONS[name]
    if not low <= len(node.args) <= high:
        wanted = f"{low}" if low == high else f"{low} to {high}" if high < 99 else f"{low}+"
        raise CalculationError(f"{name}() takes {wanted} arguments, got {len(node.args)}")
    args = [_eval(a, depth + 1) for a in node.args]
    try:
        return _checked(function(*args))
    except (ValueError, ZeroDivisionError) as e:
        shown = ", ".join(_text(a) for a in args)
        raise CalculationError(f"{name}({shown}) has no real value") from e
    except OverflowError as e:
        raise CalculationError(TOO_LARGE) from e


def _sqrt(x: Number) -> Number:
    if isinstance(x, Fraction) and x >= 0:
        top, bottom = math.isqrt(x.numerator), math.isqrt(x.denominator)
        if top * top == x.numerator and bottom * bottom == x.denominator:
            return Fraction(top, bottom)  # sqrt(2.25) is exactly 1.5
    return math.sqrt(x)


def _round(x: Number, digits: Number = Fraction(0)) -> Number:
    """Half away from zero, from the decimal as written (round(2.675, 2) is 2.68)."""
    if not isinstance(digits, Fraction) or digits.denominator != 1:
        raise CalculationError("round(x, n): n must be a whole number")
    if abs(digits) > MAX_ROUND_DIGITS:
        raise CalculationError(f"round(x, n): n must be within ±{MAX_ROUND_DIGITS}")
    exact = x if isinstance(x, Fraction) else Fraction(repr(x))
    scale = Fraction(10) ** digits.numerator
    whole = math.floor(abs(exact) * scale + Fraction(1, 2))
    return Fraction(whole if exact >= 0 else -whole) / scale


def _allowed() -> str:
    return f"use numbers, + - * / // % ** (or ^), parentheses, {_names()} and pi, e"


def _names() -> str:
    return ", ".join(FUNCTIONS)


def _refused(node: ast.AST) -> CalculationError:
    what = REFUSED.get(type(node).__name__, type(node).__name__)
    return CalculationError(f"not allowed: {what}; {_allowed()}")


def _float(function: Callable[[float], float]) -> Callable[[Number], Number]:
    return lambda x: function(float(x))


REFUSED = {  # what a refusal calls a node, by its class name
    **dict.fromkeys(("ListComp", "SetComp", "DictComp", "GeneratorExp"), "comprehensions"),
    **dict.fromkeys(("List", "Set", "Dict"), "lists, sets and dicts"),
    "Tuple": "tuples (a comma outside a function call)",
    **{"Attribute": "attributes (x.y)", "Subscript": "indexing (x[i])", "Lambda": "lambdas"},
    **{"Compare": "comparisons", "BoolOp": "and / or", "IfExp": "if-else", "Not": "not"},
    **{"NamedExpr": "assignments", "JoinedStr": "strings", "Starred": "* unpacking"},
    **{"BitAnd": "&", "BitOr": "|", "LShift": "<<", "RShift": ">>", "Invert": "~", "MatMult": "@"},
}
CONSTANTS: dict[str, Number] = {"pi": math.pi, "π": math.pi, "e": math.e}
OPERATIONS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _divide(lambda a, b: a / b),
    ast.FloorDiv: _divide(lambda a, b: a // b),
    ast.Mod: _divide(lambda a, b: a % b),
    ast.Pow: _power,
}
# name -> (fewest arguments, most, the function)
FUNCTIONS: dict[str, tuple[int, int, Callable[..., Number]]] = {
    "sqrt": (1, 1, _sqrt),
    "abs": (1, 1, abs),
    "round": (1, 2, _round),
    "min": (1, 99, min),
    "max": (1, 99, max),
    "floor": (1, 1, lambda x: Fraction(math.floor(x))),
    "ceil": (1, 1, lambda x: Fraction(math.ceil(x))),
    "ln": (1, 1, math.log),
    "log": (1, 2, math.log),  # natural, or log(x, base)
    "log10": (1, 1, _float(math.log10)),
    "exp": (1, 1, _float(math.exp)),
    "sin": (1, 1, _float(math.sin)),
    "cos": (1, 1, _float(math.cos)),
    "tan": (1, 1, _float(math.tan)),
    "radians": (1, 1, _float(math.radians)),
    "degrees": (1, 1, _float(math.degrees)),
}


# --- unit conversion ----------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    symbol: str  # as said in the answer
    name: str
    dimension: str
    factor: Fraction  # base units (m, kg, L, s, m/s, K, B) per unit
    offset: Fraction = Fraction(0)  # temperatures: base = (value + offset) * factor


MILE, GALLON, POUND = Fraction("1609.344"), Fraction("3.785411784"), Fraction("0.45359237")
# dimension, symbol, base units per unit, names (the first is said in messages), offset
TABLE: tuple[tuple[str, str, Fraction | str, str, str], ...] = (
    ("length", "m", "1", "metre, meter", "0"),
    ("length", "km", "1000", "kilometre, kilometer, kms", "0"),
    ("length", "cm", "1/100", "centimetre, centimeter", "0"),
    ("length", "mm", "1/1000", "millimetre, millimeter", "0"),
    ("length", "mi", MILE, "mile", "0"),
    ("length", "ft", "0.3048", "foot, feet", "0"),
    ("length", "in", "0.0254", "inch, inches", "0"),
    ("length", "yd", "0.9144", "yard, yds", "0"),
    ("length", "nmi", "1852", "nautical mile", "0"),
    ("mass", "kg", "1", "kilogram, kilogramme, kilo, kgs", "0"),
    ("mass", "g", "1/1000", "gram, gramme", "0"),
    ("mass", "lb", POUND, "pound, lbs", "0"),
    ("mass", "oz", POUND / 16, "ounce", "0"),
    ("mass", "t", "1000", "tonne, metric ton", "0"),
    ("volume", "L", "1", "litre, liter, ltr", "0"),
    ("volume", "mL", "1/1000", "millilitre, milliliter", "0"),
    ("volume", "gal", GALLON, "gallon, us gallon", "0"),
    ("volume", "cup", GALLON / 16, "cup, cups, us cup", "0"),
    ("volume", "fl oz", GALLON / 128, "fluid ounce, floz, fl. oz, us fluid ounce", "0"),
    ("volume", "tbsp", GALLON / 256, "tablespoon", "0"),
    ("volume", "tsp", GALLON / 768, "teaspoon", "0"),
    ("time", "s", "1", "second, sec, secs", "0"),
    ("time", "ms", "1/1000", "millisecond", "0"),
    ("time", "min", "60", "minute, mins", "0"),
    ("time", "h", "3600", "hour, hr, hrs", "0"),
    ("time", "day", "86400", "day, days, d", "0"),
    ("time", "week", "604800", "week, weeks, wk", "0"),
    ("speed", "m/s", "1", "metre per second, meter per second, metres per second, mps", "0"),
    ("speed", "km/h", "1000/3600", "kilometre per hour, kilometer per hour, kph, kmh", "0"),
    ("speed", "mph", MILE / 3600, "mile per hour, miles per hour, mi/h", "0"),
    ("speed", "kn", "1852/3600", "knot, kt, kts", "0"),
    ("temperature", "°C", "1", "degree Celsius, celsius, c, degc, centigrade", "273.15"),
    ("temperature", "°F", "5/9", "degree Fahrenheit, fahrenheit, f, degf", "459.67"),
    ("temperature", "K", "1", "kelvin", "0"),
    ("data", "B", "1", "byte", "0"),
    ("data", "kB", "1000", "kilobyte", "0"),
    ("data", "MB", "1000000", "megabyte", "0"),
    ("data", "GB", "1000000000", "gigabyte", "0"),
    ("data", "TB", "1000000000000", "terabyte", "0"),
    ("data", "KiB", "1024", "kibibyte", "0"),
    ("data", "MiB", "1048576", "mebibyte", "0"),  # 1024**2
    ("data", "GiB", "1073741824", "gibibyte", "0"),  # 1024**3
    ("data", "TiB", "1099511627776", "tebibyte", "0"),  # 1024**4
)


def _aliases() -> dict[str, Unit]:
    """alias (lower case) -> unit: the symbol, the names, "degrees <name>" for a
    temperature, and a plural for each name of more than three letters. An alias given
    twice is a bug in TABLE, refused here."""
    table: dict[str, Unit] = {}
    for dimension, symbol, factor, names, offset in TABLE:
        spelled = [n.strip() for n in names.split(",")]
        unit = Unit(symbol, spelled[0], dimension, Fraction(factor), Fraction(offset))
        aliases = {symbol.lower()}
        for name in (n.lower() for n in spelled):
            aliases.add(name)
            if len(name) > 3 and name[-1].isalpha() and not name.endswith("s"):
                aliases.add(name + "s")
            if dimension == "temperature" and len(name) > 4 and " " not in name:
                aliases.add(f"degrees {name}")
        for alias in aliases:
            if alias in table:
                raise ValueError(f"unit alias {alias!r} is given twice")
            table[alias] = unit
    return table


UNITS = _aliases()
DIMENSIONS = ("length", "mass", "volume", "time", "speed", "temperature", "data")


def find_unit(spelled: str) -> Unit:
    """The unit spelled so (any case; symbol, name or plural); CalculationError if none."""
    key = " ".join(spelled.split()).lower()
    unit = UNITS.get(key)
    if unit is None:
        close = difflib.get_close_matches(key, UNITS, n=1)
        hint = f"; did you mean {UNITS[close[0]].symbol}?" if close else ""
        raise CalculationError(
            f"unknown unit {spelled!r}{hint} (units of {', '.join(DIMENSIONS)} are known)"
        )
    return unit


def convert(value: float, source: str, target: str) -> tuple[Number, Unit, Unit]:
    """``value`` in ``source`` units, in ``target`` units (exact for a decimal input)."""
    a, b = find_unit(source), find_unit(target)
    if a.dimension != b.dimension:
        hint = "; for volume, say fl oz" if "oz" in (a.symbol, b.symbol) else ""
        raise CalculationError(
            f"cannot convert {a.name} ({a.dimension}) to {b.name} ({b.dimension}): "
            f"they measure different things{hint}"
        )
    amount = _literal(value)
    base = (amount + a.offset) * a.factor
    if a.dimension == "temperature" and base < 0:
        raise CalculationError(f"{_text(amount)} {a.symbol} is below absolute zero")
    return _checked(base / b.factor - b.offset), a, b


# --- the answer ---------------------------------------------------------------------------
def _plain(value: Number) -> int | float:
    """The JSON number: an exact integer as an int, anything else to SIGNIFICANT digits."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    rounded = float(f"{float(value):.{SIGNIFICANT}g}") + 0.0  # + 0.0: no "-0"
    return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded


def _text(value: Number) -> str:
    plain = _plain(value)
    return str(plain) if isinstance(plain, int) else f"{plain:.{SIGNIFICANT}g}"


def _result(value: Number) -> dict[str, Any]:
    """``value`` and ``exact``: whether ``value`` is the result itself, not rounded."""
    plain = _plain(value)
    shown = Fraction(plain) if isinstance(plain, int) else Fraction(repr(plain))
    return {"value": plain, "exact": isinstance(value, Fraction) and shown == value}


def calculate(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text and structured answer for the tool's arguments (see ``INPUT``)."""
    expression, conversion = arguments.get("expression"), arguments.get("convert")
    if (expression is None) == (conversion is None):
        raise CalculationError("give exactly one of 'expression' and 'convert'")
    if expression is not None:
        if not isinstance(expression, str):
            raise CalculationError("'expression' must be a string, such as 2*(3+4)")
        value = evaluate(expression)
        text = f"{expression.strip()} = {_text(value)}"
        return text, {"expression": expression, **_result(value)}
    if not isinstance(conversion, Mapping) or not all(
        isinstance(conversion.get(k), str) for k in ("from", "to")
    ):
        raise CalculationError("'convert' must be {'value': number, 'from': unit, 'to': unit}")
    amount = conversion.get("value")
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise CalculationError("'convert.value' must be a number")
    value, a, b = convert(amount, conversion["from"], conversion["to"])
    text = f"{_text(_literal(amount))} {a.symbol} = {_text(value)} {b.symbol}"
    asked = {"value": amount, "from": a.symbol, "to": b.symbol, "dimension": a.dimension}
    return text, {"conversion": asked, **_result(value)}


NUMBER = {"type": "number"}
INPUT = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_LENGTH,
            "description": "arithmetic, e.g. 2*(3+4), 15% of 80 as 0.15*80, sqrt(2)/2",
        },
        "convert": {
            "type": "object",
            "properties": {
                "value": {**NUMBER, "description": "the amount, in 'from' units"},
                "from": {"type": "string", "minLength": 1, "description": "e.g. km, °F, lb"},
                "to": {"type": "string", "minLength": 1, "description": "e.g. mi, °C, kg"},
            },
            "required": ["value", "from", "to"],
            "additionalProperties": False,
        },
    },
    "oneOf": [{"required": ["expression"]}, {"required": ["convert"]}],
    "additionalProperties": False,
}
OUTPUT = {
    "type": "object",
    "properties": {
        "expression": {"type": "string", "description": "as asked"},
        "conversion": {
            "type": "object",
            "properties": {
                "value": NUMBER,
                "from": {"type": "string"},
                "to": {"type": "string"},
                "dimension": {"enum": list(DIMENSIONS)},
            },
            "required": ["value", "from", "to", "dimension"],
        },
        "value": {**NUMBER, "description": "the result; exact unless 'exact' is false"},
        "exact": {"type": "boolean", "description": f"false: rounded to {SIGNIFICANT} digits"},
        "text": {"type": "string", "description": "e.g. 2*(3+4) = 14, or 100 °C = 212 °F"},
    },
    "required": ["value", "exact", "text"],
    "oneOf": [{"required": ["expression"]}, {"required": ["conversion"]}],
}
CALCULATOR = Contract(
    name="calculator",
    title="Calculator",
    description=(
        "Exact arithmetic and unit conversion; use it rather than working numbers out "
        "yourself. Give exactly one of: 'expression', an arithmetic expression of at most "
        f"{MAX_LENGTH} characters with numbers, + - * / // % ** (or ^), parentheses "
        "(% is the remainder: 15% of 80 is 0.15*80), "
        f"the functions {', '.join(FUNCTIONS)} (log(x) is natural, log(x, b) base b; "
        "trigonometry in radians, so sin(radians(30))) and the constants pi and e, and no "
        "variables; or 'convert', {value, from, to}, with units of length (m km cm mm mi ft "
        "in yd nmi), mass (kg g lb oz t), volume (L mL gal cup 'fl oz' tbsp tsp, US "
        "measures), time (s ms min h day week), speed (m/s km/h mph kn), temperature "
        "(°C °F K, or celsius fahrenheit kelvin) and data (B kB MB GB TB KiB MiB GiB TiB)."
    ),
    input_schema=INPUT,
    output_schema=OUTPUT,
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    timeout_s=2.0,
    freshness_s=3600.0,  # a sum never goes stale; an hour bounds how long it is worth saying
    evidence="none",
    idempotent=True,
    deliver="when_idle",
)


def calculator_capability() -> Capability:
    """The ``calculator`` capability."""

    def handle(ctx: Context) -> ToolResult:
        try:
            text, structured = calculate(ctx.arguments)
        except CalculationError as e:
            return ToolResult.failed("invalid_arguments", str(e))
        return ToolResult.ok(text, {**structured, "text": text})

    return Capability(CALCULATOR, handle)
