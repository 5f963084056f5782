"""``venus run --offline``: the frontend over a WAV file (and a video), as fast as it goes.

Same loop as real time (``loop``), with a file source, a schedule-clocked playback track
and the offline clock; deadlines are measured but never acted on, so the same input,
engines and seed give the same timeline decisions, text and audio. Writes to ``out_dir``:
``timeline.jsonl``, ``output.wav``, ``conversation.wav`` and ``summary.json``.

Timing convention: the speech of chunk t enters the playback queue at the end of chunk t
on the schedule (compute time is not simulated), and plays from there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from venus.daemon.config.schema import VenusConfig
from venus.daemon.frontend.channel import HarnessChannel
from venus.daemon.frontend.clock import OfflineClock
from venus.daemon.frontend.loop import FrameSource, no_frames
from venus.daemon.frontend.outputs import TIMELINE_JSONL, OutputFiles, write_outputs
from venus.daemon.frontend.playback import TrackOut
from venus.daemon.frontend.policy import DecisionPolicy, ModelPolicy
from venus.daemon.frontend.sampling import sampling_of
from venus.daemon.frontend.session import open_frontend
from venus.daemon.frontend.summary import Summary, summarize, summary_json
from venus.daemon.frontend.timeline import ChunkRecord, TimelineWriter
from venus.engines.runners import Engines
from venus.hw.frames import VISION_SIZE
from venus.hw.sources import FileAudioSource
from venus.hw.video_file import VideoFile

log = logging.getLogger(__name__)


def _shifted(frames: FrameSource, offset_s: float) -> FrameSource:
    """``frames`` read ``offset_s`` later on their own clock."""
    if not offset_s:
        return frames
    return lambda t_s: frames(t_s + offset_s)


@dataclass(frozen=True)
class OfflineRun:
    out_dir: Path
    records: list[ChunkRecord]
    summary: Summary
    files: OutputFiles
    wall_s: float
    input_s: float


def run_offline(
    cfg: VenusConfig,
    engines: Engines,
    input_wav: Path,
    out_dir: Path,
    video: Path | None = None,
    on_record: Callable[[ChunkRecord], None] = lambda _r: None,
    harness: HarnessChannel | None = None,
    extra_summary: dict[str, object] | None = None,
    session_id: str | None = None,
    policy: DecisionPolicy | None = None,
    video_offset_s: float = 0.0,
    paced: bool = False,
) -> OfflineRun:
    """The frontend over ``input_wav``; outputs in ``out_dir``. ``policy`` takes the
    control decisions (default ``ModelPolicy``; ``VadPolicy`` and ``AlwaysContinuePolicy``
    are the evaluation baselines); ``summary.json`` names it. ``video_offset_s``: where
    the input starts on the video's clock (an input cut from a longer recording: the
    frame at input time t is the video's at t + offset). ``paced``: one chunk per chunk
    period of wall time (``OfflineClock``), so a harness's results arrive on the input's
    clock."""
    if not video_offset_s >= 0:
        raise ValueError(f"video_offset_s must be >= 0, not {video_offset_s!r}")
    policy = policy or ModelPolicy()
    out_dir.mkdir(parents=True, exist_ok=True)
    s = engines.manifest.schedule
    rate = s.sample_rate_out
    track = TrackOut(rate, buffer_samples=round(cfg.playback.buffer_ms * rate / 1000))
    source = FileAudioSource(input_wav, chunk_s=s.chunk_s)
    frames: FrameSource = no_frames
    video_file = None
    if video is not None and engines.vision is not None:
        video_file = VideoFile(video, size=s.image_size or VISION_SIZE)
        frames = _shifted(video_file.frame_at, video_offset_s)
    elif video is not None:
        log.warning("%s: the engines are an audio frontend; the video is not used", video)
    with TimelineWriter(out_dir / TIMELINE_JSONL) as timeline:

        def sink(record: ChunkRecord) -> None:
            timeline.write(record)
            on_record(record)

        clock = OfflineClock(track, rate, paced)
        frontend = open_frontend(cfg, engines, track, clock, sink, harness, session_id, policy)
        started = time.perf_counter()
        try:
            with source:
                frontend.loop.run(frontend.stream, source, frames)
        finally:
            frontend.close(end_session=True)
            if video_file is not None:
                video_file.close()
        wall_s = time.perf_counter() - started
    input_s = source.duration_s
    files = write_outputs(out_dir, input_wav, track.track(round(input_s * rate)), rate)
    summary = summarize(frontend.records, wall_s, input_s)
    how = dataclasses.asdict(sampling_of(cfg.model, engines.manifest))
    data = {
        **summary_json(summary),
        "policy": policy.name,
        "sampling": how,
        "paced": paced,
        **(extra_summary or {}),
    }
    (out_dir / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    return OfflineRun(out_dir, frontend.records, summary, files, wall_s, input_s)
