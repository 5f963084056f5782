"""The plan's vocabulary: its constants, the ``Literal`` types of its fields, the
event-linkage tables, ``PlanError``, and the 1 ms / chunk-grid rounding (``ms``, ``snap``).

The bottom layer of the plan modules (``venus.datagen.plan`` documents the whole
contract and re-exports every name): it imports nothing from the package but the errors.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from venus.errors import DatagenError

PLAN_VERSION = 1
SAMPLE_RATE_HZ = 16_000  # the input's rate (docs/timeline.md)
TIME_STEP_S = 0.001  # planned times are rounded to 1 ms
EPS_S = 1e-6

Group = Literal["video", "audio"]
Category = Literal["offline_understanding", "proactive_duplex", "delegation"]
Speaker = Literal["user", "assistant", "other", "background"]
Role = Literal[
    # user / other
    "question", "request", "backchannel", "aside", "interruption",
    # assistant
    "answer", "holding", "announcement", "acknowledgement", "proactive",
    # background
    "tv_line", "room_speech",
]  # fmt: skip
Distance = Literal["near", "far"]
Engine = Literal["espeak-ng", "flite", "pico"]
EventKind = Literal["backchannel", "other_directed", "background", "interruption"]
Intent = Literal["stop", "revise", "cancel_pending", "change_topic"]
Action = Literal[
    "continue_speaking", "await_input", "yield_floor", "stop_output", "revise_response"
]
Decision = Literal["retain", "cancel", "revise", "retry", "replace"]
Status = Literal["completed", "failed", "cancelled"]
NoiseKind = Literal["none", "white", "pink", "brown", "babble"]
Shape = Literal["circle", "square", "triangle", "sign"]
Colour = Literal["red", "green", "blue", "yellow", "orange", "purple", "black", "white"]
Backdrop = Literal["white", "light_grey", "beige", "light_blue"]

# (kind, intent) -> (actions, decisions) it may call for; the table in venus.datagen.plan
LINKAGE: dict[tuple[EventKind, Intent | None], tuple[frozenset[Action], frozenset[Decision]]] = {
    ("backchannel", None): (frozenset({"continue_speaking"}), frozenset({"retain"})),
    ("other_directed", None): (
        frozenset({"continue_speaking", "await_input"}),
        frozenset({"retain"}),
    ),
    ("background", None): (frozenset({"continue_speaking"}), frozenset({"retain"})),
    ("interruption", "stop"): (frozenset({"stop_output"}), frozenset({"retain", "cancel"})),
    ("interruption", "revise"): (frozenset({"revise_response"}), frozenset({"revise", "retry"})),
    ("interruption", "cancel_pending"): (frozenset({"yield_floor"}), frozenset({"cancel"})),
    ("interruption", "change_topic"): (
        frozenset({"yield_floor"}),
        frozenset({"retain", "replace"}),
    ),
}
CUTTING: frozenset[Action] = frozenset({"stop_output", "yield_floor", "revise_response"})
EVENT_ROLES: dict[EventKind, tuple[frozenset[Speaker], frozenset[Role]]] = {
    "backchannel": (frozenset({"user"}), frozenset({"backchannel"})),
    "other_directed": (frozenset({"user", "other"}), frozenset({"aside"})),
    "background": (frozenset({"background"}), frozenset({"tv_line", "room_speech"})),
    "interruption": (frozenset({"user"}), frozenset({"interruption"})),
}
ASSISTANT_ROLES = frozenset({"answer", "holding", "announcement", "acknowledgement", "proactive"})

FILLERS = ("um", "uh", "er", "hmm")
PAUSE_MS = (50, 3000)
MARKER = re.compile(r"\{(\w+)\}|\[pause (\d+)\]|(--)")
ITEM_ID = re.compile(r"[0-9a-f]{8}")  # the short id the model sees and writes
VOICE_NAME = re.compile(r"[A-Za-z0-9_+.-]{1,64}")


class PlanError(DatagenError):
    """A plan, or a plan read from JSON, is inconsistent; the message says where."""


def ms(t_s: float) -> float:
    """``t_s`` rounded to the plan's 1 ms step."""
    return round(round(t_s / TIME_STEP_S) * TIME_STEP_S, 3)


def snap(t_s: float, chunk_s: float) -> float:
    """The first chunk boundary at or after ``t_s``."""
    return ms(math.ceil(t_s / chunk_s - EPS_S) * chunk_s)
