"""``venus eval duplex``: the timeline rule alone, then whole runs of the three policies.

The profile test runs the scripted engines (tests/support/scripted.py): they listen unless
a result was injected, then say "Sure <call> done" every chunk, audibly. A harness injects
one result at chunk 1, so the model and always-continue start a reply there; the VAD
baseline answers the user's "yeah" at 0.2 s after its silence. Each sample then overlaps
that reply with user speech (espeak-ng, tests/evaluation/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.frontend import chunk_record
from support.scripted import Scripted

from venus.capabilities.contract import Contract
from venus.daemon.frontend.channel import Delegation, InjectedResult
from venus.daemon.frontend.playback import PlaybackEvent
from venus.daemon.frontend.timeline import ChunkRecord
from venus.errors import EvaluationError
from venus.evaluation.duplex import (
    DuplexSetup,
    limit_samples,
    rescore_duplex,
    run_duplex,
    worker_threads,
)
from venus.evaluation.duplex_report import RunInfo, write_duplex_report
from venus.evaluation.hints import Playback, reply_playbacks, timeline_hints
from venus.evaluation.metrics import DEFAULT_RULES, Behaviour, TimelineHints, Why, label_overlap
from venus.evaluation.score import find_samples
from venus.evaluation.vad import Segment

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "demo" / "engines" / "tiny"
POLICIES = ("model", "vad", "always-continue")
D = 10.0  # every input's duration, seconds


def speaking(index: int, reply: int, tokens: int = 25, **more: object) -> ChunkRecord:
    return chunk_record(
        index=index, start_s=float(index), decision="speak", reply_id=reply,
        speech_tokens=tokens, text_tokens=2, text="Sure done", **more,
    )  # fmt: skip


def quiet(index: int, **more: object) -> ChunkRecord:
    return chunk_record(index=index, start_s=float(index), **more)


def label(records: list[ChunkRecord], s: float, e: float) -> Behaviour:
    plays = reply_playbacks(records, 1.0)
    return timeline_hints(plays, Segment(s, e), D).label


# --- the timeline rule ------------------------------------------------------------------


def test_playback_is_rebuilt_from_the_queue_yields_and_turn_ends() -> None:
    # A reply from chunk 1 (heard from 2 s), a yield at chunk 3 (cut at 4 s), a new reply
    # at 5 with 50 tokens (2 s of speech) ended by turn_eos at 6: it plays out to 8 s.
    records = [
        quiet(0), speaking(1, 0), speaking(2, 0),
        quiet(3, reply_id=0, reply_ended=True),  # a yield with nothing queued: no cut
        quiet(4), speaking(5, 1, 50),
        chunk_record(index=6, start_s=6.0, decision="turn_eos", reply_id=1, reply_ended=True),
        quiet(7), quiet(8), quiet(9),
    ]  # fmt: skip
    assert reply_playbacks(records, 1.0) == (
        Playback(0, 2.0, 4.0, cut=True),
        Playback(1, 6.0, 8.0, cut=False),
    )
    cut = [quiet(0), speaking(1, 0, 50), speaking(2, 0, 50), quiet(3, reply_id=0,
           reply_ended=True, playback_stopped=True)]  # fmt: skip
    assert reply_playbacks(cut, 1.0) == (Playback(0, 2.0, 4.0, cut=True),)  # queued to 6 s


def test_the_timeline_rule_decides_by_reply_not_by_pause() -> None:
    talks_on = [quiet(0)] + [speaking(k, 0) for k in range(1, 10)]
    answers = [quiet(0), speaking(1, 0), speaking(2, 0), quiet(3, reply_id=0, reply_ended=True),
               quiet(4)] + [speaking(k, 1) for k in range(5, 10)]  # fmt: skip
    assert label(talks_on, 3.3, 4.0) == Behaviour.RESUME  # plays through the grace end
    assert label(answers, 3.3, 4.0) == Behaviour.RESPOND  # cut at 4, new reply from 6
    assert label(answers, 3.3, 6.5) == Behaviour.RESUME  # the new reply talks over the user
    assert label(answers, 0.5, 1.0) == Behaviour.UNCERTAIN  # nothing was playing at 0.5
    assert label(answers[:5], 3.3, 4.0) == Behaviour.UNCERTAIN  # cut, then silent
    late = [*answers[:5], quiet(5), quiet(6), quiet(7), speaking(8, 1), speaking(9, 1)]
    assert label(late, 3.3, 4.0) == Behaviour.UNCERTAIN  # the new reply (9 s) is past 4 + 4
    assert label(answers, 1.5, 1.9) == Behaviour.UNCERTAIN  # 1.9 + 0.1 < 2.0: before it

    # One reply with a chunk that decoded no speech: a 1 s gap in the audio, which alone
    # reads as a stop and an answer; the timeline says it carried on, so the label is not
    # confirmed.
    gap = [quiet(0), speaking(1, 0), speaking(2, 0), speaking(3, 0, 0)] + [
        speaking(k, 0) for k in range(4, 10)
    ]
    hints = timeline_hints(reply_playbacks(gap, 1.0), Segment(3.3, 3.7), D)
    assert hints == TimelineHints(Behaviour.RESUME)
    audio = [Segment(2.0, 4.0), Segment(5.0, 10.0)]
    outcome = label_overlap(audio, Segment(3.3, 3.7), D, hints=hints)
    assert outcome.audio_label == Behaviour.RESPOND
    assert (outcome.label, outcome.why) == (Behaviour.UNCERTAIN, Why.NOT_CONFIRMED)


# --- whole runs -------------------------------------------------------------------------


class ResultAtChunk1:
    """A harness that injects one result at chunk 1 and drops everything else."""

    def contracts(self) -> Sequence[Contract]:
        return ()

    def delegate(self, delegation: Delegation) -> None:
        return None

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        return [InjectedResult("item-1", "sunny")] if chunk_index == 1 else []

    def replying(self, session_id: str, reply_id: int, item_ids: tuple[str, ...]) -> None:
        return None

    def playback(self, event: PlaybackEvent) -> None:
        return None


def write_set(fdb, speech) -> None:
    """A "yeah" at 0.2 s, then an overlap while the replies play (from 2 s)."""
    q, y = speech.seconds("question"), speech.seconds("yeah")

    def sample(task: str, sid: str, at: float, clip, gain: float = 1.0) -> None:
        heard = fdb.place(D, (0.2, speech.yeah, None), (at, gain * clip, None))
        fdb.sample(task, sid, heard, None, [at, at + len(clip) / 16000])

    sample("user_interruption", "i-1", 3.3, speech.question)
    sample("user_interruption", "i-2", 4.4, speech.question)
    sample("user_backchannel", "b-1", 3.3, speech.yeah)
    sample("user_backchannel", "b-2", 5.5, speech.yeah)
    sample("talking_to_other", "o-1", 3.3, speech.question, gain=0.4)
    assert q > 1.5 and y < 0.6


def frames(path: Path) -> int:
    with wave.open(str(path), "rb") as w:
        return w.getnframes()


def test_the_three_policies_run_side_by_side_with_their_expected_profiles(
    scripted_export: Scripted, fdb, speech, tmp_path: Path
) -> None:
    write_set(fdb, speech)
    out = tmp_path / "run"
    runs = run_duplex(
        fdb.data, out, DuplexSetup(scripted_export.engines), POLICIES,
        harness_for=lambda _ref: ResultAtChunk1(),
    )  # fmt: skip
    assert [r.policy for r in runs] == list(POLICIES)
    refs = find_samples(fdb.data)
    for run in runs:
        assert [f"{s.task}/{s.sample_id}" for s in run.scores] == [r.name for r in refs]
        for ref in refs:
            folder = out / run.policy / ref.task / ref.sample_id
            assert frames(folder / "output.wav") == frames(ref.folder / "input.wav")
            assert (folder / "timeline.jsonl").is_file()
    by = {r.policy: {f"{s.task}/{s.sample_id}": s.overlap for s in r.scores} for r in runs}

    # The VAD baseline answers every interruption it was speaking through, and yields to
    # backchannels too (it never carries on); the timeline's label is confirmed.
    vad = by["vad"]
    assert all(o is not None and o.speaking_at_start for o in vad.values())
    for name, o in vad.items():
        assert o is not None and o.label == Behaviour.RESPOND, (name, o)
        assert o.timeline_label == o.audio_label == Behaviour.RESPOND
        assert o.stop_latency_s is not None and o.stop_latency_s <= 1.1
    # Always-continue never answers: it talks through everything.
    for name, o in by["always-continue"].items():
        assert o is not None and o.speaking_at_start, name
        assert o.label == o.timeline_label == Behaviour.RESUME, (name, o)
    # The scripted model yields at the chunk after its answer: silent when the user speaks.
    assert all(o is not None and o.label == Behaviour.UNCERTAIN for o in by["model"].values())

    info = RunInfo(str(fdb.data), str(out), "scripted", 0, 0.7, None, 1, 1.0, "venus eval duplex")
    json_path, md_path = write_duplex_report(runs, info, DEFAULT_RULES)
    md = md_path.read_text()
    rows = [line for line in md.splitlines() if line.startswith("| user_backchannel | ")]
    assert [row.split(" | ")[1] for row in rows][:3] == list(POLICIES)  # side by side
    assert "## Timeline labels" in md and "## Published figures, for reference" in md
    assert "github.com/DanielLin94144/Full-Duplex-Bench" in md
    combined = json.loads(json_path.read_text())
    assert [p["policy"] for p in combined["policies"]] == list(POLICIES)
    interruption = {p["policy"]: p["scenarios"][-1] for p in combined["policies"]}
    assert interruption["vad"]["task"] == "user_interruption"
    assert interruption["vad"]["respond_rate"] == 1.0
    assert interruption["always-continue"]["respond_rate"] == 0.0
    for policy in POLICIES:
        assert (out / policy / "report.json").is_file() and (out / policy / "report.md").is_file()
        timelines = sorted((out / "plots" / policy).glob("*.png"))
        assert timelines and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in timelines)
    assert (out / "plots" / "scenarios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # scored again from what the run left (nothing runs): the same scores, every policy
    assert rescore_duplex(fdb.data, out, POLICIES) == runs
    (out / "vad" / "user_backchannel" / "b-1" / "timeline.jsonl").unlink()
    with pytest.raises(EvaluationError, match=r"vad/user_backchannel/b-1: no output.wav and"):
        rescore_duplex(fdb.data, out, POLICIES)


def test_errors_name_the_data_or_engines_at_fault(fdb, speech, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EvaluationError, match="no Full-Duplex-Bench task folders"):
        run_duplex(empty, tmp_path / "o", DuplexSetup(TINY), POLICIES)
    write_set(fdb, speech)
    with pytest.raises(EvaluationError, match=r"cannot open the engines.*venus export"):
        run_duplex(fdb.data, tmp_path / "o", DuplexSetup(tmp_path / "nowhere"), POLICIES)
    with pytest.raises(EvaluationError, match="no decision policy"):
        run_duplex(fdb.data, tmp_path / "o", DuplexSetup(TINY), ())
    refs = find_samples(fdb.data)
    assert [r.name for r in limit_samples(refs, 1)] == [
        "talking_to_other/o-1", "user_backchannel/b-1", "user_interruption/i-1",
    ]  # fmt: skip
    with pytest.raises(EvaluationError, match="--limit must be at least 1"):
        limit_samples(refs, 0)


def test_venus_eval_duplex_runs_the_shipped_engines_in_workers_like_in_process(
    fdb, speech, tmp_path: Path
) -> None:
    """The command line, defaults (shipped tiny engines, every policy), two workers; the
    same outputs as one process."""
    write_set(fdb, speech)
    venus = Path(sys.executable).with_name("venus")
    env = {**os.environ, "HOME": str(tmp_path)}  # the engines' cache goes there
    done = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(fdb.data), "--out", "o", "--limit", "1",
         "--jobs", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "eval duplex: model 3/3, vad 3/3, always-continue 3/3" in done.stderr
    md = (tmp_path / "o" / "report.md").read_text()
    for policy in POLICIES:
        assert f"| user_interruption | {policy} | 1 |" in md
    # the daemon's choice, the shipped engines' recommendation: not in the command, reported
    assert "seed 0, temperature 0\n" in md and "--temperature" not in md
    setup = DuplexSetup(TINY, intra_op_threads=worker_threads(2), cache_dir=tmp_path / "cache")
    here = run_duplex(fdb.data, tmp_path / "here", setup, POLICIES, limit=1)
    for run in here:
        for s in run.scores:
            rel = Path(run.policy) / s.task / s.sample_id / "output.wav"
            assert (tmp_path / "o" / rel).read_bytes() == (tmp_path / "here" / rel).read_bytes()
    bad = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(tmp_path), "--out", "x"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert bad.returncode == 1 and "no Full-Duplex-Bench task folders" in bad.stderr


def test_the_temperature_reaches_the_daemons_configuration() -> None:
    assert DuplexSetup(TINY).temperature is None  # the daemon's choice
    assert DuplexSetup(TINY).config().model.temperature is None
    greedy = DuplexSetup(TINY, seed=3, temperature=0.0).config().model
    assert (greedy.temperature, greedy.seed, greedy.engines) == (0.0, 3, TINY)
    assert DuplexSetup(TINY, temperature=1.3).config().model.temperature == 1.3


def test_venus_eval_duplex_runs_at_the_temperature_given(fdb, speech, tmp_path: Path) -> None:
    """--temperature 0: the samples run greedy (their summary.json says so), and the
    report's run line and command line carry it."""
    write_set(fdb, speech)
    venus = Path(sys.executable).with_name("venus")
    env = {**os.environ, "HOME": str(tmp_path)}  # the engines' cache goes there
    done = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(fdb.data), "--out", "o", "--limit", "1",
         "--policy", "model", "--temperature", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = sorted((tmp_path / "o" / "model").glob("*/*/summary.json"))
    assert len(summaries) == 3
    for path in summaries:
        assert json.loads(path.read_text())["temperature"] == 0.0
    assert json.loads((tmp_path / "o" / "report.json").read_text())["run"]["temperature"] == 0.0
    md = (tmp_path / "o" / "report.md").read_text()
    assert "seed 0, temperature 0\n" in md
    assert "--policy model --limit 1 --temperature 0 --jobs 1`" in md
    # --rescore: the same reports from the outputs, the run's own line kept
    report = (tmp_path / "o" / "model" / "report.json").read_text()
    (tmp_path / "o" / "model" / "report.json").unlink()
    again = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(fdb.data), "--out", "o", "--rescore"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 samples x 1 policies scored again" in again.stdout
    assert (tmp_path / "o" / "model" / "report.json").read_text() == report
    assert (tmp_path / "o" / "report.md").read_text() == md
    wrong = subprocess.run(
        [str(venus), "eval", "duplex", "--data", str(fdb.data), "--out", "o", "--rescore",
         "--policy", "vad"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert wrong.returncode == 1 and "has no run of --policy vad" in wrong.stderr
