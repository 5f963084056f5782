"""The figures of ``venus eval duplex``: PNGs of the stated size, byte for byte repeatable,
the overlap window shaded where it lies."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from support.frontend import chunk_record

from venus.daemon.frontend.timeline import DelegationRecord, TimelineWriter
from venus.evaluation.plots import (
    DPI,
    scenario_bars_png,
    timeline_figure,
    timeline_png,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
D = 6.0  # seconds of input
WINDOW = [2.0, 3.5]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def write_timeline(path: Path) -> Path:
    call = DelegationRecord(
        raw='{"name": "weather"}', valid=True, name="weather", arguments={}, error=None
    )
    chunk_s = 0.08
    records = []
    for i in range(round(D / chunk_s)):
        t = round(i * chunk_s, 2)
        speaking = 0.5 <= t < 2.4 or 3.8 <= t < 5.0
        records.append(
            chunk_record(
                index=i,
                start_s=t,
                decision="turn_eos" if i == 62 else "speak" if speaking else "listen",
                reply_id=1 if speaking else None,
                playback_stopped=i == 30,
                delegations=(call,) if i == 10 else (),
            )
        )
    with TimelineWriter(path) as w:
        for r in records:
            w.write(r)
    return path


@pytest.fixture
def sample(fdb, speech, tmp_path: Path) -> tuple[Path, Path, Path]:
    heard = fdb.place(D, (2.0, speech.question, None))
    said = fdb.place(D, (0.5, speech.answer, 1.9), (3.8, speech.reply, None))
    folder = fdb.sample("user_interruption", "0001", heard, said, WINDOW)
    output = fdb.outputs / "user_interruption" / "0001" / "output.wav"
    timeline = write_timeline(output.parent / "timeline.jsonl")
    return folder / "input.wav", output, timeline


def draw(sample: tuple[Path, Path, Path], path: Path, *, timeline: bool = True) -> Path:
    input_wav, output_wav, timeline_jsonl = sample
    return timeline_png(
        input_wav,
        output_wav,
        timeline_jsonl if timeline else None,
        {"timestamps": WINDOW},
        path,
        task="user_interruption",
        sample_id="0001",
        policy="model",
    )


def test_timeline_png_is_a_repeatable_png_of_the_stated_size(sample, tmp_path: Path) -> None:
    first = draw(sample, tmp_path / "plots" / "a.png")
    second = draw(sample, tmp_path / "plots" / "b.png")
    assert png_size(first) == (12 * DPI, round(3.2 * DPI))
    assert first.read_bytes() == second.read_bytes()


def test_a_missing_timeline_is_left_out(sample, tmp_path: Path) -> None:
    without = draw(sample, tmp_path / "none.png", timeline=False)
    assert png_size(without) == (12 * DPI, round(3.2 * DPI))
    input_wav, output_wav, _ = sample
    gone = timeline_png(
        input_wav, output_wav, tmp_path / "absent.jsonl", {"timestamps": WINDOW},
        tmp_path / "absent.png", task="t", sample_id="1", policy="vad",
    )  # fmt: skip
    assert png_size(gone) == png_size(without)


def test_the_overlap_window_is_shaded(tmp_path: Path, fdb) -> None:
    silent = fdb.place(D)
    folder = fdb.sample("user_backchannel", "0002", silent, silent, WINDOW)
    output = fdb.outputs / "user_backchannel" / "0002" / "output.wav"
    fig = timeline_figure(
        folder / "input.wav", output, None, {"timestamps": WINDOW},
        task="user_backchannel", sample_id="0002", policy="vad",
    )  # fmt: skip
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())  # type: ignore[attr-defined]
    ax = fig.axes[0]
    height = rgba.shape[0]

    def pixel(x_s: float) -> tuple[int, ...]:
        x, y = ax.transData.transform((x_s, 0.5))  # between two empty lanes
        return tuple(int(c) for c in rgba[height - 1 - round(y), round(x)])

    inside, outside = pixel(2.6), pixel(1.4)  # off the gridlines
    assert outside[:3] == (255, 255, 255)
    assert inside != outside
    r, _g, b, _a = inside
    assert r > 240 and b < 200  # amber over white


def test_scenario_bars_png(tmp_path: Path) -> None:
    def scenario(task: str, scenario: str, headline: str, rate: float) -> dict[str, object]:
        return {"task": task, "scenario": scenario, "headline": headline, "headline_rate": rate}

    reports = {
        "model": [
            scenario("user_backchannel", "backchannel", "continuation rate", 0.9),
            scenario("user_interruption", "interruption", "response rate", 0.75),
        ],
        "vad": [scenario("user_interruption", "interruption", "response rate", 1.0)],
    }
    first = scenario_bars_png(reports, tmp_path / "a.png")
    second = scenario_bars_png(reports, tmp_path / "b.png")
    assert png_size(first) == (10 * DPI, round(4.5 * DPI))
    assert first.read_bytes() == second.read_bytes()


def test_scenario_bars_need_a_report(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no policy reports"):
        scenario_bars_png({}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="no overlap scenario"):
        scenario_bars_png({"model": []}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
