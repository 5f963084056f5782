"""The trajectory: one sample's turns, events, delegations and per-chunk targets, as
``trajectory.json`` (JSON Schema: ``schemas/trajectory.schema.json``, draft 2020-12).

    {"v": 1, "sample_id", "seed", "index", "attempt", "group", "category", "duration_s",
     "chunk_s", "sample_rate": 16000, "files": {...}, "turns": [...], "events": [...],
     "delegations": [...], "chunks": [...], "alignment": {...}, "acoustics": {...},
     "levels": {...}}

**Bytes.** ``to_json`` is canonical: keys in the dataclasses' field order (the order
above; never sorted), every float rounded to 1e-6 (``ROUND_DIGITS``; -0.0 written 0.0)
except inside a delegation's ``arguments`` (written as the call has them), UTF-8 without
escapes, ``indent=1``, and a final newline. The same trajectory is the same bytes.

**Times** are seconds on the sample's clock (t = 0 is the first input sample). A turn's
``start_s`` / ``end_s`` are measured on its own track, ``planned_start_s`` is the
(retimed) plan's; an event's ``window_s`` is where its speech is heard in the input
(room tail included): from the first to the last 10 ms frame (1 ms hop, its centre) where
``input.wav - clean_input.wav`` is above -60 dBFS (``mixdown.HEARD_DBFS``).

**Chunks.** Chunk ``k`` covers ``[k * chunk_s, (k + 1) * chunk_s)`` of the input; its
targets are what the model writes at its end (docs/timeline.md): ``decision`` ``speak``
(words decided here are heard from the next boundary on), ``turn_eos`` (the reply's last
words: ``<|speak|> text <|turn_eos|>``) or ``listen``; ``action`` what an overlap event
heard by then calls for; ``text`` the words; ``delegate`` the spans written first in the
chunk; ``results`` what the harness injects before the decision; ``events`` the overlap
events heard during the chunk; ``frame`` whether a camera frame comes with it. The rules
(a cut's chunk listens unless the response starts at the cut, ...) are in
``venus.datagen.align``. ``levels`` holds the gains that brought the mixes to their peak.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

from venus.datagen.plan import Acoustics
from venus.errors import DatagenError

TRAJECTORY_VERSION = 1
SCHEMA_FILE = "trajectory.schema.json"
ROUND_DIGITS = 6  # floats to 1e-6 (1 us in seconds), so float noise never changes bytes


class TrajectoryError(DatagenError):
    """A trajectory does not follow the format; the message names the field."""


@dataclass(frozen=True)
class Files:
    """The sample's files, relative to its directory (``video`` None: the audio group)."""

    input: str
    clean_input: str
    assistant: str
    video: str | None


@dataclass(frozen=True)
class TurnRecord:
    """One turn: ``text`` without markers; ``start_s`` / ``end_s`` measured;
    ``cut_at_s`` where an interruption cut it (assistant turns)."""

    index: int
    speaker: str
    role: str
    text: str
    start_s: float
    end_s: float
    planned_start_s: float
    cut_at_s: float | None


@dataclass(frozen=True)
class EventRecord:
    """One overlap event: its speech is turn ``turn``, heard over ``window_s``."""

    index: int
    kind: str
    intent: str | None
    action: str
    delegation_decision: str
    delegation: str | None
    turn: int
    window_s: tuple[float, float]


@dataclass(frozen=True)
class DelegationRecord:
    """One work item: the chunks its call, result and cancellation are in (a cancelled
    item's ``cancel_chunk`` holds the ``{"cancel"}`` span or the call that supersedes it)."""

    item_id: str
    capability: str
    arguments: Mapping[str, Any]
    form: str
    supersedes: str | None
    status: str
    result_text: str
    call_chunk: int
    result_chunk: int | None
    cancel_chunk: int | None


@dataclass(frozen=True)
class ChunkTarget:
    """What the model should write at the end of chunk ``index`` (see the module doc)."""

    index: int
    start_s: float
    decision: str
    action: str | None
    text: str
    delegate: tuple[str, ...]
    results: tuple[str, ...]
    events: tuple[int, ...]
    frame: bool


@dataclass(frozen=True)
class Alignment:
    """How far the measured turn starts are from the plan's, at most."""

    max_onset_error_ms: float
    turns_measured: int


@dataclass(frozen=True)
class Levels:
    """The written mixes' peak, and the gains that put them there (``input_gain_db`` on
    both input files, ``assistant_gain_db`` on the assistant's)."""

    peak_dbfs: float
    input_gain_db: float
    assistant_gain_db: float


@dataclass(frozen=True)
class Trajectory:
    v: int
    sample_id: str
    seed: int
    index: int
    attempt: int
    group: str
    category: str
    duration_s: float
    chunk_s: float
    sample_rate: int
    files: Files
    turns: tuple[TurnRecord, ...]
    events: tuple[EventRecord, ...]
    delegations: tuple[DelegationRecord, ...]
    chunks: tuple[ChunkTarget, ...]
    alignment: Alignment
    acoustics: Acoustics
    levels: Levels

    def to_dict(self) -> dict[str, Any]:
        out = _plain(self)
        assert isinstance(out, dict)
        return out

    def to_json(self) -> str:
        """The canonical bytes (see the module doc), checked against the schema."""
        data = self.to_dict()
        validate(data)
        return json.dumps(data, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def _plain(value: object) -> object:
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, DelegationRecord):
            out["arguments"] = json.loads(json.dumps(dict(value.arguments)))
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TrajectoryError(f"a trajectory holds finite numbers only, not {value}")
        return round(value, ROUND_DIGITS) + 0.0
    return value


@cache
def schema() -> dict[str, Any]:
    """The trajectory's JSON Schema (package data)."""
    path = resources.files("venus.datagen").joinpath("schemas").joinpath(SCHEMA_FILE)
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def validate(data: object) -> None:
    """TrajectoryError naming the first field of ``data`` the schema refuses."""
    error = best_match(Draft202012Validator(schema()).iter_errors(data))
    if error is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise TrajectoryError(f"trajectory{where}: {error.message}")
