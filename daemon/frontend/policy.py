"""Decision policies: who takes each chunk's control decision (named strategies).

At every chunk the model samples its decision (``listen`` / ``speak`` / ``turn_eos``,
``docs/timeline.md``). A ``DecisionPolicy`` may replace it at that point, before the
token enters the context, so the context holds what was done and everything after (the
text, speech, delegations, playback cut on a yield, the harness) runs the production
path unchanged. Evaluation baselines run the same offline code as the model this way:

- ``ModelPolicy`` (``model``, the default): the model's own decision.
- ``VadPolicy`` (``vad``): a cascade's reaction, from the loop's VAD on the user's
  audio only: stop on any user speech that overlaps a reply, answer once the user has
  been silent for ``end_of_turn_s`` (the rule is on the class).
- ``AlwaysContinuePolicy`` (``always-continue``): never yields; a ``listen`` while a
  reply is open becomes ``speak``. The model still starts and ends its replies.

Policies are frozen (one may serve many runs); the one piece of state the VAD rule
needs, the user's turn, is per session and lives in the ``Stream`` (``UserTurn``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, get_args

from venus.daemon.frontend.timeline import Decision, PolicyName
from venus.errors import ConfigError
from venus.hw.vad import VadStats

__all__ = [
    "END_OF_TURN_S",
    "POLICY_NAMES",
    "AlwaysContinuePolicy",
    "DecisionPoint",
    "DecisionPolicy",
    "ModelPolicy",
    "UserTurn",
    "VadPolicy",
    "policy_named",
]

POLICY_NAMES: tuple[PolicyName, ...] = get_args(PolicyName)
# A pause the evaluation merges into one user turn (gaps under 0.6 s, as Full-Duplex-Bench
# does) is not an end of turn; a cascade's end-of-turn timeout sits in the same range.
END_OF_TURN_S = 0.6


@dataclass
class UserTurn:
    """The user's turn as the VAD heard it, carried from chunk to chunk (per session)."""

    silence_s: float = 0.0  # since the user's last speech ended (0 while speaking)
    spoke: bool = False  # the user spoke since the assistant's last reply began


@dataclass(frozen=True)
class DecisionPoint:
    """What a policy sees at the decision of one chunk."""

    model: Decision  # what the model chose
    speaking: bool  # a reply is open: its speech plays or is queued; listen cuts it
    vad: VadStats | None  # the chunk's input speech (None: the loop runs no VAD)
    chunk_s: float  # the chunk's length, seconds


class DecisionPolicy(Protocol):
    """Chooses the decision the chunk takes, given the model's (``point.model``)."""

    name: ClassVar[PolicyName]

    def decide(self, point: DecisionPoint, turn: UserTurn) -> Decision: ...


@dataclass(frozen=True)
class ModelPolicy:
    """The model decides: what production runs."""

    name: ClassVar[PolicyName] = "model"

    def decide(self, point: DecisionPoint, turn: UserTurn) -> Decision:
        return point.model


@dataclass(frozen=True)
class AlwaysContinuePolicy:
    """Never yields: while a reply is open a ``listen`` becomes ``speak``; otherwise the
    model decides (it starts replies, and ends them with ``turn_eos``, on its own)."""

    name: ClassVar[PolicyName] = "always-continue"

    def decide(self, point: DecisionPoint, turn: UserTurn) -> Decision:
        if point.speaking and point.model == "listen":
            return "speak"
        return point.model


@dataclass(frozen=True)
class VadPolicy:
    """A cascade's turn-taking from the VAD of the user's audio (``hw.vad``).

    Per chunk, first the user's turn is updated from the chunk's ``VadStats``:

    - *heard*: the VAD marked speech in the chunk (``speech_s > 0``: a segment it opened
      after 30 ms of voiced frames, or one still open from the chunk before);
    - ``silence_s``: 0 if the chunk ends in speech; else ``chunk_s`` minus the last
      segment end in the chunk (the first unvoiced frame of the closing pause); else,
      with no segment end in the chunk, the previous value plus ``chunk_s``. A pause
      that begins in one chunk and closes (after the VAD's 150 ms hangover) in the next
      counts from the next chunk's start: up to 150 ms short;
    - ``spoke`` becomes true when heard.

    Then the decision:

    1. a reply is open and the user was heard -> ``listen``: yield, playback is cut;
    2. a reply is open, the user silent -> the model's ``speak`` or ``turn_eos`` (the
       model ends its reply), a model ``listen`` -> ``speak`` (no yield without speech);
    3. no reply open, the user spoke and has been silent at least ``end_of_turn_s`` ->
       ``speak`` (the model writes the answer as usual); ``spoke`` is cleared;
    4. otherwise -> ``listen`` (never a reply on the model's own initiative, nor for an
       injected result).

    So every overlapping utterance, backchannel or not, cuts the reply and is answered
    from the first boundary at which the user has been silent ``end_of_turn_s``: that
    long to one chunk longer after the speech ends as the VAD times it (webrtcvad hears
    about 0.1 s past the end). A reply is open from its first ``speak`` until it ends; the
    speech still queued after a ``turn_eos`` plays out, uncut, as with the model.
    """

    name: ClassVar[PolicyName] = "vad"
    end_of_turn_s: float = END_OF_TURN_S

    def __post_init__(self) -> None:
        if not self.end_of_turn_s > 0:
            raise ConfigError(f"VadPolicy end_of_turn_s must be > 0 s, not {self.end_of_turn_s}")

    def decide(self, point: DecisionPoint, turn: UserTurn) -> Decision:
        vad = point.vad
        if vad is None:
            raise ConfigError("the vad decision policy needs the loop's VAD; run it with one")
        heard = vad.speech_s > 0
        if vad.ends_in_speech:
            turn.silence_s = 0.0
        elif vad.offsets:
            turn.silence_s = max(0.0, point.chunk_s - vad.offsets[-1])
        else:
            turn.silence_s += point.chunk_s
        turn.spoke = turn.spoke or heard
        if point.speaking:
            if heard:
                return "listen"
            return "speak" if point.model == "listen" else point.model
        if turn.spoke and turn.silence_s >= self.end_of_turn_s:
            turn.spoke = False
            return "speak"
        return "listen"


def policy_named(name: str) -> DecisionPolicy:
    """The policy called ``name`` (one of ``POLICY_NAMES``), with its default settings."""
    policies: dict[str, DecisionPolicy] = {
        "model": ModelPolicy(),
        "vad": VadPolicy(),
        "always-continue": AlwaysContinuePolicy(),
    }
    if name not in policies:
        raise ConfigError(f"unknown decision policy {name!r}; one of {', '.join(POLICY_NAMES)}")
    return policies[name]
