"""What users ask for: requests that need a capability, questions that need none, and the
lines overlap events are made of.

A ``Domain`` makes a ``Request``: the user's words, the call's arguments (valid against
the capability's input schema), the capability's answer and what the assistant says with
it. The calculator's answers are computed by the real calculator; the others are drawn.
Latencies are seconds from the call to the result, per capability (a timer's is its
duration).

This module holds the request types and the eight domains (``DOMAINS``), and re-exports
the rest; import from here. The contracts (built-in and mock) and argument validation
are in ``domains_contracts``, the fixed lines (``PLAIN``, ``LONG``, ``BACKCHANNELS``, ...)
in ``domains_lines``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from venus.capabilities.builtin import WEEKDAYS
from venus.capabilities.builtin.calculator import calculate
from venus.capabilities.builtin.timer import duration
from venus.datagen.domains_contracts import (
    CALENDAR,
    DAYS,
    DEVICES,
    SHOPPING_LIST,
    WEATHER,
    argument_errors,
    contracts,
)
from venus.datagen.domains_lines import (
    ASIDES,
    BACKCHANNELS,
    CANCEL_ACK,
    CANCELS,
    FAILED,
    HOLD,
    HOLD_LONG,
    LONG,
    LONG_ASIDES,
    OTHER_ASIDES,
    PLAIN,
    PROACTIVE,
    REPLACE,
    RETRIES,
    RETRY_ACK,
    REVISE_ACK,
    ROOM_SPEECH,
    SELF_RETRY,
    SIGNS,
    STOPS,
    STOPS_CANCEL,
    TOPIC_CHANGE,
    TV_LINES,
    VISUAL,
    WATCH,
    WATCH_ACK,
)

__all__ = [
    "ASIDES", "BACKCHANNELS", "CALENDAR", "CANCELS", "CANCEL_ACK", "CITIES", "DAYS",
    "DEVICES", "DOMAINS", "EVENTS", "FAILED", "HOLD", "HOLD_LONG", "ITEMS", "LABELS", "LONG",
    "LONG_ASIDES", "OPS", "OTHER_ASIDES", "PLAIN", "PROACTIVE", "QUESTIONS", "REPLACE", "RETRIES",
    "RETRY_ACK", "REVISE", "REVISE_ACK", "ROOM_SPEECH", "SECONDS", "SELF_RETRY",
    "SHOPPING_LIST", "SIGNS", "SKIES", "STOPS", "STOPS_CANCEL", "TOPIC_CHANGE", "TV_LINES",
    "UNITS", "VISUAL", "WATCH", "WATCH_ACK", "WEATHER", "ZONES", "Domain", "Request",
    "argument_errors", "cap", "contracts", "pick", "when",
]  # fmt: skip

T = TypeVar("T")


def when(day: str) -> str:
    """How a day is said: "today", "tomorrow", "on Monday"."""
    return day if day in DAYS[:2] else f"on {day.capitalize()}"


def cap(text: str) -> str:
    """``text`` with its first letter upper case (``str.capitalize`` lowers the rest)."""
    return text[:1].upper() + text[1:]


def pick(rng: np.random.Generator, choices: Sequence[T]) -> T:
    return choices[int(rng.integers(len(choices)))]


@dataclass(frozen=True)
class Request:
    """One request: ``ask`` the user's words, ``topic`` what it is about (for the holding
    lines: "the weather in Paris tomorrow"), ``result`` the capability's answer text,
    ``announce`` what the assistant says with it, ``failure`` the error message when it
    fails, ``doing`` what the assistant says it is doing ("checking the weather in Paris
    tomorrow"), ``latency_s`` a fixed latency (a timer's duration) or None."""

    capability: str
    arguments: dict[str, Any]
    ask: str
    topic: str
    result: str
    announce: str
    failure: str
    doing: str
    latency_s: float | None = None


@dataclass(frozen=True)
class Domain:
    """A capability's requests: ``make`` draws one, ``revise`` changes one ("make that
    Berlin", its ``ask`` the revision); ``latency_s`` the range results take."""

    name: str
    latency_s: tuple[float, float]
    can_fail: bool
    make: Callable[[np.random.Generator], Request]
    revise: Callable[[np.random.Generator, Request], Request]


# --- the domains --------------------------------------------------------------------------
CITIES = ("Paris", "Berlin", "Tokyo", "Madrid", "Chicago", "Sydney", "Toronto", "Oslo", "Lisbon")
ZONES = {
    "Paris": "Europe/Paris", "Berlin": "Europe/Berlin", "Tokyo": "Asia/Tokyo",
    "Madrid": "Europe/Madrid", "Chicago": "America/Chicago", "Sydney": "Australia/Sydney",
    "Toronto": "America/Toronto", "Oslo": "Europe/Oslo", "Lisbon": "Europe/Lisbon",
}  # fmt: skip
SKIES = ("sunny", "cloudy", "light rain", "heavy rain", "snow", "windy and clear", "foggy")
REVISE = ("Actually, make that {x}.", "No wait, I meant {x}.", "Sorry, {x}, not {y}.")


def _weather(rng: np.random.Generator, city: str = "", day: str = "") -> Request:
    city, day = city or pick(rng, CITIES), day or pick(rng, DAYS[:4])
    sky, temp = pick(rng, SKIES), int(rng.integers(-5, 33))
    asks = ("What's the weather like in {c} {d}?", "Will it rain in {c} {d}?",
            "How warm will it be in {c} {d}?", "Can you check the weather in {c} {d}?")  # fmt: skip
    return Request(
        "weather",
        {"city": city, "day": day},
        pick(rng, asks).format(c=city, d=when(day)),
        f"the weather in {city} {when(day)}",
        f"{day.capitalize()} in {city}: {sky}, {temp} °C.",
        f"{cap(when(day))} in {city} it will be {sky}, around {temp} degrees.",
        "the weather service is unavailable (HTTP 503)",
        f"checking the weather in {city} {when(day)}",
    )


def _revise_weather(rng: np.random.Generator, old: Request) -> Request:
    was = str(old.arguments["city"])
    city = pick(rng, [c for c in CITIES if c != was])
    new = _weather(rng, city, str(old.arguments["day"]))
    return replace(new, ask=pick(rng, REVISE).format(x=city, y=was))


def _clock(rng: np.random.Generator, city: str = "") -> Request:
    city = city or pick(rng, CITIES)
    h, m = int(rng.integers(24)), int(rng.choice([0, 10, 15, 20, 30, 40, 45, 50]))
    part = "in the morning" if h < 12 else "in the afternoon" if h < 18 else "in the evening"
    said = f"{(h - 1) % 12 + 1} {m}" if m else f"{(h - 1) % 12 + 1} o'clock"
    day = pick(rng, WEEKDAYS)
    return Request(
        "clock",
        {"timezone": ZONES[city]},
        pick(rng, ("What time is it in {c}?", "What's the time in {c} right now?")).format(c=city),
        f"the time in {city}",
        f"It is {h:02d}:{m:02d} on {day} ({ZONES[city]}).",
        f"In {city} it's {said} {part}, on {day}.",
        "",
        f"looking up the time in {city}",
    )


def _revise_clock(rng: np.random.Generator, old: Request) -> Request:
    was = next(c for c, z in ZONES.items() if z == old.arguments["timezone"])
    city = pick(rng, [c for c in CITIES if c != was])
    return replace(_clock(rng, city), ask=pick(rng, REVISE).format(x=city, y=was))


UNITS = (
    ("km", "mi", "kilometres", "miles"),
    ("kg", "lb", "kilograms", "pounds"),
    ("°C", "°F", "degrees Celsius", "degrees Fahrenheit"),
    ("L", "gal", "litres", "gallons"),
)
OPS = (("*", "times"), ("+", "plus"), ("-", "minus"))


def _calculation(rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    """Arguments for the calculator, and how a person says them ("23 times 17")."""
    if rng.random() < 0.5:
        a, b = int(rng.integers(12, 99)), int(rng.integers(3, 60))
        op, word = pick(rng, OPS)
        return {"expression": f"{a}{op}{b}"}, f"{a} {word} {b}"
    value = int(rng.integers(2, 120))
    unit, to, unit_said, to_said = pick(rng, UNITS)
    return {
        "convert": {"value": value, "from": unit, "to": to}
    }, f"{value} {unit_said} in {to_said}"


def _calculator(rng: np.random.Generator, ask: str = "") -> Request:
    arguments, spoken = _calculation(rng)
    text, structured = calculate(arguments)
    exact = bool(structured["exact"])
    value_said = str(structured["value"]) if exact else f"{structured['value']:.4g}"
    asks = ("What's {e}?", "Can you calculate {e}?", "How much is {e}?")
    return Request(
        "calculator",
        arguments,
        (ask or pick(rng, asks)).format(e=spoken),
        "that calculation",
        text,
        f"{cap(spoken)} is {'' if exact else 'about '}{value_said}.",
        "",
        "working that out",
    )


def _revise_calculator(rng: np.random.Generator, old: Request) -> Request:
    return _calculator(rng, pick(rng, ("Sorry, I meant {e}.", "No, make that {e}.")))


LABELS = ("tea", "eggs", "pasta", "oven", "break", "laundry")
SECONDS = (10, 15, 20, 25, 30)


def _timer(rng: np.random.Generator, seconds: int = 0, label: str = "") -> Request:
    seconds, label = seconds or int(rng.choice(SECONDS)), label or pick(rng, LABELS)
    asks = ("Set a timer for {s} seconds for the {l}.", "Can you time the {l}, {s} seconds?")
    return Request(
        "timer",
        {"action": "set", "seconds": seconds, "label": label},
        pick(rng, asks).format(s=seconds, l=label),
        f"a {seconds} second timer for the {label}",
        f"Your {duration(seconds, adjective=True)} timer for {label} is done.",
        f"Time's up! Your {seconds} second timer for the {label} is done.",
        "",
        f"setting a {seconds} second timer for the {label}",
        latency_s=float(seconds),
    )


def _revise_timer(rng: np.random.Generator, old: Request) -> Request:
    seconds = int(rng.choice([s for s in SECONDS if s != old.arguments["seconds"]]))
    new = _timer(rng, seconds, str(old.arguments["label"]))
    asks = ("Actually, make it {s} seconds.", "No, {s} seconds.")
    return replace(new, ask=pick(rng, asks).format(s=seconds))


def _device(rng: np.random.Generator, name: str = "", state: str = "") -> Request:
    device = name or pick(rng, [d.name for d in DEVICES])
    said, state = device.replace("_", " "), state or pick(rng, ("on", "off"))
    asks = ("Turn {s} the {d}.", "Can you switch the {d} {s}?", "Please turn the {d} {s}.")
    announces = ("Done, the {d} is {s}.", "Okay, the {d} is {s} now.")
    return Request(
        "mqtt_device",
        {"device": device, "action": "set", "state": state},
        pick(rng, asks).format(s=state, d=said),
        f"the {said}",
        f"The {said} is now {state}.",
        pick(rng, announces).format(d=said, s=state),
        f"the {said} is unreachable: no connection to the MQTT broker",
        f"switching the {said} {state}",
    )


def _revise_device(rng: np.random.Generator, old: Request) -> Request:
    was = str(old.arguments["device"])
    device = pick(rng, [d.name for d in DEVICES if d.name != was])
    new = _device(rng, device, str(old.arguments["state"]))
    asks = ("No, the {x}.", "Sorry, I meant the {x}.")
    return replace(new, ask=pick(rng, asks).format(x=device.replace("_", " ")))


QUESTIONS = (
    ("why the sky is blue", "Sunlight scatters off the air, and blue light scatters the most, "
     "so the sky looks blue from every direction."),
    ("how vaccines work", "A vaccine shows the immune system a harmless piece of a germ, so it "
     "learns to recognise it and can fight the real thing quickly."),
    ("why bread goes stale", "Bread goes stale as its starch slowly crystallises and loses "
     "water, which is why toasting it softens it again for a while."),
    ("how a heat pump works", "A heat pump moves heat instead of making it: it pulls warmth "
     "from the outside air and pumps it indoors using a refrigerant."),
    ("why the moon has phases", "The moon is always half lit by the sun, and as it goes round "
     "the earth we see more or less of that lit half."),
)  # fmt: skip


def _reason(rng: np.random.Generator, which: int = -1) -> Request:
    about, answer = QUESTIONS[which if which >= 0 else int(rng.integers(len(QUESTIONS)))]
    # The cue to hand a question on is heard in more than one word ("think it through",
    # "take your time", "have a good think"): the questions answered at once (LONG, PLAIN)
    # never use them, so the choice does not rest on the topic word alone.
    asks = ("Think it through and explain {q}.", "Take your time and work out {q}.",
            "Have a good think about {q} for me.")  # fmt: skip
    return Request(
        "reason",
        {"question": f"Explain {about}, briefly."},
        pick(rng, asks).format(q=about),
        "that question",
        answer,
        answer,
        "cannot reach http://127.0.0.1:8080/v1/chat/completions: connection refused; "
        "is the model server running?",
        "thinking that through",
    )


def _revise_reason(rng: np.random.Generator, old: Request) -> Request:
    was = str(old.arguments["question"])
    k = pick(rng, [i for i, (q, _) in enumerate(QUESTIONS) if q not in was])
    return replace(_reason(rng, k), ask=f"Actually, think through {QUESTIONS[k][0]} instead.")


EVENTS = ("team meeting", "dentist", "lunch with Sam", "yoga class", "call with the bank")


def _calendar(rng: np.random.Generator, day: str = "") -> Request:
    day = day or pick(rng, DAYS[1:])
    failure = "the calendar service is unavailable"
    if rng.random() < 0.5:
        what, h = pick(rng, EVENTS), int(rng.integers(8, 19))
        said = f"{(h - 1) % 12 + 1} {'in the morning' if h < 12 else 'pm'}"
        return Request(
            "calendar",
            {"action": "add", "day": day, "title": what, "time": f"{h:02d}:00"},
            f"Put {what} in my calendar {when(day)} at {said}.",
            f"your calendar {when(day)}",
            f"Added '{what}' on {day} at {h:02d}:00.",
            f"Okay, {what} is in your calendar {when(day)} at {said}.",
            failure,
            f"adding that to your calendar {when(day)}",
        )
    first, second = pick(rng, EVENTS[:2]), pick(rng, EVENTS[2:])
    return Request(
        "calendar",
        {"action": "list", "day": day},
        pick(rng, ("What's on my calendar {d}?", "Do I have anything {d}?")).format(d=when(day)),
        f"your calendar {when(day)}",
        f"{day.capitalize()}: 09:00 {first}; 15:00 {second}.",
        f"{cap(when(day))} you have the {first} at nine and the {second} at three.",
        failure,
        f"checking your calendar {when(day)}",
    )


def _revise_calendar(rng: np.random.Generator, old: Request) -> Request:
    day = pick(rng, [d for d in DAYS[1:] if d != old.arguments["day"]])
    asks = ("Sorry, I meant {x}.", "No, {x}.")
    return replace(_calendar(rng, day), ask=pick(rng, asks).format(x=when(day)))


ITEMS = ("milk", "eggs", "coffee", "apples", "bread", "rice", "olive oil", "dish soap")


def _shopping(rng: np.random.Generator, item: str = "") -> Request:
    item = item or pick(rng, ITEMS)
    asks = ("Add {i} to the shopping list.", "Put {i} on my shopping list.")
    return Request(
        "shopping_list",
        {"action": "add", "item": item},
        pick(rng, asks).format(i=item),
        "your shopping list",
        f"Added {item} to the shopping list.",
        f"I've added {item} to your shopping list.",
        "",
        f"adding {item} to your shopping list",
    )


def _revise_shopping(rng: np.random.Generator, old: Request) -> Request:
    was = str(old.arguments["item"])
    item = pick(rng, [i for i in ITEMS if i != was])
    return replace(_shopping(rng, item), ask=pick(rng, REVISE).format(x=item, y=was))


DOMAINS: dict[str, Domain] = {
    d.name: d
    for d in (
        Domain("weather", (0.8, 8.0), True, _weather, _revise_weather),
        Domain("clock", (0.05, 0.4), False, _clock, _revise_clock),
        Domain("calculator", (0.05, 0.3), False, _calculator, _revise_calculator),
        Domain("timer", (10.0, 30.0), False, _timer, _revise_timer),
        Domain("mqtt_device", (0.3, 3.0), True, _device, _revise_device),
        Domain("reason", (2.0, 12.0), True, _reason, _revise_reason),
        Domain("calendar", (0.5, 6.0), True, _calendar, _revise_calendar),
        Domain("shopping_list", (0.3, 2.0), False, _shopping, _revise_shopping),
    )
}
