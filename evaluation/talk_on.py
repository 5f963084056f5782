"""Results that come while the user talks on: what a model does with a result offered
after the harness's idle wait (``[harness] idle_wait_s``) while the user still speaks.

``splice`` copies a ``venus datagen`` set's delegation samples that have a completed
result, with ``talk_s`` seconds of the user's own speech (their turns cut from
``input.wav``, the room and noise with them, one after another and looped) put in where
the reference starts to say its first result (chunk r: where it comes, or, offered
early while the user spoke, the announcement after): the audio from r on is heard
``talk_s`` later. In the video group the camera holds chunk r's frame through the talk (one frame
a chunk, re-encoded as datagen writes it). The trajectory is the sample's, its
``duration_s`` longer and a ``talk_on`` record added ({"from_chunk": r, "seconds":
talk_s}); the other files are linked, not copied.
Delegations are called and answered before r, so ``venus eval delegation`` runs the copy
as it runs the set (its call figures stay comparable; its timing figures do not).

``talked_over`` reads such a run back: per sample, the chunks a result was offered in,
whether one came during the talk, and whether the assistant started speaking while the
talk went on after it (a result read over the user); ``python -m venus.evaluation.talk_on``
(``scripts/results-over-talk``) does both and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from venus.datagen.fdb import RATE_HZ as RATE
from venus.datagen.fdb import read_wav, write_wav
from venus.datagen.runner import OutputError
from venus.errors import EvaluationError

__all__ = ["TalkedOver", "main", "splice", "talked_over"]

TALK = "talk_on"


def _talk(pcm: NDArray[np.int16], traj: dict[str, Any], talk_s: int) -> NDArray[np.int16]:
    turns = [t for t in traj["turns"] if t["speaker"] == "user"]
    speech = [pcm[round(t["start_s"] * RATE) : round(t["end_s"] * RATE)] for t in turns]
    joined = np.concatenate(speech) if speech else np.zeros(0, np.int16)
    if joined.size == 0:
        raise EvaluationError(f"sample {traj['sample_id']}: the user never speaks")
    return np.resize(joined, talk_s * RATE)


def _splice_video(src: Path, dst: Path, chunk: int, frames: int) -> None:
    """``src``'s frames with frame ``chunk`` (or the last) shown ``frames`` more times."""
    import cv2

    from venus.datagen.video import JPEG_QUALITY

    capture = cv2.VideoCapture(str(src))
    fps = capture.get(cv2.CAP_PROP_FPS)
    images = []
    while (got := capture.read())[0]:
        images.append(got[1])
    capture.release()
    if not images:
        raise EvaluationError(f"{src}: no frame could be read")
    held = images[min(chunk, len(images) - 1)]
    images[chunk:chunk] = [held] * frames
    height, width = held.shape[:2]
    fourcc = cv2.VideoWriter.fourcc(*"MJPG")
    writer = cv2.VideoWriter(str(dst), cv2.CAP_OPENCV_MJPEG, fourcc, fps, (width, height))
    writer.set(cv2.VIDEOWRITER_PROP_QUALITY, JPEG_QUALITY)
    for image in images:
        writer.write(image)
    writer.release()


def _announced(traj: dict[str, Any], offered: int) -> int:
    """The chunk the reference starts to say the result offered at chunk ``offered``: that
    chunk itself, or, for a result offered early while the user spoke (datagen's
    ``delegation.early_offer_p``), the first after it that does not listen."""
    chunks = traj.get("chunks") or []
    return next(
        (k for k in range(offered, len(chunks)) if chunks[k]["decision"] != "listen"), offered
    )


def splice(data: Path, out: Path, talk_s: int = 12) -> int:
    """``data``'s delegation samples with a completed result, the user talking on from
    its first result's chunk for ``talk_s`` seconds, into ``out`` (module doc); returns
    how many."""
    index = data / "index.jsonl"
    if not index.is_file():
        raise EvaluationError(f"{data}: no index.jsonl; give a directory written by venus datagen")
    if talk_s < 1:
        raise EvaluationError(f"talk of {talk_s} s: give at least 1 s")
    lines = []
    for line in index.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line) if line.strip() else None
        if rec is None or rec["category"] != "delegation":
            continue
        traj = json.loads((data / rec["path"]).read_text(encoding="utf-8"))
        answered = [d["result_chunk"] for d in traj["delegations"] if d["result_chunk"] is not None]
        if not answered:
            continue
        r = _announced(traj, min(answered))
        src, dst = (data / rec["path"]).parent, (out / rec["path"]).parent
        try:
            pcm = read_wav(src / traj["files"]["input"])
        except OutputError as e:
            raise EvaluationError(str(e)) from e
        at = round(r * traj["chunk_s"] * RATE)
        dst.mkdir(parents=True, exist_ok=True)
        write_wav(
            dst / traj["files"]["input"],
            np.concatenate([pcm[:at], _talk(pcm, traj, talk_s), pcm[at:]]),
        )
        video = traj["files"].get("video")
        if video:
            _splice_video(src / video, dst / video, r, round(talk_s / traj["chunk_s"]))
        for f in src.iterdir():
            if f.name not in (traj["files"]["input"], video, "trajectory.json"):
                (dst / f.name).unlink(missing_ok=True)
                (dst / f.name).symlink_to(f.resolve())
        traj["duration_s"] += talk_s
        traj[TALK] = {"from_chunk": r, "seconds": talk_s}
        (dst / "trajectory.json").write_text(json.dumps(traj), encoding="utf-8")
        lines.append(line)
    if not lines:
        raise EvaluationError(f"{data}: no delegation sample with a completed result")
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


@dataclass(frozen=True)
class TalkedOver:
    samples: int  # spliced samples run
    offered_in_talk: int  # samples with a result offered while the user talked on
    read_over: int  # ... and the assistant began speaking after it, the talk still going
    offered_after: int  # samples whose first result offered after r came when it ended


def talked_over(data: Path, run: Path) -> TalkedOver:
    """What a ``venus eval delegation`` run (``run``: its ``--out``) of a spliced set did
    with the results the talk overlapped (module doc)."""
    samples = offered_in = read_over = after = 0
    for folder in sorted(data.glob("samples/*")):
        talk = json.loads((folder / "trajectory.json").read_text(encoding="utf-8")).get(TALK)
        timeline = run / "samples" / folder.name / "timeline.jsonl"
        if talk is None or not timeline.is_file():
            continue
        start, end = talk["from_chunk"], talk["from_chunk"] + talk["seconds"]
        records = [json.loads(x) for x in timeline.read_text(encoding="utf-8").splitlines()]
        chunks = [r for r in records if "decision" in r]
        offered = [r["index"] for r in chunks if r.get("results") and r["index"] >= start]
        speaking = {r["index"] for r in chunks if r["decision"] == "speak"}
        samples += 1
        during = [k for k in offered if k < end]
        if during:
            offered_in += 1
            read_over += any(k in speaking for k in range(during[0], end))
        elif offered:
            after += 1
    if samples == 0:
        raise EvaluationError(f"{run}: no run of a sample of {data} (run venus eval delegation)")
    return TalkedOver(samples, offered_in, read_over, after)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m venus.evaluation.talk_on",
        description="Results that come while the user talks on (docs/evaluation.md): "
        "splice a set, or read back venus eval delegation runs of a spliced set.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("splice", help="the set with the user talking on at its results")
    make.add_argument("data", type=Path, help="a venus datagen set")
    make.add_argument("out", type=Path, help="where the spliced set goes")
    make.add_argument("--talk-s", type=int, default=12, help="seconds of talk (default 12)")
    read = sub.add_parser("report", help="each run's results offered in the talk, read over it")
    read.add_argument("data", type=Path, help="the spliced set")
    read.add_argument("runs", type=Path, nargs="+", help="venus eval delegation --out dirs")
    args = parser.parse_args(argv)
    try:
        if args.command == "splice":
            n = splice(args.data, args.out, args.talk_s)
            print(f"{n} samples with the user talking on {args.talk_s} s: {args.out}")  # noqa: T201
            return 0
        rows = ["| run | samples | a result offered in the talk | read over the user | "
                "offered as it ended |", "|---|---:|---:|---:|---:|"]  # fmt: skip
        for run in args.runs:
            t = talked_over(args.data, run)
            cells = (run.name, t.samples, t.offered_in_talk, t.read_over, t.offered_after)
            rows.append("| " + " | ".join(map(str, cells)) + " |")
        print("\n".join(rows))  # noqa: T201
    except EvaluationError as e:
        print(f"talk_on: {e}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
