"""Speech from text with espeak-ng, flite and SVOX Pico, each run as a subprocess, as
16 kHz float32.

Text may carry pause markers: ``{pause:300}`` is 300 ms of silence. The text between
markers is synthesized segment by segment, each segment's leading and trailing silence
is trimmed (by :func:`venus.datagen.acoustics.onsets`), and exactly the asked silence is
put between them, so a pause measures its asked length, not the engine's idea of one.
The utterance starts and ends with speech (or with a marker's silence), so placing it at
sample ``s`` of a timeline puts its first onset at ``s``. Fillers and hesitations are
plain words in the text ("um", "uh", "I mean"); the engines say them as written.

Every engine is deterministic: the same text and voice give byte-identical audio.

espeak-ng and flite are Debian packages; SVOX Pico (Android's synthesizer: its two
English voices, ``en-US`` and ``en-GB``, are women's, HMM-based parametric voices) comes
from PyPI's ``ttspico`` (the ``voices`` extra), which builds Pico from its C sources and
ships its voice files: no model is downloaded. A voice the engine lacks is an
error listing the installed ones; flite would otherwise fall back to its default voice
and espeak-ng ignore an unknown variant without a word.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import soxr  # type: ignore[import-untyped, unused-ignore]
from numpy.typing import NDArray

from venus.datagen.acoustics import SAMPLE_RATE, onsets
from venus.errors import DatagenError

logger = logging.getLogger(__name__)

Engine = Literal["espeak-ng", "flite", "pico"]
ENGINES: tuple[Engine, ...] = ("espeak-ng", "flite", "pico")
PACKAGES: dict[str, str] = {"espeak-ng": "espeak-ng", "flite": "flite"}  # Debian
RATE_WPM = (80, 450)  # espeak-ng's -s range; flite is stretched to match
FORMANT = (0.75, 1.35)  # a voice's formant scale; 1.0 is its own
TIMEOUT_S = 60.0  # one segment's synthesis
_TRIM_BELOW_PEAK_DB = 40.0  # a segment's speech starts this far below its peak
_FADE_SAMPLES = 32  # 2 ms at 16 kHz, at each trimmed edge

# rate_wpm is espeak-ng's -s (which over a 63-word paragraph, silence trimmed, measures
# about 1.12 x: 179 words a minute at -s 160). flite's voices speak at their own rate and
# pitch; these make a flite voice as fast as espeak-ng at the same rate_wpm (its rate at
# duration_stretch 1, in espeak-ng's -s units) and scale pitch from its own median f0
# (Hz). Measured with espeak-ng 1.51 and flite 2.2 on the same paragraph.
_FLITE_WPM = {"kal": 182.8, "kal16": 184.9, "awb": 169.7, "rms": 158.3, "slt": 180.0}
_FLITE_F0_HZ = {"kal": 87.0, "kal16": 88.0, "awb": 129.0, "rms": 101.0, "slt": 172.0}
_FLITE_LIMITED = {"awb_time"}  # limited-domain voices (awb_time only says times)
# SVOX Pico (``ttspico``, pip): its two English voices, both women's, HMM-based parametric
# synthesis; their rate at rate 100% in espeak-ng's -s units (189 and 195 words a minute
# on a 59-word paragraph, trimmed; espeak-ng's -s 160 measures 179). Their median f0 is
# 166 / 174 Hz; pitch is asked in percent of it.
_PICO_WPM = {"en-US": 169.0, "en-GB": 174.1}
_PITCH_OCTAVE = 70.0  # pitch steps per octave: espeak-ng's -p 0..99 spans ~1.3 octaves

_PAUSE = re.compile(r"\{pause:(\d+)\}")
_MARKER = re.compile(r"\{[^{}]*\}")


class SynthesisError(DatagenError):
    """A speech engine is missing, refused the voice, or failed."""


@dataclass(frozen=True)
class Voice:
    """Who speaks, and how.

    Attributes:
        engine: "espeak-ng", "flite" or "pico".
        name: an installed voice (:func:`voices`); for espeak-ng, optionally with a
            variant, ``en-us+f3`` (:func:`espeak_variants`).
        rate_wpm: speaking rate in words per minute, 80-450.
        pitch: 0-99, 50 the voice's own; espeak-ng's ``-p``, and for flite the mean f0
            scaled by ``2 ** ((pitch - 50) / 70)`` (flite's rms voice ignores it); Pico's
            pitch percentage by the same factor.
        gain_db: applied to the samples after synthesis (may exceed full scale; the mix
            normalises).
        formant: the voice's formants scaled by this, 0.75-1.35 (1.0: its own; 1.2 is
            about a man's vocal tract made a woman's), its rate and pitch kept: see
            :func:`_argv`.
    """

    engine: Engine
    name: str
    rate_wpm: int = 160
    pitch: int = 50
    gain_db: float = 0.0
    formant: float = 1.0

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown TTS engine {self.engine!r}; use one of {ENGINES}")
        if not RATE_WPM[0] <= self.rate_wpm <= RATE_WPM[1]:
            raise ValueError(f"rate_wpm {self.rate_wpm} not within {RATE_WPM[0]}-{RATE_WPM[1]}")
        if not 0 <= self.pitch <= 99:
            raise ValueError(f"pitch {self.pitch} not within 0-99")
        if not math.isfinite(self.gain_db):
            raise ValueError(f"gain_db must be finite, got {self.gain_db}")
        if not FORMANT[0] <= self.formant <= FORMANT[1]:
            raise ValueError(f"formant {self.formant} not within {FORMANT[0]}-{FORMANT[1]}")


@dataclass(frozen=True)
class Segment:
    """Text between pause markers and where its speech lies: ``audio[start:end]``."""

    text: str
    start: int
    end: int


@dataclass(frozen=True, eq=False)
class Utterance:
    """Synthesized speech: 16 kHz mono float32 and each text segment's samples."""

    audio: NDArray[np.float32]
    segments: tuple[Segment, ...]

    @property
    def duration_s(self) -> float:
        return self.audio.size / SAMPLE_RATE


def synthesize(
    text: str, voice: Voice, *, cache: SynthesisCache | None = None
) -> NDArray[np.float32]:
    """``text`` spoken by ``voice``: 16 kHz mono float32. See :func:`render`."""
    return render(text, voice, cache=cache).audio


def render(text: str, voice: Voice, *, cache: SynthesisCache | None = None) -> Utterance:
    """``text`` spoken by ``voice``, pauses realized, with each segment's offsets.

    Args:
        text: words, with ``{pause:MS}`` markers; empty (or only markers) is silence.
        voice: the engine and voice; checked against what is installed.
        cache: keeps engine output on disk between runs; None synthesizes every time.

    Raises:
        SynthesisError: the engine is not installed, lacks the voice, or failed.
        ValueError: an unknown ``{...}`` marker.
    """
    parts = _split(text)
    if any(words for words, _ in parts):
        _check_voice(voice)
    gain = 10 ** (voice.gain_db / 20)
    pieces: list[NDArray[np.float32]] = []
    segments: list[Segment] = []
    at = 0
    for words, pause_ms in parts:
        if words:
            speech = _trimmed(_engine_audio(words, voice, cache)) * np.float32(gain)
            segments.append(Segment(words, at, at + speech.size))
            pieces.append(speech)
            at += speech.size
        if pause_ms:
            silence = np.zeros(round(pause_ms * SAMPLE_RATE / 1000), np.float32)
            pieces.append(silence)
            at += silence.size
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    return Utterance(audio.astype(np.float32, copy=False), tuple(segments))


def _split(text: str) -> list[tuple[str, int]]:
    """(words, pause after them in ms) pairs; words are whitespace-normalised."""
    for marker in _MARKER.findall(text):
        if not _PAUSE.fullmatch(marker):
            raise ValueError(
                f"unknown marker {marker!r} in {text!r}; the one known is {{pause:MS}}"
            )
    chunks = _PAUSE.split(text)  # words, ms, words, ms, ..., words
    parts: list[tuple[str, int]] = []
    for i in range(0, len(chunks), 2):
        words = " ".join(chunks[i].split())
        pause_ms = int(chunks[i + 1]) if i + 1 < len(chunks) else 0
        if words or pause_ms:
            parts.append((words, pause_ms))
    return parts


def _trimmed(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    """From the first speech onset to the last offset; empty when nothing is heard.

    Trimmed tighter (40 dB below the segment's peak) than :func:`onsets` detects (50 dB
    below), so the detector, run on the whole utterance, finds speech starting and
    ending where the segments do and pauses of the asked length; and faded over 2 ms at
    each cut, so cutting the engine's breath or room noise does not click.
    """
    regions = onsets(audio, SAMPLE_RATE, below_peak_db=_TRIM_BELOW_PEAK_DB)
    if not regions:
        return np.zeros(0, np.float32)
    speech: NDArray[np.float32] = audio[regions[0].start : regions[-1].end].copy()
    fade = min(_FADE_SAMPLES, speech.size // 2)
    if fade:
        ramp = (0.5 - 0.5 * np.cos(np.pi * (np.arange(fade) + 0.5) / fade)).astype(np.float32)
        speech[:fade] *= ramp
        speech[-fade:] *= ramp[::-1]
    return speech


# --- engines -------------------------------------------------------------------------


def _engine_audio(words: str, voice: Voice, cache: SynthesisCache | None) -> NDArray[np.float32]:
    """One segment from the engine, resampled to 16 kHz, untrimmed."""
    argv = _argv(words, voice)
    key = CacheKey(engine_version(voice.engine), tuple(argv), words)
    wav = cache.get(key) if cache is not None else None
    if wav is None:
        wav = _RUNS[voice.engine](argv, words)
        if cache is not None:
            cache.put(key, wav)
    return _decode(wav, voice)


def _argv(words: str, voice: Voice) -> list[str]:
    """The engine's command line (flite's without its output file).

    A formant scale ``a`` other than 1 is made by playing the engine's audio ``a`` times
    faster (:func:`_decode` reads it at ``a`` times its sample rate), which scales every
    frequency in it by ``a`` and its length by ``1 / a``; so the engine is asked to speak
    ``a`` times slower and ``a`` times lower, and what comes out has the asked rate and
    pitch with the formants moved. (espeak-ng's pitch is clamped at 0: a very low pitch
    with a large scale comes out a little higher than asked.)
    """
    scale = voice.formant
    if voice.engine == "espeak-ng":
        rate = max(RATE_WPM[0], round(voice.rate_wpm / scale))
        pitch = min(99, max(0, round(voice.pitch - _PITCH_OCTAVE * math.log2(scale))))
        return [
            "espeak-ng",
            "--stdout",
            "-v",
            voice.name,
            "-s",
            str(rate),
            "-p",
            str(pitch),
            "-a",
            "100",
            "--stdin",
        ]
    if voice.engine == "pico":  # rate and pitch in percent of the voice's own
        rate = min(500, max(20, round(100 * voice.rate_wpm / _PICO_WPM[voice.name] / scale)))
        percent = 100 * 2 ** ((voice.pitch - 50) / _PITCH_OCTAVE) / scale
        return ["pico", voice.name, str(rate), str(min(200, max(50, round(percent))))]
    stretch = _FLITE_WPM[voice.name] / voice.rate_wpm * scale
    argv = ["flite", "-voice", voice.name, "--setf", f"duration_stretch={stretch:.4f}"]
    if voice.pitch != 50 or scale != 1.0:
        f0 = _FLITE_F0_HZ[voice.name] * 2 ** ((voice.pitch - 50) / _PITCH_OCTAVE) / scale
        argv += ["--setf", f"int_f0_target_mean={f0:.1f}"]
    return [*argv, "-t", words]


PICO_RATE_HZ = 16_000  # SVOX Pico speaks at 16 kHz
_PICO_SAY = (  # argv: voice, rate %, pitch %; the text on stdin, 16-bit PCM on stdout
    "import sys, ttspico; e = ttspico.TtsEngine(sys.argv[1]); e.rate = int(sys.argv[2]); "
    "e.pitch = int(sys.argv[3]); sys.stdout.buffer.write(e.speak(sys.stdin.read()) or b'')"
)
PICO_MISSING = (
    "pico is SVOX Pico through the ttspico package (pip, built from source with a C "
    "compiler): pip install 'realtime-venus[voices]' (or ttspico), or take pico out of "
    "speech.engines"
)


def _run_espeak(argv: list[str], words: str) -> bytes:
    return _run(argv, words.encode()).stdout


def _run_pico(argv: list[str], words: str) -> bytes:
    """SVOX Pico (``argv``: "pico", voice, rate %, pitch %) in a Python process of its own,
    as a WAV: an engine that has spoken says the same text differently the next time (its
    state carries over), and each engine made in one process keeps about 190 kB after it
    is freed; a new process per segment is deterministic and leaks nothing (50 ms)."""
    if importlib.util.find_spec("ttspico") is None:
        raise SynthesisError(PICO_MISSING)
    pcm = _run([sys.executable, "-c", _PICO_SAY, *argv[1:]], words.encode()).stdout
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(PICO_RATE_HZ)
        w.writeframes(pcm)
    return out.getvalue()


def _run_flite(argv: list[str], _words: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="venus-flite-") as tmp:
        out = Path(tmp) / "out.wav"
        _run([*argv, "-o", str(out)], b"")
        return out.read_bytes()


_RUNS: dict[str, Callable[[list[str], str], bytes]] = {
    "espeak-ng": _run_espeak,
    "flite": _run_flite,
    "pico": _run_pico,
}


def _run(
    argv: list[str], stdin: bytes, *, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    engine = argv[0]
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False
        )
    except FileNotFoundError as e:
        raise SynthesisError(
            f"{engine} is not installed; install the Debian package: "
            f"sudo apt-get install {PACKAGES.get(engine, engine)}"
        ) from e
    except subprocess.TimeoutExpired as e:
        raise SynthesisError(f"{engine} took over {TIMEOUT_S:.0f} s: {argv}") from e
    if check and done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()
        raise SynthesisError(f"{engine} failed (exit {done.returncode}): {error}; command: {argv}")
    return done


def _decode(wav: bytes, voice: Voice) -> NDArray[np.float32]:
    """A 16-bit mono WAV as float32 at 16 kHz.

    espeak-ng streams its WAV with a placeholder length in the header, so the frames are
    all the bytes after the header, not the count it declares.
    """
    try:
        with wave.open(io.BytesIO(wav), "rb") as w:
            rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as e:
        raise SynthesisError(
            f"{voice.engine} wrote no readable WAV for voice {voice.name!r}: {e}"
        ) from e
    if width != 2 or channels != 1:
        raise SynthesisError(
            f"{voice.engine} wrote {channels}-channel {8 * width}-bit audio; expected 16-bit mono"
        )
    pcm = np.frombuffer(raw[: len(raw) // 2 * 2], "<i2").astype(np.float32) / 32768.0
    played_at = rate * voice.formant  # see _argv: a formant scale is a faster playback
    if played_at == SAMPLE_RATE or pcm.size == 0:
        return pcm
    return np.asarray(soxr.resample(pcm, played_at, SAMPLE_RATE, quality="HQ"), np.float32)


# --- voices --------------------------------------------------------------------------


@functools.cache
def engine_version(engine: Engine) -> str:
    """The engine's version line, e.g. ``eSpeak NG text-to-speech: 1.51``."""
    if engine == "pico":
        try:
            return f"SVOX Pico (ttspico {importlib.metadata.version('ttspico')})"
        except importlib.metadata.PackageNotFoundError:
            raise SynthesisError(PICO_MISSING) from None
    done = _run([engine, "--version"], b"", check=False)  # flite exits 1 after printing it
    out = (done.stdout + done.stderr).decode(errors="replace")
    out = out.split("Data at:")[0]  # espeak-ng goes on with its data path
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return next((line for line in lines if "version" in line or "eSpeak" in line), out.strip())


@functools.cache
def voices(engine: Engine) -> tuple[str, ...]:
    """The English voices ``engine`` has installed, sorted.

    espeak-ng: the language codes of ``espeak-ng --voices=en`` (MBROLA voices need the
    mbrola package and are left out); flite: ``flite -lv`` less limited-domain voices;
    pico: ``en-GB`` and ``en-US`` (``ttspico`` ships both).
    """
    if engine == "espeak-ng":
        listing = _run(["espeak-ng", "--voices=en"], b"").stdout.decode(errors="replace")
        names = set()
        for line in listing.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 5 and not fields[4].startswith(("mb/", "!v/")):
                names.add(fields[1])
        return tuple(sorted(names))
    if engine == "flite":
        listing = _run(["flite", "-lv"], b"").stdout.decode(errors="replace")
        found = listing.split(":", 1)[-1].split()
        return tuple(sorted(v for v in found if v not in _FLITE_LIMITED and v in _FLITE_WPM))
    if engine == "pico":
        engine_version("pico")  # installed?
        return tuple(sorted(_PICO_WPM))
    raise ValueError(f"unknown TTS engine {engine!r}; use one of {ENGINES}")


@functools.cache
def espeak_variants() -> tuple[str, ...]:
    """espeak-ng's voice variants (``en-us+f3``), as ``espeak-ng --voices=variant`` lists them."""
    listing = _run(["espeak-ng", "--voices=variant"], b"").stdout.decode(errors="replace")
    names = [
        f[4].removeprefix("!v/")
        for f in (line.split() for line in listing.splitlines()[1:])
        if len(f) >= 5
    ]
    return tuple(sorted(names))


def voice_problem(engine: Engine, name: str) -> str | None:
    """Why ``engine`` cannot speak with voice ``name`` (it has no such voice or variant),
    or None when it can.

    Raises:
        SynthesisError: the engine is not installed.
    """
    base, _, variant = name.partition("+") if engine == "espeak-ng" else (name, "", "")
    known = voices(engine)
    if base not in known:
        return f"{engine} has no voice {base!r}; installed: {', '.join(known)}"
    if variant and variant not in espeak_variants():
        return (
            f"espeak-ng has no variant {variant!r} (in {name!r}); "
            f"installed: {', '.join(espeak_variants())}"
        )
    return None


def _check_voice(voice: Voice) -> None:
    problem = voice_problem(voice.engine, voice.name)
    if problem is not None:
        raise SynthesisError(problem)


# --- cache ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheKey:
    """What makes an engine's output: its version, its command line, the text it read."""

    engine_version: str
    argv: tuple[str, ...]
    text: str


class SynthesisCache:
    """Engine output (WAV bytes) on disk, keyed by engine version, command line and text.

    Safe to share between processes: entries are written to a temporary file and renamed.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def get(self, key: CacheKey) -> bytes | None:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: CacheKey, wav: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(wav)
        os.replace(tmp, path)

    def _path(self, key: CacheKey) -> Path:
        fields = [key.engine_version, list(key.argv), key.text]
        digest = hashlib.sha256(json.dumps(fields).encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.wav"
