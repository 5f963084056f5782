"""Delegation scoring: what a system delegated against what the trajectory asked for.

Pure: a sample is two ``Track`` s (reference and hypothesis, from ``delegation_tracks``)
and the capabilities' input schemas.

- **Calls** are spans that start new work (``{"name", "arguments"}``, revisions and
  replacements included); malformed spans are counted apart, not as calls. Tool
  selection matches the two multisets of capability names in the sample: ``TP`` the
  matched pairs, ``FP`` the hypothesis' leftovers, ``FN`` the reference's.
- **Pairs**: within a capability, taken greedily by most arguments right, then nearest
  in time, then earliest; their arguments compared by ``delegation_args``.
- **Decisions** on pending work (cancel, retry, revise: a call superseding an item of its
  own capability, replace: of another) match as multisets of (kind, the capability of the
  item concerned), counted apart from calls.
- **Times**, per pair, on the sample clock: to the result, the chunk whose boundary it
  was injected at minus the call's chunk; to the spoken result, the first chunk at or
  after that where a reply starts (the one that delivers it) minus the call's; x chunk_s.
- **Result words said**, over the pairs the reference answered: the words the
  reference's reply took from the result (in the result's text and that reply's, case
  and punctuation aside; of those, the ones the system's own result also has, when its
  items say what it got), and the share of them the system's reply delivering its
  result says (0 where none did). The words of the text the model decoded, not heard (no ASR):
  whether it read the result out, not how clearly.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from venus.evaluation.delegation_args import Schemas, argument_checks

__all__ = [
    "ArgumentKey",
    "Call",
    "CallPair",
    "Decision",
    "DecisionKind",
    "Dist",
    "SampleScore",
    "SetScore",
    "Track",
    "by_argument",
    "result_words",
    "score_sample",
    "score_set",
    "words",
]

DecisionKind = Literal["cancel", "retry", "revise", "replace"]
DECISION_KINDS: tuple[DecisionKind, ...] = ("cancel", "retry", "revise", "replace")


@dataclass(frozen=True)
class Call:
    """A span that started work, written at the end of chunk ``chunk``; ``result_chunk``
    the chunk its result was injected at, ``spoken_chunk`` the first chunk of the reply
    that delivered it (None: never, within the sample)."""

    chunk: int
    capability: str
    arguments: Mapping[str, Any]
    result_chunk: int | None = None
    spoken_chunk: int | None = None
    said: str = ""  # the text of the reply that delivered the result ("" when none did)
    result_text: str = ""  # what its result said ("" when none came, or unknown)


def words(text: str) -> set[str]:
    """The words of ``text``, lower-cased, punctuation and symbols dropped."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def result_words(reference: Call, hypothesis: Call) -> tuple[int, int]:
    """The words the reference's reply took from its result (in both), of those the
    hypothesis's own result also has when it is known (a built-in such as the clock or a
    timer of other arguments answers it otherwise), and how many of them the
    hypothesis's reply delivering that result says."""
    key = words(reference.result_text) & words(reference.said)
    if hypothesis.result_text:
        key &= words(hypothesis.result_text)
    return len(key & words(hypothesis.said)), len(key)


@dataclass(frozen=True)
class Decision:
    """A decision on pending work: ``capability`` is that of the item it concerns."""

    chunk: int
    kind: DecisionKind
    capability: str


@dataclass(frozen=True)
class Track:
    """What one side delegated in one sample."""

    sample_id: str
    category: str
    chunk_s: float
    calls: tuple[Call, ...]
    decisions: tuple[Decision, ...] = ()
    malformed: int = 0  # spans that did not parse (never dispatched)


@dataclass(frozen=True)
class CallPair:
    reference: Call
    hypothesis: Call
    checks: tuple[tuple[str, bool, str], ...]  # argument_checks: (key, right, said)

    @property
    def arguments_right(self) -> int:
        return sum(right for _, right, _ in self.checks)

    @property
    def arguments(self) -> int:
        """Keys in either side's normalised arguments."""
        return len(self.checks)

    @property
    def exact(self) -> bool:
        return self.arguments_right == self.arguments


@dataclass(frozen=True)
class SampleScore:
    sample_id: str
    category: str
    chunk_s: float
    reference: tuple[Call, ...]  # every reference call
    hypothesis_calls: int
    pairs: tuple[CallPair, ...]
    missed: tuple[str, ...]  # capabilities of reference calls left unmatched
    unnecessary: tuple[str, ...]  # capabilities of hypothesis calls left unmatched
    decisions: Mapping[str, tuple[int, int, int]]  # kind -> (reference, hypothesis, matched)
    malformed: int

    @property
    def reference_calls(self) -> int:
        return len(self.reference)

    @property
    def pass_at_1(self) -> bool:
        """The right multiset of calls, nothing extra, every argument right."""
        return not self.missed and not self.unnecessary and all(p.exact for p in self.pairs)

    def seconds(
        self, which: Literal["result", "spoken"], side: Literal["hypothesis", "reference", "all"]
    ) -> list[float]:
        """Call to result injected / to the reply delivering it, seconds, per pair with one
        (``all``: per reference call with one, matched or not)."""
        out = []
        calls = (
            self.reference
            if side == "all"
            else [p.reference if side == "reference" else p.hypothesis for p in self.pairs]
        )
        for c in calls:
            at = c.result_chunk if which == "result" else c.spoken_chunk
            if at is not None:
                out.append((at - c.chunk) * self.chunk_s)
        return out


def _pair(reference: Track, hypothesis: Track, schemas: Schemas) -> list[CallPair]:
    pairs: list[CallPair] = []
    for capability in sorted({c.capability for c in reference.calls}):
        refs = [c for c in reference.calls if c.capability == capability]
        hyps = [c for c in hypothesis.calls if c.capability == capability]
        options = []
        for i, r in enumerate(refs):
            for j, h in enumerate(hyps):
                pair = CallPair(r, h, argument_checks(h.arguments, r.arguments,
                                                      schemas.get(r.capability)))  # fmt: skip
                wrong = pair.arguments - pair.arguments_right
                options.append((wrong, abs(h.chunk - r.chunk), r.chunk, h.chunk, i, j, pair))
        used_r: set[int] = set()
        used_h: set[int] = set()
        for *_, i, j, pair in sorted(options, key=lambda o: o[:6]):
            if i not in used_r and j not in used_h:
                used_r.add(i)
                used_h.add(j)
                pairs.append(pair)
    return sorted(pairs, key=lambda p: (p.reference.chunk, p.reference.capability))


def _leftover(calls: Iterable[Call], taken: Iterable[Call]) -> tuple[str, ...]:
    left = Counter(c.capability for c in calls)
    left.subtract(c.capability for c in taken)
    return tuple(sorted(left.elements()))


def score_sample(reference: Track, hypothesis: Track, schemas: Schemas) -> SampleScore:
    """One sample's calls and decisions matched (see the module doc)."""
    pairs = _pair(reference, hypothesis, schemas)
    decisions: dict[str, tuple[int, int, int]] = {}
    for kind in DECISION_KINDS:
        ref = Counter(d.capability for d in reference.decisions if d.kind == kind)
        hyp = Counter(d.capability for d in hypothesis.decisions if d.kind == kind)
        decisions[str(kind)] = (ref.total(), hyp.total(), (ref & hyp).total())
    return SampleScore(
        sample_id=reference.sample_id,
        category=reference.category,
        chunk_s=reference.chunk_s,
        reference=reference.calls,
        hypothesis_calls=len(hypothesis.calls),
        pairs=tuple(pairs),
        missed=_leftover(reference.calls, (p.reference for p in pairs)),
        unnecessary=_leftover(hypothesis.calls, (p.hypothesis for p in pairs)),
        decisions=decisions,
        malformed=hypothesis.malformed,
    )


@dataclass(frozen=True)
class Dist:
    """A distribution of seconds (``None`` statistics: no values)."""

    n: int
    mean_s: float | None
    median_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        if not values:
            return cls(0, None, None, None)
        return cls(len(values), statistics.fmean(values), statistics.median(values), max(values))


@dataclass(frozen=True)
class ArgumentKey:
    """One argument of one capability over the matched calls (``capability.key``): how
    many had it on either side, how many got it right, and the value the system said
    most there (JSON, or ``delegation_args.MISSING``) with how often: a model that writes
    one value whatever was asked shows here."""

    argument: str
    matched: int
    right: int
    said_most: str
    said_most_n: int


def by_argument(pairs: Sequence[CallPair]) -> tuple[ArgumentKey, ...]:
    """``ArgumentKey`` for every argument of the matched ``pairs``, most frequent first."""
    said: dict[str, list[tuple[bool, str]]] = {}
    for p in pairs:
        for key, right, value in p.checks:
            said.setdefault(f"{p.reference.capability}.{key}", []).append((right, value))
    out = []
    for argument, rows in said.items():
        value, n = Counter(v for _, v in rows).most_common(1)[0]
        out.append(ArgumentKey(argument, len(rows), sum(ok for ok, _ in rows), value, n))
    return tuple(sorted(out, key=lambda a: (-a.matched, a.argument)))


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _f1(tp: int, hypothesis: int, reference: int) -> float | None:
    """2 TP / (2 TP + FP + FN): 0 when one side is empty and the other not."""
    return _ratio(2 * tp, hypothesis + reference)


@dataclass(frozen=True)
class SetScore:
    """The set's figures: micro-averaged over calls (``None``: undefined, no denominator).

    ``pass_at_1`` over the samples with reference calls; ``missed_rate`` FN over reference
    calls; ``unnecessary_rate`` FP over hypothesis calls (every call on a sample without
    reference calls is one); ``other_with_calls_rate`` the share of samples without
    reference calls where the system delegated anyway."""

    samples: int
    with_calls: int  # samples with reference calls
    reference_calls: int
    hypothesis_calls: int
    matched: int
    precision: float | None
    recall: float | None
    f1: float | None
    argument_accuracy: float | None  # over the arguments of matched calls
    call_accuracy: float | None  # matched calls with every argument right
    pass_at_1: float | None
    missed_rate: float | None
    unnecessary_rate: float | None
    other_with_calls_rate: float | None
    malformed: int
    decisions: Mapping[str, tuple[int, int, int]]  # kind -> (reference, hypothesis, matched)
    decision_precision: float | None
    decision_recall: float | None
    decision_f1: float | None
    results_returned: float | None  # of matched calls the reference answered: came back
    results_spoken: float | None  # ... and a reply delivered it
    result_words_said: float | None  # of the words the reference's reply took from the result
    time_to_result: Dist
    time_to_spoken: Dist
    reference_time_to_result: Dist  # the reference's, over the matched calls
    reference_time_to_spoken: Dist
    all_reference_time_to_result: Dist  # the reference's, over all its calls
    all_reference_time_to_spoken: Dist
    arguments: tuple[ArgumentKey, ...] = ()  # by_argument: each argument's figures


def score_set(scores: Sequence[SampleScore]) -> SetScore:
    ref = sum(s.reference_calls for s in scores)
    hyp = sum(s.hypothesis_calls for s in scores)
    pairs = [p for s in scores for p in s.pairs]
    tp = len(pairs)
    answered = [p for p in pairs if p.reference.result_chunk is not None]
    said_words = [result_words(p.reference, p.hypothesis) for p in answered]
    precision, recall = _ratio(tp, hyp), _ratio(tp, ref)
    with_calls = [s for s in scores if s.reference_calls]
    others = [s for s in scores if not s.reference_calls]
    decisions = {
        k: tuple(sum(s.decisions[k][i] for s in scores) for i in range(3)) for k in DECISION_KINDS
    }
    d_ref, d_hyp, d_tp = (sum(v[i] for v in decisions.values()) for i in range(3))
    d_p, d_r = _ratio(d_tp, d_hyp), _ratio(d_tp, d_ref)

    def times(
        which: Literal["result", "spoken"], side: Literal["hypothesis", "reference", "all"]
    ) -> Dist:
        return Dist.of([t for s in scores for t in s.seconds(which, side)])

    return SetScore(
        samples=len(scores),
        with_calls=len(with_calls),
        reference_calls=ref,
        hypothesis_calls=hyp,
        matched=tp,
        precision=precision,
        recall=recall,
        f1=_f1(tp, hyp, ref),
        argument_accuracy=_ratio(
            sum(p.arguments_right for p in pairs), sum(p.arguments for p in pairs)
        ),
        call_accuracy=_ratio(sum(p.exact for p in pairs), tp),
        pass_at_1=_ratio(sum(s.pass_at_1 for s in with_calls), len(with_calls)),
        missed_rate=_ratio(sum(len(s.missed) for s in scores), ref),
        unnecessary_rate=_ratio(sum(len(s.unnecessary) for s in scores), hyp),
        other_with_calls_rate=_ratio(sum(s.hypothesis_calls > 0 for s in others), len(others)),
        malformed=sum(s.malformed for s in scores),
        decisions={k: (v[0], v[1], v[2]) for k, v in decisions.items()},
        decision_precision=d_p,
        decision_recall=d_r,
        decision_f1=_f1(d_tp, d_hyp, d_ref),
        results_returned=_ratio(
            sum(p.hypothesis.result_chunk is not None for p in answered), len(answered)
        ),
        results_spoken=_ratio(
            sum(p.hypothesis.spoken_chunk is not None for p in answered), len(answered)
        ),
        result_words_said=_ratio(sum(h for h, _ in said_words), sum(k for _, k in said_words)),
        time_to_result=times("result", "hypothesis"),
        time_to_spoken=times("spoken", "hypothesis"),
        reference_time_to_result=times("result", "reference"),
        reference_time_to_spoken=times("spoken", "reference"),
        all_reference_time_to_result=times("result", "all"),
        all_reference_time_to_spoken=times("spoken", "all"),
        arguments=by_argument(pairs),
    )
