"""The hour-scale memory checks: retrieval across 50 minutes, and `venus bench memory`.

Real parts: the video is drawn and read back with OpenCV, the frames go through the
tiny engines' vision encoder (ONNX Runtime), the store is the daemon's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport

from venus.bench.long_video import LANDMARK_SCENE, SCENE_S, make_long_video
from venus.daemon.config.schema import MemoryConfig
from venus.daemon.frontend.memory import SessionMemory
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.errors import BenchError
from venus.hw.video_file import VideoFile

WINDOW = 150  # chunks the emulated context holds: older ones are only in memory


def test_the_minute_5_scene_is_retrieved_at_minute_55(
    tiny_export: TinyExport, tmp_path: Path
) -> None:
    engines = Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",)))
    assert engines.vision is not None
    video = make_long_video(tmp_path / "hour.avi")  # 3,600 s; landmark at 300 s and 3,300 s
    assert video.scene_at(300) == video.scene_at(3300) == LANDMARK_SCENE
    budget_mb = 0.05  # 52 kB: an hour of tiny vision entries must be pooled and merged
    config = MemoryConfig(budget_mb=budget_mb, recall=3)
    memory = SessionMemory.open(config, tmp_path / "journal.sqlite3")
    assert memory is not None
    memory.begin("hour")
    size = engines.manifest.schedule.image_size
    first, again = video.chunks(video.landmark_s), video.chunks(video.repeat_s)
    recalled_at: list[int] = []
    top: list[tuple[int, int]] = []
    with VideoFile(video.path, size=size) as frames:
        for k in range(video.seconds):
            frame = frames.frame_at(k + 1.0)
            assert frame is not None
            pixels = (frame.image.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
            tokens = engines.vision.encode(pixels)
            if k == again[0]:  # before the store sees it: the top results of a search
                hits = memory.store.search("vision", tokens[0], 5, before_chunk=k - WINDOW)
                top = [(e.first_chunk, e.last_chunk) for e, _ in hits]
            found = memory.step(k, float(k), k + 1.0, {"vision": tokens}, max(0, k - WINDOW))
            if any(
                r.entry.first_chunk <= first[-1] and r.entry.last_chunk >= first[0] for r in found
            ):
                recalled_at.append(k)
            assert memory.store.nbytes <= budget_mb * 2**20, k  # within budget throughout
    assert any(a <= first[-1] and b >= first[0] for a, b in top), top
    # The occluded repeat recalls the first showing at once (and only once: afterwards
    # the repeat itself is in the context). Later, an entry merged with it may come back
    # for one of the scenes it was merged with.
    assert recalled_at and recalled_at[0] == again[0], recalled_at
    assert sum(k in again for k in recalled_at) == 1, recalled_at
    # The store really was squeezed: the old entries are pooled down to the last tier.
    tiers = [e.tier for e in memory.store.entries()]
    assert max(tiers) == len(config.tier_tokens) - 1
    assert len(memory.store) < video.seconds / SCENE_S + 10


def test_long_video_checks_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="must fit"):
        make_long_video(tmp_path / "v.avi", seconds=100, landmark_s=50, repeat_s=90)
    with pytest.raises(BenchError, match="occlusion"):
        make_long_video(tmp_path / "v.avi", seconds=100, occlusion=1.5, landmark_s=5, repeat_s=50)


def test_bench_memory_reports_flat_trends_and_plots(tmp_path: Path) -> None:
    """`venus bench memory` end to end, shortened to three minutes (the shipped engines)."""
    out = tmp_path / "bench"
    venus = Path(sys.executable).with_name("venus")
    cmd = [str(venus), "bench", "memory", "--minutes", "3", "--budget-mb", "0.05"]
    done = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "memory.json").read_text())
    assert set(report["sides"]) == {"memory", "baseline"}
    memory = report["sides"]["memory"]
    assert memory["chunks"] == 180
    assert 0 < memory["memory_bytes_max"] <= 0.05 * 2**20
    assert report["sides"]["baseline"]["memory_bytes_max"] == 0  # memory off
    for side in report["sides"].values():
        for series in ("rss_mib", "latency_ms"):
            assert np.isfinite(side[series]["slope_per_hour"])
            assert side[series]["last_over_first"] > 0
    assert report["memory_over_baseline"]["latency"] > 0
    assert (out / "memory.png").stat().st_size > 10_000
    series = json.loads((out / "series.json").read_text())
    assert len(series["memory"]["latency_ms"]) == len(series["memory"]["rss_mib"]) == 180
    assert "| memory | 180 |" in done.stdout and "| baseline | 180 |" in done.stdout
