"""Optional offline speech recognition for word-level scoring (``venus eval asr``).

The audio metrics (``score.py``) need no recogniser; this adds words on top of them. The
recogniser is CMU PocketSphinx (the ``pocketsphinx`` package, BSD-2-Clause), chosen
because its wheel ships its US English acoustic model, language model and dictionary:
nothing is downloaded, ever. It is a 2000s-era HMM recogniser, fast on two cores and
weak next to a neural one: on clear synthetic voices it gets short sentences mostly
right (flite voices better than espeak-ng's), so its word error rate is an upper bound
on what a listener would miss, not a measure of it (docs/evaluation.md has figures).
Install it with the ``asr`` extra: ``pip install 'venus[asr]'``.

Word error rates come from ``jiwer`` (the usual implementation: a word-level edit
distance) on normalised text: numbers spelled out as the synthesizers read them, then
lower case, everything but letters, digits and apostrophes turned into spaces. The
spelling (``spell_numbers``) is American English without "and" ("1440" -> "one thousand
four hundred forty", "-3" -> "minus three", "0.25" -> "zero point two five"), which is
what flite says and what PocketSphinx, whose dictionary has no digits, writes. Before
2026-12-06 digits were left as written, so every number a reply spoke counted as wrong
however well it was heard ("1440" heard right was five errors): 2.5 points of the
recogniser's word error rate on the data's own replies (docs/evaluation.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from venus.errors import EvaluationError
from venus.evaluation.vad import VAD_RATE_HZ, Segment, at_16k, model_segments

__all__ = [
    "ASR_MISSING",
    "PocketSphinx",
    "Recognizer",
    "Transcript",
    "Word",
    "WordErrors",
    "normalise_text",
    "spell_numbers",
    "word_errors",
]

Samples = NDArray[np.float32]

ASR_MISSING = (
    "offline ASR needs the pocketsphinx, jiwer and num2words packages (its model ships in "
    "the wheel): pip install 'venus[asr]'"
)
FRAME_RATE_HZ = 100  # PocketSphinx's default frame rate: segment times are in frames
# PocketSphinx's documented speed knob: at most this many HMMs searched per frame. On the
# random engines' noise-like speech it cut decoding 3x; on ten clear flite sentences the
# WER moved from 20.5% to 21.8%.
MAX_HMM_PER_FRAME = 3000
PAD_S = 0.2  # silence kept around each speech segment handed to the recogniser
FILLERS = re.compile(r"^(<s>|</s>|<sil>|\[[A-Z]+\]|\+\+.*\+\+)$")
ALTERNATIVE = re.compile(r"\(\d+\)$")  # "the(2)": a dictionary's second pronunciation
NOT_A_WORD = re.compile(r"[^a-z0-9']+")
# a number standing alone: "-3", "116.6", "1440", "20,000"; not the digits of "mp3", "3rd"
NUMBER = re.compile(r"(?<![\w.,])(-?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w])")
DIGIT_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@dataclass(frozen=True)
class Word:
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Transcript:
    words: tuple[Word, ...]

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)


class Recognizer(Protocol):
    name: str

    def transcribe(
        self, samples: Samples, rate_hz: int, segments: Sequence[Segment] | None = None
    ) -> Transcript:
        """Words in ``samples`` (mono float), times on its clock, heard only inside
        ``segments`` (default: the speech the VAD finds), each decoded as one utterance."""
        ...


class PocketSphinx:
    """PocketSphinx with the US English model its wheel ships (module doc)."""

    name = "pocketsphinx (en-us, shipped model)"

    def __init__(self) -> None:
        try:
            from pocketsphinx import Decoder  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            raise EvaluationError(ASR_MISSING) from None
        self._decoder: Any = Decoder(
            samprate=VAD_RATE_HZ, loglevel="FATAL", maxhmmpf=MAX_HMM_PER_FRAME
        )

    def transcribe(
        self, samples: Samples, rate_hz: int, segments: Sequence[Segment] | None = None
    ) -> Transcript:
        audio = at_16k(np.asarray(samples, np.float32), rate_hz)
        if segments is None:  # it hears words in digital silence: only decode speech
            segments = model_segments(audio, VAD_RATE_HZ)
        words: list[Word] = []
        for seg in segments:
            a = max(0, round((seg.start_s - PAD_S) * VAD_RATE_HZ))
            b = min(len(audio), round((seg.end_s + PAD_S) * VAD_RATE_HZ))
            if b > a:
                words.extend(self._utterance(audio[a:b], a / VAD_RATE_HZ))
        return Transcript(tuple(words))

    def _utterance(self, audio: Samples, offset_s: float) -> Iterable[Word]:
        pcm = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        d = self._decoder
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        for seg in d.seg():
            if FILLERS.match(seg.word):
                continue
            yield Word(
                ALTERNATIVE.sub("", seg.word),
                offset_s + seg.start_frame / FRAME_RATE_HZ,
                offset_s + (seg.end_frame + 1) / FRAME_RATE_HZ,
            )


def spell_numbers(text: str) -> str:
    """``text`` with each number in words, as flite reads it (module doc): the whole part
    by ``num2words`` with its "and"s and commas dropped, a fraction digit by digit."""
    try:
        from num2words import num2words  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise EvaluationError(ASR_MISSING) from None

    def spelled(m: re.Match[str]) -> str:
        sign, whole, fraction = m.groups()
        said = num2words(int(whole.replace(",", ""))).replace(",", " ").replace("-", " ")
        words = [w for w in said.split() if w != "and"]
        if sign:
            words.insert(0, "minus")
        if fraction:
            words += ["point", *(DIGIT_NAMES[int(d)] for d in fraction)]
        return " ".join(words)

    return NUMBER.sub(spelled, text)


def normalise_text(text: str) -> str:
    """Lower case; everything but letters, digits and apostrophes turned into spaces."""
    return " ".join(NOT_A_WORD.sub(" ", text.lower()).split())


@dataclass(frozen=True)
class WordErrors:
    """Word-level edit counts over one or more (reference, heard) pairs."""

    reference_words: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def wer(self) -> float | None:
        """(S + D + I) / N; None without reference words."""
        if self.reference_words == 0:
            return None
        errors = self.substitutions + self.deletions + self.insertions
        return errors / self.reference_words

    def __add__(self, other: WordErrors) -> WordErrors:
        return WordErrors(
            self.reference_words + other.reference_words,
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
        )


NO_ERRORS = WordErrors(0, 0, 0, 0)


def word_errors(reference: str, heard: str) -> WordErrors:
    """The edit counts of ``heard`` against ``reference`` (both with their numbers spelled
    out, then normalised)."""
    try:
        import jiwer
    except ImportError:
        raise EvaluationError(ASR_MISSING) from None
    ref, hyp = (normalise_text(spell_numbers(t)) for t in (reference, heard))
    if not ref:
        return WordErrors(0, 0, 0, len(hyp.split()))
    if not hyp:
        return WordErrors(len(ref.split()), 0, len(ref.split()), 0)
    out = jiwer.process_words(ref, hyp)
    return WordErrors(
        out.hits + out.substitutions + out.deletions,
        out.substitutions,
        out.deletions,
        out.insertions,
    )
