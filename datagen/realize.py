"""Plan -> audio: every turn synthesized, the plan retimed to the measured durations, and
the tracks placed at sample precision.

    realization = realize(config, index, seed)

1. **Synthesis.** Each turn is rendered with its own voice (``tts.render``); the plan's
   markers become what the synthesizer says (``tts_text``): a filler as its word,
   ``[pause N]`` as ``{pause:N}``, ``--`` as a short break (``RESTART_PAUSE_MS``). The
   rendered audio starts and ends with speech, so its length is the turn's duration.
2. **Retiming.** ``Plan.retime(durations)`` recomputes every start, cut and result time.
   A plan that no longer holds (an interruption now ends after the turn it cuts; or, in
   step 3, a turn whose speech is not where the plan says; or, on the chunk grid, a reply
   chunk in which no word starts, ``venus.datagen.align``; or, with
   ``events.reply_outlasts_s``, a line talked through that the reply does not outlast as
   heard, ``outlast_problem``: the last attempt is kept, with a warning) is drawn again,
   ``plan_sample(config, index, seed, attempt + 1)``, up to ``MAX_ATTEMPTS``.
3. **Placement and measurement** (``venus.datagen.mixdown.place``): the input, clean
   input and assistant tracks, each turn's measured start and end (within
   ``ONSET_TOLERANCE_S`` of the plan's, or a ``RealizationError``) and each overlap
   event's measured window. Babble noise gets ``BABBLE_TALKERS`` extra synthesized voices.

``video_scene`` turns the plan's scene into what ``video.write_frames`` draws.
"""

from __future__ import annotations

import logging
import math

from venus.datagen import acoustics as ac
from venus.datagen import tts, video
from venus.datagen.align import WordlessChunkError, check_targets, chunk_targets
from venus.datagen.config import GenerationConfig
from venus.datagen.mixdown import (
    BABBLE_STREAM,
    ONSET_TOLERANCE_S,
    PEAK_DBFS,
    SAMPLE_RATE,
    MeasuredTurn,
    Realization,
    RealizationError,
    Word,
    place,
    sample_rng,
)
from venus.datagen.plan import EPS_S, Plan, PlanError, Scene, Turn, Voice, segments
from venus.datagen.planner import plan_sample
from venus.datagen.planner_draft import draw_engine, draw_formant

__all__ = [
    "BABBLE_LINES", "BABBLE_TALKERS", "MAX_ATTEMPTS", "ONSET_TOLERANCE_S", "PEAK_DBFS",
    "RESTART_PAUSE_MS", "SAMPLE_RATE", "MeasuredTurn", "Realization", "RealizationError",
    "Word", "realize", "tts_text", "tts_voice", "video_scene",
]  # fmt: skip

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5  # plans drawn per sample before giving up
RESTART_PAUSE_MS = 150  # the break a "--" self-interruption makes
BABBLE_TALKERS = 4  # four or more voices blur into babble (acoustics.babble)
BABBLE_LINES = (
    "I told her we would meet at the station around six if the train is on time.",
    "They moved the market to the other side of the square last summer.",
    "Did you see how many people turned up for the concert on Saturday?",
    "The soup was cold by the time it reached our table, so we sent it back.",
    "He keeps saying he will fix the fence, but nothing has happened yet.",
    "We should book the tickets early, the prices always go up in June.",
)
_SCENE_BACKDROP = {"white": "white", "light_grey": "grey", "beige": "beige", "light_blue": "cyan"}


def realize(
    config: GenerationConfig, index: int, seed: int, *, cache: tts.SynthesisCache | None = None
) -> Realization:
    """Sample ``index`` of the set drawn with ``seed``, realized (see the module doc)."""
    spoken: dict[tuple[str, tts.Voice], tts.Utterance] = {}
    problem: PlanError | RealizationError | WordlessChunkError | None = None
    for attempt in range(MAX_ATTEMPTS):
        drawn = plan_sample(config, index, seed, attempt)
        utterances = [_speak(t, spoken, cache) for t in drawn.turns]
        try:
            plan = drawn.retime([u.duration_s for u in utterances])
            realization = place(plan, utterances, _babble_talkers(config, plan, cache))
            check_targets(plan, chunk_targets(realization))
            short = outlast_problem(realization, config.events.reply_outlasts_s)
            if short is not None and attempt < MAX_ATTEMPTS - 1:
                raise PlanError(short)
            if short is not None:
                log.warning("sample %d (seed %d), its last attempt: %s", index, seed, short)
            return realization
        except (PlanError, RealizationError, WordlessChunkError) as e:
            log.debug("sample %d attempt %d does not hold after synthesis: %s", index, attempt, e)
            problem = e
    raise RealizationError(
        f"sample {index} (seed {seed}): no plan held once synthesized, in {MAX_ATTEMPTS} "
        f"attempts (last: {problem}); try another seed or longer durations"
    )


def outlast_problem(realization: Realization, outlast_s: float) -> str | None:
    """The first overlap the assistant talks through that ends, as heard, less than
    ``outlast_s`` before its reply does (its cut, or its speech's measured end); None if
    none does, or ``outlast_s`` is 0 (``events.reply_outlasts_s``)."""
    if outlast_s <= 0:
        return None
    plan = realization.plan
    for k, event in enumerate(plan.events):
        if event.action != "continue_speaking" or event.over_turn is None:
            continue
        reply = plan.turns[event.over_turn]
        end_s = (
            reply.cut_at_s
            if reply.cut_at_s is not None
            else realization.turns[event.over_turn].end_s
        )
        tail_s = end_s - realization.windows_s[k][1]
        if tail_s < outlast_s - EPS_S:
            return (
                f"event {k} ({event.kind}) ends {tail_s:.2f} s before its reply does, "
                f"under events.reply_outlasts_s = {outlast_s}"
            )
    return None


# --- synthesis ------------------------------------------------------------------------------
def tts_voice(voice: Voice) -> tts.Voice:
    return tts.Voice(
        voice.engine, voice.name, voice.rate_wpm, voice.pitch, voice.gain_db, voice.formant
    )


def tts_text(text: str) -> str:
    """A turn's text as the synthesizer reads it: fillers as words, ``[pause N]`` as
    ``{pause:N}``, ``--`` as a short pause; no silence before the first or after the last
    word."""
    parts: list[str] = []
    for s in segments(text):
        if s.kind in ("words", "filler"):
            parts.append(s.text)
        elif parts:
            parts.append(f"{{pause:{s.pause_ms if s.kind == 'pause' else RESTART_PAUSE_MS}}}")
    while parts and parts[-1].startswith("{pause:"):
        parts.pop()
    return " ".join(parts)


def _speak(
    turn: Turn,
    spoken: dict[tuple[str, tts.Voice], tts.Utterance],
    cache: tts.SynthesisCache | None,
) -> tts.Utterance:
    key = (tts_text(turn.text), tts_voice(turn.voice))
    if key not in spoken:
        spoken[key] = tts.render(*key, cache=cache)
        if spoken[key].audio.size == 0:
            raise RealizationError(f"{turn.voice.engine} said nothing for {turn.text!r}")
    return spoken[key]


def _babble_talkers(
    config: GenerationConfig, plan: Plan, cache: tts.SynthesisCache | None
) -> list[ac.Audio]:
    """The extra voices of babble noise (none for other noises)."""
    if plan.acoustics.noise != "babble":
        return []
    rng = sample_rng(plan, BABBLE_STREAM)
    s = config.speech
    talkers = []
    for k in range(BABBLE_TALKERS):
        engine = draw_engine(rng, s)
        names = s.people_voices(engine)  # never the assistant's fixed voice
        name = names[int(rng.integers(len(names)))]
        rate = int(rng.integers(s.rate_wpm[0], s.rate_wpm[1] + 1))
        pitch = int(rng.integers(s.pitch[0], s.pitch[1] + 1))
        line = BABBLE_LINES[(k + int(rng.integers(len(BABBLE_LINES)))) % len(BABBLE_LINES)]
        voice = tts.Voice(engine, name, rate, pitch, formant=draw_formant(rng, s.formant))
        talkers.append(tts.synthesize(line, voice, cache=cache))
    return talkers


# --- video ----------------------------------------------------------------------------------
def video_scene(scene: Scene) -> video.Scene:
    """The plan's scene as ``video.write_frames`` draws it. The backdrops light grey and
    light blue are drawn as video's grey and cyan (no planned object has those colours)."""
    objects = tuple(
        video.SceneObject(
            kind=o.shape,
            colour=o.colour,
            x=o.x,
            y=o.y,
            size=o.size,
            text=o.text,
            name=o.name,
            start_s=o.from_s,
            end_s=math.inf if o.until_s is None else o.until_s,
        )
        for o in scene.objects
    )
    try:
        return video.Scene(objects, background=_SCENE_BACKDROP[scene.backdrop])
    except ValueError as e:
        raise RealizationError(f"the scene cannot be drawn: {e}") from e
