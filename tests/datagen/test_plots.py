"""Timeline plots: size, determinism, and that what is drawn is where the data says."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from support.datagen_fixtures import delegation, duplex, record

from venus.datagen import plots
from venus.datagen.plots import (
    CHUNKS_TOP,
    DECISION_COLOURS,
    EVENT_COLOURS,
    HEIGHT_PX,
    LANE_PX,
    LANES_TOP,
    LEFT_PX,
    MARKS_PX,
    MARKS_TOP,
    RIGHT_PX,
    SHADE_ALPHA,
    SPEAKERS,
    WIDTH_PX,
)


def x_of(t_s: float, duration_s: float) -> int:
    return LEFT_PX + round(t_s / duration_s * (WIDTH_PX - LEFT_PX - RIGHT_PX))


def lane_mid(speaker: str) -> int:
    return LANES_TOP + SPEAKERS.index(speaker) * LANE_PX + LANE_PX // 2


def test_writes_a_png_of_the_expected_size(tmp_path: Path) -> None:
    path = tmp_path / "t.png"
    plots.write_timeline(duplex(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = cv2.imread(str(path))
    assert image.shape == (HEIGHT_PX, WIDTH_PX, 3)
    assert np.array_equal(image, plots.draw_timeline(duplex()))  # lossless


def test_same_trajectory_same_bytes(tmp_path: Path) -> None:
    plots.write_timeline(delegation(), tmp_path / "a.png")
    plots.write_timeline(delegation(), tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_an_event_window_shades_its_time_range_only() -> None:
    image = plots.draw_timeline(duplex())  # background speech 3.5-5.0 s of 10 s
    y = lane_mid("other")  # a lane with no turns: only the shading is there
    shade = np.array(EVENT_COLOURS["background"], float) * SHADE_ALPHA + 255 * (1 - SHADE_ALPHA)
    inside = [x_of(t, 10.0) for t in (3.6, 4.25, 4.9)]
    for x in inside:
        assert np.abs(image[y, x].astype(float) - shade).max() <= 1, x
    for t in (1.0, 3.3, 5.2, 9.0):
        assert tuple(image[y, x_of(t, 10.0)]) == (255, 255, 255), t
    # the interruption's window (6.2-7.0 s) is shaded in its own colour
    red = np.array(EVENT_COLOURS["interruption"], float) * SHADE_ALPHA + 255 * (1 - SHADE_ALPHA)
    assert np.abs(image[y, x_of(6.6, 10.0)].astype(float) - red).max() <= 1


def test_turns_sit_in_their_speakers_lanes() -> None:
    image = plots.draw_timeline(duplex())
    blue = plots.SPEAKER_COLOURS["user"]
    top = LANES_TOP + SPEAKERS.index("user") * LANE_PX + 16  # the bar's top rows, no text
    assert tuple(image[top, x_of(1.0, 10.0)]) == blue  # the question, 0.5-1.8 s
    assert tuple(image[top, x_of(2.5, 10.0)]) == (255, 255, 255)  # the user is silent


def test_chunk_cells_show_each_chunks_decision() -> None:
    image = plots.draw_timeline(duplex())  # llssssssll
    y = CHUNKS_TOP + 11
    for k, decision in enumerate("llssssssll"):
        name = {"l": "listen", "s": "speak"}[decision]
        assert tuple(image[y, x_of(k + 0.5, 10.0)]) == DECISION_COLOURS[name], k


def test_delegation_markers_on_their_chunks() -> None:
    image = plots.draw_timeline(delegation())  # call at chunk 2, result at chunk 6, of 8 s
    y = MARKS_TOP + MARKS_PX // 2
    assert tuple(image[y - 4, x_of(2.0, 8.0)]) == plots.CALL
    assert tuple(image[y, x_of(6.0, 8.0)]) == plots.RESULT
    assert tuple(image[y, x_of(4.0, 8.0)]) == (255, 255, 255)


def test_choose_takes_each_category_in_turn() -> None:
    records = [record(duplex()), record(delegation())]
    records += [{**records[0], "index": 2, "sample_id": "0-000002"}]
    records += [{**records[1], "index": 3, "sample_id": "0-000003",
                 "category": "offline_understanding"}]  # fmt: skip
    chosen = [r["index"] for r in plots.choose(records, 3)]
    assert chosen == [0, 1, 3]
    assert [r["index"] for r in plots.choose(records, 10)] == [0, 1, 3, 2]
    assert plots.choose(records, 0) == []
