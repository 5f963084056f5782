"""The Full-Duplex-Bench v1.5 layout of a set, so its evaluator reads our samples.

One folder per overlap event, under its v1.5 task (the subset names of
DanielLin94144/Full-Duplex-Bench ``v1_v1.5/dataset``)::

    full_duplex_bench/
      user_interruption/  user_backchannel/  talking_to_other/  background_speech/
        manifest.json                  # this task's samples
        <sample_id>-e<event>/
          input.wav                    # the user-side stream around the event
          clean_input.wav              # the same without the event's speech
          metadata.json

**The cut.** ``input.wav`` is the sample's ``input.wav`` from the user's turn that the
reply playing at the event answers (0.5 s before it: the last question, request or
interruption before that reply began) to the next event's window (less a 0.1 s guard)
or the sample's end, so the assistant can be speaking when the overlap comes, as it is
in the data. Earlier events between that turn and this one (a backchannel or an aside
earlier in the same reply) are taken out: there ``input.wav`` is the sample's
``clean_input.wav``, the same audio without their speech. Where no reply plays at the
event (an aside while the assistant waits), the cut starts 0.5 s before the user's last
question or request, never before the previous event's window ends, and nothing is taken
out: an earlier event there may have changed what the assistant does (a stop request).
So each file holds exactly one overlap event, with its context before and the room for
a response after; only an interruption whose question the reply answers stays in, as
that question. ``source.offset_s`` is where the cut starts in the sample.

**The control.** ``clean_input.wav`` is ``input.wav`` with, from the event's window on
(the trajectory's ``window_s``, where the event's own speech becomes audible), the
sample's ``clean_input.wav`` spliced in: the sample without its overlap speech, with the
same noise, room and levels (the realization sums it first and scales both mixes by one
gain). So the two differ by the event's speech only, up to the end of the cut. Windows
include reverberation tails, so a tail may run into the next event's window (4 of 45
neighbouring pairs in the ``eval`` set, by up to 0.13 s): then the earlier event's file
ends ``GUARD_S`` before the next window (its tail's end cut off), and the later event's
difference also holds the end of the earlier tail, over its own onset.

**The window.** ``timestamps`` is measured on ``input.wav - clean_input.wav`` (what the
overlap adds, reverberation tail included): from the first to the last 10 ms frame
whose RMS is within ``AUDIBLE_BELOW_PEAK_DB`` (40 dB) of the loudest frame's, in seconds
within this ``input.wav``; every frame outside is quieter than that. The trajectory's
``window_s`` is measured with ``acoustics.onsets``, down to 50 dB with hysteresis, so
it reaches a little further into a reverberant tail: ``planned_timestamps`` is that
window on this file's clock (cut short where the file ends first).

``metadata.json`` keeps v1.5's keys (``context_text``, ``current_turn_text``,
``timestamps``) and adds ``task``, ``id``, ``type``, ``overlap_text``, the event's
``intent``, ``action`` and ``delegation_decision``, and ``source``.
"""

from __future__ import annotations

import json
import logging
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from venus.datagen.plan import PlanError, plain_text
from venus.datagen.runner import OutputError

log = logging.getLogger(__name__)

RATE_HZ = 16_000
TASKS: dict[str, str] = {  # our event kind -> the v1.5 task (subset) name
    "interruption": "user_interruption",
    "backchannel": "user_backchannel",
    "other_directed": "talking_to_other",
    "background": "background_speech",
}
CONTEXT_ROLES = ("question", "request")
LEAD_S = 0.5  # context kept before the user's last question
GUARD_S = 0.1  # kept clear of the neighbouring events' windows
FRAME = 160  # 10 ms at 16 kHz: the window's resolution
AUDIBLE_BELOW_PEAK_DB = 40.0  # a frame this far below the overlap's loudest is silent
AUDIBLE_FLOOR_DBFS = -90.0  # and one below this always (PCM16's last bit is -90 dBFS)
PCM_FULL_SCALE = 32767  # PCM16 32767 is 1.0 (venus.datagen.sample.write_wav)
MIN_CUT_S = 0.3  # an event left less room than this (from its control's start) is left out
MAX_SHIFT_S = 0.5  # a measured window this far from the planned one is logged
Audio = NDArray[np.int16]


class TrajectorySource(Protocol):
    def load(self, record: dict[str, Any]) -> dict[str, Any]: ...

    def sample_dir(self, record: dict[str, Any]) -> Path: ...


def write_layout(
    out: Path,
    records: Sequence[dict[str, Any]],
    trajectories: TrajectorySource,
    target: Path,
) -> dict[str, int]:
    """Write the layout for the samples of ``records`` into ``target`` (an empty
    directory); the number of samples per task."""
    manifests: dict[str, list[dict[str, Any]]] = {task: [] for task in TASKS.values()}
    for record in records:
        t = trajectories.load(record)
        sample_dir = trajectories.sample_dir(record)
        if not t["events"]:
            continue
        files = t["files"]
        inputs = read_wav(sample_dir / files["input"])
        clean = read_wav(sample_dir / files["clean_input"])
        if len(clean) != len(inputs):
            raise OutputError(
                f"{sample_dir}: input.wav and clean_input.wav differ in length; remove the "
                "sample's directory and resume"
            )
        for event in t["events"]:
            if event["kind"] not in TASKS:
                continue
            entry = write_event(t, event, inputs, clean, target)
            if entry is not None:
                manifests[entry["task"]].append(entry)
    for task, entries in manifests.items():
        (target / task).mkdir(parents=True, exist_ok=True)
        manifest = {"benchmark": "Full-Duplex-Bench", "version": "v1.5", "task": task,
                    "count": len(entries), "samples": entries}  # fmt: skip
        _write_json(target / task / "manifest.json", manifest)
    return {task: len(entries) for task, entries in manifests.items()}


def write_event(
    t: dict[str, Any],
    event: dict[str, Any],
    inputs: Audio,
    clean: Audio,
    target: Path,
) -> dict[str, Any] | None:
    """One event's folder; its manifest entry, or None when the overlap is not audible."""
    task = TASKS[event["kind"]]
    sample_id = str(t["sample_id"])
    ident = f"{sample_id}-e{event['index']}"
    start_s, end_s = (float(v) for v in event["window_s"])
    span = cut(t, event, len(inputs))
    if span is None:
        log.warning("%s: event %d is too close to the next one; left out", sample_id,
                    event["index"])  # fmt: skip
        return None
    first, last = span.first, span.last
    cut_input = inputs[first:last].copy()
    for a, b in span.removed:
        cut_input[a - first : b - first] = clean[a:b]
    cut_clean = cut_input.copy()
    cut_clean[span.splice - first :] = clean[span.splice : last]
    window = audible(cut_input, cut_clean)
    if window is None:
        log.warning("%s: event %d adds nothing audible to the input; left out", sample_id,
                    event["index"])  # fmt: skip
        return None
    offset_s = first / RATE_HZ
    planned = [round(start_s - offset_s, 3), round(min(end_s, last / RATE_HZ) - offset_s, 3)]
    if abs(window[0] - planned[0]) > MAX_SHIFT_S:
        log.warning("%s: event %d starts at %.3f s, planned %.3f s", sample_id, event["index"],
                    window[0], planned[0])  # fmt: skip
    turn = t["turns"][event["turn"]]
    context = _context(t, start_s)
    folder = target / task / ident
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", cut_input)
    write_wav(folder / "clean_input.wav", cut_clean)
    metadata = {
        "task": task,
        "id": ident,
        "context_text": context,
        "current_turn_text": _plain(turn["text"]),
        "overlap_text": _plain(turn["text"]),
        "timestamps": list(window),
        "planned_timestamps": planned,
        "type": scenario_type(event, turn),
        "intent": event.get("intent"),
        "action": event["action"],
        "delegation_decision": event["delegation_decision"],
        "speaker": turn["speaker"],
        "duration_s": round((last - first) / RATE_HZ, 3),
        "sample_rate": RATE_HZ,
        "source": {
            "sample_id": sample_id,
            "event": event["index"],
            "turn": event["turn"],
            "offset_s": round(offset_s, 3),
        },
    }
    _write_json(folder / "metadata.json", metadata)
    return {
        "id": ident,
        "task": task,
        "input": f"{task}/{ident}/input.wav",
        "clean_input": f"{task}/{ident}/clean_input.wav",
        "metadata": f"{task}/{ident}/metadata.json",
        "type": metadata["type"],
        "source": metadata["source"],
    }


def scenario_type(event: dict[str, Any], turn: dict[str, Any]) -> str:
    """The event's scenario within its task: an interruption's intent, whether asides come
    while the assistant speaks or waits, background speech's source."""
    kind = event["kind"]
    if kind == "interruption":
        return str(event.get("intent") or "interruption")
    if kind == "other_directed":
        return "while_waiting" if event["action"] == "await_input" else "while_speaking"
    if kind == "background":
        return str(turn["role"])
    return str(kind)


@dataclass(frozen=True)
class Cut:
    """Where an event's files come from in its sample, in samples: ``input.wav`` is
    ``[first, last)`` with the sample's control over the ``removed`` spans (earlier
    events), and ``clean_input.wav`` takes the control from ``splice`` on as well."""

    first: int
    splice: int
    last: int
    removed: tuple[tuple[int, int], ...] = ()


def cut(t: dict[str, Any], event: dict[str, Any], n: int) -> Cut | None:
    """The event's ``Cut`` (module doc); None when a neighbouring event leaves it no room.

    The control starts where the event's window does; the file ends ``GUARD_S`` before
    the next event's window starts, even when this window's tail runs on into it."""
    k = event["index"]
    start_s = float(event["window_s"][0])
    windows = [(float(e["window_s"][0]), e["index"], float(e["window_s"][1])) for e in t["events"]]
    after = [start for start, i, _ in windows if (start, i) > (start_s, k)]
    high = min([a - GUARD_S for a in after] + [n / RATE_HZ])
    if high - start_s < MIN_CUT_S:
        return None
    before = [end for start, i, end in windows if (start, i) < (start_s, k)]
    low = max(0.0, min(max(before) + GUARD_S, start_s - GUARD_S)) if before else 0.0
    reply = _reply_at(t, start_s)
    asked = _asked(t, start_s, low, reply)
    first_s = min(float(asked["start_s"]) - LEAD_S, start_s) if asked is not None else low
    if reply is None:  # no reply to reach back to: never before the previous event
        return Cut(_at(max(low, first_s)), _at(start_s), min(n, _at(high)))
    first, splice = _at(first_s), _at(start_s)
    kept = t["turns"].index(asked) if asked is not None else None
    removed = tuple(
        (a, b)
        for e in t["events"]
        if (float(e["window_s"][0]), e["index"]) < (start_s, k) and e["turn"] != kept
        for a, b in [(max(first, _at(e["window_s"][0])), min(splice, _at(e["window_s"][1])))]
        if a < b
    )
    return Cut(first, splice, min(n, _at(high)), removed)


def _reply_at(t: dict[str, Any], start_s: float) -> dict[str, Any] | None:
    """The assistant's turn of ``t`` that plays at ``start_s``, if any."""
    return next(
        (
            u
            for u in t["turns"]
            if u["speaker"] == "assistant" and float(u["start_s"]) < start_s < float(u["end_s"])
        ),
        None,
    )


def _asked(
    t: dict[str, Any], start_s: float, low: float, reply: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The user's turn that ``reply``, playing at ``start_s``, answers (the last question,
    request or interruption before it began); with none playing, the last question or
    request from ``low`` on, as no earlier event is reached back past then."""
    roles: tuple[str, ...] = CONTEXT_ROLES
    since, until = low, start_s
    if reply is not None:
        since, until, roles = 0.0, float(reply["start_s"]), (*CONTEXT_ROLES, "interruption")
    asked = [
        u
        for u in t["turns"]
        if u["speaker"] == "user" and u["role"] in roles and since <= float(u["start_s"]) < until
    ]
    return asked[-1] if asked else None


def audible(inputs: Audio, clean: Audio) -> tuple[float, float] | None:
    """Where ``inputs - clean`` is audible, in seconds (module doc); None if nowhere."""
    diff = inputs.astype(np.float64) - clean.astype(np.float64)
    frames = len(diff) // FRAME
    if frames == 0:
        return None
    power = np.mean(np.square(diff[: frames * FRAME].reshape(frames, FRAME)), axis=1)
    level_db = 10 * np.log10(np.maximum(power, 1e-12) / PCM_FULL_SCALE**2)
    threshold = max(float(level_db.max()) - AUDIBLE_BELOW_PEAK_DB, AUDIBLE_FLOOR_DBFS)
    loud = np.flatnonzero(level_db > threshold)
    if loud.size == 0:
        return None
    return round(loud[0] * FRAME / RATE_HZ, 3), round((loud[-1] + 1) * FRAME / RATE_HZ, 3)


def _context(t: dict[str, Any], start_s: float) -> str:
    """What the user asked last before the event (in this cut or before it)."""
    asked = [
        turn["text"]
        for turn in t["turns"]
        if turn["speaker"] == "user"
        and turn["role"] in CONTEXT_ROLES
        and float(turn["start_s"]) < start_s
    ]
    return _plain(asked[-1]) if asked else ""


def _at(t_s: float) -> int:
    return max(0, round(float(t_s) * RATE_HZ))


def _plain(text: str) -> str:
    try:
        return plain_text(text)
    except PlanError:
        return text


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_wav(path: Path) -> Audio:
    """A 16 kHz mono PCM16 WAV file's samples."""
    with wave.open(str(path), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, RATE_HZ):
            raise OutputError(f"{path}: not 16 kHz mono PCM16")
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16)


def write_wav(path: Path, audio: Audio) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE_HZ)
        w.writeframes(audio.astype("<i2").tobytes())
