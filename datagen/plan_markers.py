"""Paralinguistic markers in a turn's text: ``{um}``-style fillers, ``[pause N]`` silences
and ``--`` self-interruptions (see ``venus.datagen.plan``).

``segments(text)`` splits a text into words, fillers, pauses and restarts for the
synthesizer; ``plain_text(text)`` is what was said without the markers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from venus.datagen.plan_types import FILLERS, MARKER, PAUSE_MS, PlanError


@dataclass(frozen=True)
class Segment:
    """A piece of a turn's text: ``words`` to say, a ``filler`` word, a ``pause``
    (``pause_ms`` of silence) or a ``restart`` (a cut-off: stop abruptly, then go on)."""

    kind: Literal["words", "filler", "pause", "restart"]
    text: str = ""
    pause_ms: int = 0


def segments(text: str) -> tuple[Segment, ...]:
    """``text`` split at its markers; PlanError for a malformed one."""
    out: list[Segment] = []
    at = 0
    for m in MARKER.finditer(text):
        _words(text[at : m.start()], out)
        filler, pause, restart = m.groups()
        if filler is not None:
            if filler not in FILLERS:
                raise PlanError(f"unknown filler {{{filler}}} in {text!r}; use one of {FILLERS}")
            out.append(Segment("filler", filler))
        elif pause is not None:
            if not PAUSE_MS[0] <= int(pause) <= PAUSE_MS[1]:
                raise PlanError(f"[pause {pause}] in {text!r}: pauses are {PAUSE_MS} ms")
            out.append(Segment("pause", pause_ms=int(pause)))
        else:
            assert restart is not None
            out.append(Segment("restart"))
        at = m.end()
    _words(text[at:], out)
    return tuple(out)


def _words(piece: str, out: list[Segment]) -> None:
    if any(c in piece for c in "{}[]"):
        raise PlanError(f"stray brace or bracket in {piece!r}: markers are {{um}}, [pause N]")
    if piece.strip():
        out.append(Segment("words", " ".join(piece.split())))


def plain_text(text: str) -> str:
    """What ``text`` says, without markers and fillers."""
    return " ".join(s.text for s in segments(text) if s.kind == "words")
