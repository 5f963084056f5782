"""Were a delegation run's argument values heard? (docs/evaluation.md)

A call's argument can be wrong because the model misheard the request or because it heard
it and did not write it out. This splits the free argument values of a ``venus eval
delegation`` run's matched calls by how the listening head heard the request that asked
for them (``venus validate --transcripts``: the head's greedy CTC transcript of each user
turn of the same set):

- a value counts when its words are in the request's words as written (``timer.seconds``
  15 in "set a timer for 15 seconds"). Enumerated values (an ``enum`` or ``const`` in the
  capability's schema, such as ``timer.action``) are left out, as are values the words do
  not spell (a time zone, "15:00" for "three o'clock");
- the request is the last user turn that began before the end of the reference call's
  chunk;
- the value is heard *exactly* when its words are in the transcript, *nearly* when some
  stretch of the transcript is within one edit in four characters of them
  (``NEAR_EDITS``), else *far*.

The edit distance of a value to the best stretch of a transcript is the approximate
substring search of Sellers (1980): Levenshtein's table with a free start and end in the
transcript. The recognisers' libraries at hand (``jiwer``, ``rapidfuzz``) align whole
strings, and ``rapidfuzz``'s partial ratio scores windows of the value's length by Indel
distance, which counts a substitution twice; the table is a dozen lines.

    python -m venus.evaluation.heard_args RUN TRANSCRIPTS DATA [--json FILE] [--examples N]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from venus.errors import EvaluationError
from venus.evaluation.asr import normalise_text

__all__ = ["NEAR_EDITS", "HeardValue", "edits_to_nearest", "heard_values", "how_heard", "main"]

NEAR_EDITS = 0.25  # edits per character of the value that still count as heard nearly
HOW = ("exact", "near", "far")


@dataclass(frozen=True)
class HeardValue:
    """One free argument value of a matched call: the words that asked for it, what the
    listening head heard there, how near (``HOW``), and whether the call had it right."""

    sample_id: str
    argument: str  # capability.key
    value: str  # its words, normalised
    said: str  # the request, normalised
    heard: str  # the head's transcript of it
    how: str
    right: bool


def edits_to_nearest(value: str, text: str) -> int:
    """The fewest character edits that turn ``value`` into some stretch of ``text``
    (module doc: a free start and end in ``text``)."""
    row = [0] * (len(text) + 1)  # value's first i characters against text ending at j
    for i, v in enumerate(value, 1):
        last, row[0] = row[0], i
        for j, t in enumerate(text, 1):
            last, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, last + (v != t))
    return min(row)


def how_heard(value: str, heard: str) -> str:
    """``exact``, ``near`` or ``far`` (module doc)."""
    if f" {value} " in f" {heard} ":
        return "exact"
    return "near" if edits_to_nearest(value, heard) <= NEAR_EDITS * len(value) else "far"


def _free_values(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, str]:
    """The top-level string and number values no ``enum`` / ``const`` pins, normalised."""
    props = schema.get("properties", {})
    out = {}
    for key, value in arguments.items():
        spec = props.get(key, {}) if isinstance(props, Mapping) else {}
        pinned = isinstance(spec, Mapping) and ("enum" in spec or "const" in spec)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and not pinned:
            out[key] = normalise_text(str(value))
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise EvaluationError(f"{path}: cannot be read as JSON ({e})") from None


def _transcripts(path: Path) -> dict[tuple[str, float], str]:
    """``venus validate --transcripts`` lines by (sample, turn start rounded to 10 ms)."""
    out = {}
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError as e:
        raise EvaluationError(f"{path}: cannot be read ({e})") from None
    for n, line in enumerate(lines, 1):
        try:
            t = json.loads(line)
            out[(str(t["sample_id"]), round(float(t["start_s"]), 2))] = str(t["heard"])
        except (ValueError, KeyError, TypeError) as e:
            raise EvaluationError(
                f"{path}:{n}: not a `venus validate --transcripts` line ({e})"
            ) from None
    return out


def heard_values(
    run: Path, transcripts: Path, data: Path, schemas: Mapping[str, Mapping[str, Any]]
) -> tuple[list[HeardValue], int]:
    """Every free value of ``run``'s matched calls said in the request's words, as heard
    (module doc); and how many such values had no transcript (a turn the set's samples
    do not hold whole)."""
    report = _read_json(run / "delegation.json")
    heard = _transcripts(transcripts)
    out, unread = [], 0
    for sample in report.get("samples", []):
        sid = sample["sample_id"]
        trajectory = _read_json(data / "samples" / sid / "trajectory.json")
        chunk_s = float(trajectory["chunk_s"])
        users = [t for t in trajectory["turns"] if t["speaker"] == "user"]
        for pair in sample["pairs"]:
            if "reference_arguments" not in pair:
                raise EvaluationError(
                    f"{run / 'delegation.json'}: a report from before 2026-12-07 "
                    "(no reference_arguments): run venus eval delegation again"
                )
            end_s = (pair["reference_chunk"] + 1) * chunk_s
            asked = [t for t in users if t["start_s"] < end_s]
            if not asked:
                continue
            turn = asked[-1]
            said = normalise_text(turn["text"])
            schema = schemas.get(pair["capability"], {})
            for key, value in _free_values(pair["reference_arguments"], schema).items():
                if not value or f" {value} " not in f" {said} ":
                    continue
                transcript = heard.get((sid, round(float(turn["start_s"]), 2)))
                if transcript is None:
                    unread += 1
                    continue
                right = bool(pair["right_by_argument"].get(key, False))
                how = how_heard(value, transcript)
                out.append(HeardValue(sid, f"{pair['capability']}.{key}", value, said,
                                      transcript, how, right))  # fmt: skip
    return out, unread


def table(values: Sequence[HeardValue]) -> str:
    """Values and those the call had right, by how the request was heard (markdown)."""
    rows = ["| the request's transcript | values | right |", "|---|---:|---:|"]
    for how in HOW:
        some = [v for v in values if v.how == how]
        right = sum(v.right for v in some)
        share = f" ({100 * right / len(some):.0f}%)" if some else ""
        rows.append(f"| {how} | {len(some)} | {right}{share} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m venus.evaluation.heard_args",
        description="Split a venus eval delegation run's free argument values by how the "
        "listening head heard the request (exactly, nearly, far off) and whether the call "
        "had them right (docs/evaluation.md).",
    )
    parser.add_argument("run", type=Path, help="a venus eval delegation --out directory")
    parser.add_argument("transcripts", type=Path, help="venus validate --transcripts FILE "
                        "of a checkpoint on the same set")  # fmt: skip
    parser.add_argument("data", type=Path, help="the set both ran on")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also every value as JSON")
    parser.add_argument("--examples", type=int, default=0, metavar="N",
                        help="also N wrong values of each kind, with what was heard")  # fmt: skip
    args = parser.parse_args(argv)
    from venus.evaluation.delegation_run import schemas

    try:
        values, unread = heard_values(args.run, args.transcripts, args.data, schemas())
    except EvaluationError as e:
        print(f"heard_args: {e}", file=sys.stderr)  # noqa: T201
        return 1
    print(table(values))  # noqa: T201
    if unread:
        print(f"({unread} values in turns the transcripts do not hold)")  # noqa: T201
    for how in HOW:
        wrong = [v for v in values if v.how == how and not v.right][: args.examples]
        for v in wrong:
            print(f"{how}: {v.argument} {v.value!r} in {v.said!r}, heard {v.heard!r}")  # noqa: T201
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(v) for v in values], indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
