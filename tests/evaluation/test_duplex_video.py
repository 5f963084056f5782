"""``venus eval duplex`` and the sample a cut came from: a Full-Duplex-Bench cut of a
video-group sample runs with its source sample's video, read from the cut's start
(``source.offset_s``), and its first reply is compared with the data's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.frontend import chunk_record

from venus.daemon.frontend.timeline import ChunkRecord, TimelineWriter
from venus.errors import EvaluationError
from venus.evaluation.duplex import DuplexSetup, run_duplex
from venus.evaluation.duplex_report import first_replies, first_reply, first_reply_right
from venus.evaluation.score import SampleRef, find_samples
from venus.evaluation.source import SourceVideo, data_reply, source_video
from venus.hw.video_file import VideoFile

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "demo" / "engines" / "tiny"


def metadata(ref: SampleRef) -> dict[str, object]:
    data = json.loads(ref.annotation.read_text())
    assert isinstance(data, dict)
    return data


def group_of(data: Path, ref: SampleRef) -> str:
    source = metadata(ref)["source"]
    assert isinstance(source, dict)
    trajectory = json.loads(
        (data / "samples" / source["sample_id"] / "trajectory.json").read_text()
    )
    return str(trajectory["group"])


def test_a_cut_finds_its_source_video_and_offset(video_set: Path) -> None:
    refs = find_samples(video_set)
    groups = {ref.name: group_of(video_set, ref) for ref in refs}
    assert set(groups.values()) == {"video", "audio"}, "the fixture should hold both groups"
    for ref in refs:
        found = source_video(ref)
        source = metadata(ref)["source"]
        assert isinstance(source, dict)
        if groups[ref.name] == "audio":
            assert found is None, ref.name
            continue
        want = video_set / "samples" / str(source["sample_id"]) / "video.avi"
        assert found == SourceVideo(want, float(source["offset_s"])), ref.name
        assert found.offset_s > 0  # the cut starts inside the sample


def test_a_cut_sample_sees_its_video_from_the_cut_start(
    video_set: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model runs with the frames of the source video at input time + offset (the
    times the loop asks the video for say so), its timeline reads vision, and
    ``summary.json`` names the video; --no-video runs blind."""
    asked: dict[str, list[float]] = {}
    real = VideoFile.frame_at

    def spy(self: VideoFile, t_s: float):  # type: ignore[no-untyped-def]
        asked.setdefault(str(self.path), []).append(t_s)
        return real(self, t_s)

    monkeypatch.setattr(VideoFile, "frame_at", spy)
    setup = DuplexSetup(TINY, temperature=0.0, cache_dir=tmp_path / "cache")
    refs = find_samples(video_set)
    run_duplex(video_set, tmp_path / "with", setup, ("model",))
    seen_video = 0
    for ref in refs:
        folder = tmp_path / "with" / "model" / ref.task / ref.sample_id
        summary = json.loads((folder / "summary.json").read_text())
        records = [
            json.loads(line) for line in (folder / "timeline.jsonl").read_text().splitlines()
        ]
        video = source_video(ref)
        if video is None:
            assert summary["video"] is None and not any(r["vision"] for r in records)
            continue
        seen_video += 1
        assert summary["video"] == str(video.path)
        assert summary["video_offset_s"] == video.offset_s
        assert any(r["vision"] for r in records), ref.name
        # the loop asks for the frame at each chunk's end; the video is read offset later
        times = asked[str(video.path)][-len(records) :]
        ends = [r["start_s"] + 1.0 for r in records]
        assert times == pytest.approx([t + video.offset_s for t in ends]), ref.name
    assert seen_video >= 1

    blind = DuplexSetup(TINY, temperature=0.0, cache_dir=tmp_path / "cache", video=False)
    run_duplex(video_set, tmp_path / "blind", blind, ("model",))
    for ref in refs:
        folder = tmp_path / "blind" / "model" / ref.task / ref.sample_id
        assert json.loads((folder / "summary.json").read_text())["video"] is None
        records = (folder / "timeline.jsonl").read_text().splitlines()
        assert not any(json.loads(line)["vision"] for line in records)


def test_a_source_named_but_broken_is_an_error_naming_it(video_set: Path, tmp_path: Path) -> None:
    copy = tmp_path / "set"
    shutil.copytree(video_set, copy)
    refs = [r for r in find_samples(copy) if source_video(r) is not None]
    ref = refs[0]
    video = source_video(ref)
    assert video is not None
    video.path.unlink()
    with pytest.raises(EvaluationError, match=r"video\.avi and it is missing.*--no-video"):
        source_video(ref)
    data = metadata(ref)
    data["source"] = {"sample_id": "../elsewhere", "offset_s": -1}
    ref.annotation.write_text(json.dumps(data))
    with pytest.raises(EvaluationError, match=r"metadata\.json: source must be"):
        source_video(ref)
    # the benchmark folders alone (no samples/ beside them): no camera, no error
    alone = tmp_path / "alone"
    shutil.copytree(video_set / "full_duplex_bench", alone / "full_duplex_bench")
    assert all(source_video(r) is None for r in find_samples(alone))


def test_the_command_reports_the_camera_and_no_video_turns_it_off(
    video_set: Path, tmp_path: Path
) -> None:
    venus = Path(sys.executable).with_name("venus")
    env = {**os.environ, "HOME": str(tmp_path)}  # the engines' cache goes there
    total = len(find_samples(video_set))
    with_video = sum(source_video(r) is not None for r in find_samples(video_set))
    for extra, line in (
        ([], f"- camera: the video of the sample each was cut from, read from the cut's "
             f"start: {with_video} of {total} samples"),
        (["--no-video"], "- camera: none (--no-video)"),
    ):  # fmt: skip
        out = tmp_path / ("o" + "".join(extra))
        done = subprocess.run(
            [str(venus), "eval", "duplex", "--data", str(video_set), "--out", str(out),
             "--policy", "model", "--temperature", "0", *extra],
            capture_output=True, text=True, timeout=300, check=False, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        md = (out / "report.md").read_text()
        assert line in md, md[-800:]
        assert "| first reply as the data's |" in md
        section = md.split("## Timeline labels")[1].split("\n## ")[0]
        rows = [r for r in section.splitlines() if r.startswith("| user_")]
        assert rows and all(r.split(" | ")[-1].rstrip(" |").count("/") == 1 for r in rows)
        assert ("--no-video" in md.split("- command: ")[1].splitlines()[0]) == bool(extra)


# --- the first reply, against the data's ------------------------------------------------------


def speak(index: int, reply: int, text: str) -> ChunkRecord:
    return chunk_record(
        index=index, start_s=float(index), decision="speak", reply_id=reply, text=text
    )


def test_a_first_reply_is_the_datas_when_it_opens_with_its_words() -> None:
    data = "Okay, I'll keep an eye out."
    said = [chunk_record(index=0), speak(1, 0, "okay I'll"), speak(2, 0, " keep watching.")]
    assert first_reply(said) == "okay I'll keep watching."
    assert first_reply_right(said, data)  # the first three words, case and commas aside
    other = [speak(0, 0, "Okay, setting a timer."), speak(1, 1, "Okay, I'll keep an eye out.")]
    assert not first_reply_right(other, data)  # the second reply does not count
    assert not first_reply_right([chunk_record(index=0)], data)  # silent
    assert first_reply_right([speak(0, 0, "Sure.")], "Sure!")  # a shorter reply: all its words
    assert not first_reply_right([speak(0, 0, "Sure.")], "")  # nothing to compare with


def test_first_replies_compare_each_cut_with_its_source_samples_reply(
    video_set: Path, tmp_path: Path
) -> None:
    refs = find_samples(video_set)
    answers = {ref.name: data_reply(ref) for ref in refs}
    assert all(answers.values()), answers  # every cut here holds a reply of the data's
    right, wrong = refs[0], refs[1]
    for ref, text in ((right, answers[right.name]), (wrong, "Water boils at 100 degrees.")):
        folder = tmp_path / "model" / ref.task / ref.sample_id
        folder.mkdir(parents=True)
        assert text is not None
        half = len(text) // 2
        with TimelineWriter(folder / "timeline.jsonl") as w:
            for record in (
                chunk_record(index=0),
                speak(1, 0, text[:half]),
                speak(2, 0, text[half:]),
            ):
                w.write(record)
    # the others have no timeline: not counted
    replies = {ref: text for ref in refs if (text := answers[ref.name]) is not None}
    assert first_replies(tmp_path, "model", replies) == {right.name: True, wrong.name: False}
