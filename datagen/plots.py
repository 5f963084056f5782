"""A sample's timeline as a PNG, drawn with OpenCV: ``write_timeline(trajectory, path)``.

Top to bottom: a title; one lane per speaker (user, assistant, other, background) with
each turn as a bar labelled with its text (a cut turn ends at its cut, marked |); the
overlap events as shaded windows across the lanes, labelled with their kind (and intent);
the chunk grid with each chunk's target decision as a coloured cell; the delegations'
calls, results and cancellations as markers on their chunks; the time axis in seconds;
a legend. The image is ``WIDTH_PX`` x ``HEIGHT_PX`` whatever the sample's length, and the
same trajectory always gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from venus.datagen.plan import PlanError, plain_text

Image = NDArray[np.uint8]
BGR = tuple[int, int, int]

WIDTH_PX = 1600
LEFT_PX = 100  # lane names
RIGHT_PX = 20
TITLE_PX = 34
LANE_PX = 46
SPEAKERS = ("user", "assistant", "other", "background")
CHUNKS_PX = 22
MARKS_PX = 24
AXIS_PX = 30
LEGEND_PX = 48
LANES_TOP = TITLE_PX
CHUNKS_TOP = LANES_TOP + LANE_PX * len(SPEAKERS)
MARKS_TOP = CHUNKS_TOP + CHUNKS_PX
AXIS_TOP = MARKS_TOP + MARKS_PX
LEGEND_TOP = AXIS_TOP + AXIS_PX
HEIGHT_PX = LEGEND_TOP + LEGEND_PX
SHADE_ALPHA = 0.3  # an event window's colour over what is under it
FONT = cv2.FONT_HERSHEY_SIMPLEX
SMALL = 0.38

WHITE: BGR = (255, 255, 255)
INK: BGR = (40, 40, 40)
GRID: BGR = (200, 200, 200)
SPEAKER_COLOURS: dict[str, BGR] = {
    "user": (200, 130, 40),  # blue
    "assistant": (70, 150, 60),  # green
    "other": (160, 90, 160),  # purple
    "background": (140, 140, 140),  # grey
}
EVENT_COLOURS: dict[str, BGR] = {
    "backchannel": (90, 200, 90),
    "other_directed": (200, 120, 220),
    "background": (150, 150, 150),
    "interruption": (60, 60, 230),
}
DECISION_COLOURS: dict[str, BGR] = {
    "listen": (235, 235, 235),
    "speak": (120, 200, 120),
    "turn_eos": (40, 150, 250),
}
CALL: BGR = (160, 60, 20)
RESULT: BGR = (40, 140, 40)
FAILED: BGR = (30, 30, 200)
CANCEL: BGR = (20, 20, 20)


def choose(records: Sequence[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` samples to plot: the first of each category in turn (duplex, delegation,
    understanding), then the next of each, ...; by index within a category."""
    order = ("proactive_duplex", "delegation", "offline_understanding")
    queues = [[r for r in records if r["category"] == c] for c in order]
    queues.append([r for r in records if r["category"] not in order])
    chosen: list[dict[str, Any]] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return chosen


def write_timeline(trajectory: dict[str, Any], path: Path) -> None:
    ok, png = cv2.imencode(".png", draw_timeline(trajectory))
    if not ok:  # pragma: no cover - OpenCV always encodes a uint8 image
        raise OSError(f"{path}: OpenCV could not encode the plot")
    path.write_bytes(png.tobytes())


def draw_timeline(trajectory: dict[str, Any]) -> Image:
    t = trajectory
    duration_s = max(float(t["duration_s"]), 1e-3)
    chunk_s = float(t["chunk_s"])
    span = WIDTH_PX - LEFT_PX - RIGHT_PX

    def x(time_s: float) -> int:
        return LEFT_PX + round(min(max(time_s, 0.0), duration_s) / duration_s * span)

    image = np.full((HEIGHT_PX, WIDTH_PX, 3), 255, np.uint8)
    title = (f"{t['sample_id']}  {t['group']} / {t['category']}  {duration_s:g} s  "
             f"{len(t['events'])} events  {len(t['delegations'])} delegations")  # fmt: skip
    _text(image, title, (8, 22), 0.55, INK, 1)
    for k, speaker in enumerate(SPEAKERS):
        top = LANES_TOP + k * LANE_PX
        cv2.line(image, (LEFT_PX, top), (WIDTH_PX - RIGHT_PX, top), GRID, 1)
        _text(image, speaker, (8, top + LANE_PX // 2 + 4), 0.45, INK, 1)
    cv2.line(image, (LEFT_PX, CHUNKS_TOP), (WIDTH_PX - RIGHT_PX, CHUNKS_TOP), GRID, 1)
    _events(image, t["events"], x)
    _turns(image, t["turns"], x)
    _chunks(image, t["chunks"], chunk_s, x)
    _marks(image, t["delegations"], chunk_s, x)
    _axis(image, duration_s, x)
    _legend(image)
    return image


def _events(image: Image, events: list[dict[str, Any]], x: Any) -> None:
    shade = image.copy()
    for e in events:
        start, end = e["window_s"]
        colour = EVENT_COLOURS.get(e["kind"], GRID)
        cv2.rectangle(shade, (x(start), LANES_TOP + 1), (x(end), CHUNKS_TOP - 1), colour, -1)
    cv2.addWeighted(shade, SHADE_ALPHA, image, 1 - SHADE_ALPHA, 0, dst=image)
    for e in events:
        start, _ = e["window_s"]
        label = e["kind"] + (f"/{e['intent']}" if e.get("intent") else "")
        _text(image, label, (x(start) + 2, LANES_TOP + 11), SMALL, INK, 1)


def _turns(image: Image, turns: list[dict[str, Any]], x: Any) -> None:
    for turn in turns:
        if turn["speaker"] not in SPEAKERS:
            continue
        top = LANES_TOP + SPEAKERS.index(turn["speaker"]) * LANE_PX + 14
        x0, x1 = x(turn["start_s"]), max(x(turn["end_s"]), x(turn["start_s"]) + 1)
        colour = SPEAKER_COLOURS[turn["speaker"]]
        cv2.rectangle(image, (x0, top), (x1, top + LANE_PX - 20), colour, -1)
        if turn.get("cut_at_s") is not None:
            cv2.line(image, (x1, top - 4), (x1, top + LANE_PX - 16), INK, 2)
        _text_within(image, _plain(turn["text"]), x0 + 3, x1 - 2, top + LANE_PX // 2 - 5)


def _chunks(image: Image, chunks: list[dict[str, Any]], chunk_s: float, x: Any) -> None:
    for c in chunks:
        x0, x1 = x(c["start_s"]), x(c["start_s"] + chunk_s)
        colour = DECISION_COLOURS.get(c["decision"], WHITE)
        cv2.rectangle(image, (x0, CHUNKS_TOP + 3), (x1, MARKS_TOP - 3), colour, -1)
        cv2.rectangle(image, (x0, CHUNKS_TOP + 3), (x1, MARKS_TOP - 3), GRID, 1)


def _marks(image: Image, delegations: list[dict[str, Any]], chunk_s: float, x: Any) -> None:
    mid = MARKS_TOP + MARKS_PX // 2
    for d in delegations:
        at = x(d["call_chunk"] * chunk_s)
        triangle = np.array([[at - 6, mid - 7], [at + 6, mid - 7], [at, mid + 6]], np.int32)
        cv2.fillPoly(image, [triangle], CALL)
        if d.get("result_chunk") is not None:
            colour = RESULT if d["status"] == "completed" else FAILED
            cv2.circle(image, (x(d["result_chunk"] * chunk_s), mid), 6, colour, -1)
        if d.get("cancel_chunk") is not None:
            c = x(d["cancel_chunk"] * chunk_s)
            cv2.line(image, (c - 5, mid - 5), (c + 5, mid + 5), CANCEL, 2)
            cv2.line(image, (c - 5, mid + 5), (c + 5, mid - 5), CANCEL, 2)


def _axis(image: Image, duration_s: float, x: Any) -> None:
    cv2.line(image, (LEFT_PX, AXIS_TOP + 2), (WIDTH_PX - RIGHT_PX, AXIS_TOP + 2), INK, 1)
    step = 5 if duration_s <= 60 else 10
    for s in range(int(duration_s) + 1):
        long = s % step == 0
        cv2.line(image, (x(s), AXIS_TOP + 2), (x(s), AXIS_TOP + (9 if long else 5)), INK, 1)
        if long:
            _text(image, f"{s}", (x(s) - 4, AXIS_TOP + 22), SMALL, INK, 1)
    _text(image, "time (s)", (8, AXIS_TOP + 16), 0.45, INK, 1)
    _text(image, "chunks", (8, CHUNKS_TOP + 16), 0.45, INK, 1)
    _text(image, "delegation", (8, MARKS_TOP + 16), 0.45, INK, 1)


def _legend(image: Image) -> None:
    at = [LEFT_PX]

    def box(colour: BGR, label: str, y: int, alpha: float = 1.0) -> None:
        fill = tuple(round(alpha * c + (1 - alpha) * 255) for c in colour)
        cv2.rectangle(image, (at[0], y - 10), (at[0] + 14, y + 2), fill, -1)
        _text(image, label, (at[0] + 18, y), SMALL, INK, 1)
        at[0] += 26 + cv2.getTextSize(label, FONT, SMALL, 1)[0][0]

    y = LEGEND_TOP + 18
    _text(image, "events", (8, y), 0.45, INK, 1)
    for kind, colour in EVENT_COLOURS.items():
        box(colour, kind, y, SHADE_ALPHA)
    at[0] += 20
    _text(image, "chunks:", (at[0], y), SMALL, INK, 1)
    at[0] += 8 + cv2.getTextSize("chunks:", FONT, SMALL, 1)[0][0]
    for decision, colour in DECISION_COLOURS.items():
        box(colour, decision, y)
    y += 20
    at[0] = LEFT_PX
    _text(image, "markers", (8, y), 0.45, INK, 1)
    for colour, label in ((CALL, "delegation call"), (RESULT, "result injected"),
                          (FAILED, "failure injected"), (CANCEL, "cancelled")):  # fmt: skip
        box(colour, label, y)
    _text(image, "| turn cut", (at[0], y), SMALL, INK, 1)


def _plain(text: str) -> str:
    try:
        return plain_text(text)
    except PlanError:
        return text


def _text(
    image: Image, text: str, org: tuple[int, int], scale: float, colour: BGR, thick: int
) -> None:
    ascii_text = text.encode("ascii", "replace").decode()
    cv2.putText(image, ascii_text, org, FONT, scale, colour, thick, cv2.LINE_AA)


def _text_within(image: Image, text: str, x0: int, x1: int, y: int) -> None:
    """``text`` in white on a bar from ``x0`` to ``x1``, cut short (..) to fit."""

    def width(s: str) -> int:
        return int(cv2.getTextSize(s, FONT, SMALL, 1)[0][0])

    fitted = text
    if width(text) > x1 - x0:
        n = len(text)
        while n > 0 and width(text[:n].rstrip() + "..") > x1 - x0:
            n -= 1
        fitted = text[:n].rstrip() + ".." if n > 0 else ""
    if fitted:
        _text(image, fitted, (x0, y), SMALL, WHITE, 1)
