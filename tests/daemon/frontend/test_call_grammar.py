"""The delegation grammar: spans decoded under it always parse and name a capability that
is online, and every span the training data writes is one it allows.

Real parts: llguidance, the shipped venus-tiny tokenizer (a byte-level BPE), the mock
domains' and built-ins' contracts, and (for the whole step) random tiny engines exported
by ``venus export``, whose free text is anything but JSON.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport
from jsonschema import validators  # type: ignore[import-untyped]

from venus.capabilities.contract import Contract
from venus.capabilities.inprocess import Capability, Context, InProcessTransport
from venus.daemon.frontend.call_grammar import CallGrammar, SpanMatcher, failed_item
from venus.daemon.frontend.channel import Delegation, InjectedResult, NoHarness
from venus.daemon.frontend.deadline import Deadlines
from venus.daemon.frontend.delegation import ParsedCall, parse_call
from venus.daemon.frontend.step import ChunkInput, ChunkStep, Samplers, StepSettings
from venus.daemon.harness.core import Capture
from venus.daemon.harness.service import Harness
from venus.datagen.domains import DOMAINS
from venus.datagen.domains_contracts import contracts
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import Greedy, LogitBias, Sampler, TopP
from venus.engines.tokenizer import Tokenizer
from venus.errors import EngineError

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "demo" / "engines" / "tiny"
CLOSE = 10_000  # a stand-in id for <|/delegate|>, past every vocabulary here


@pytest.fixture(scope="module")
def grammar() -> CallGrammar:
    made = CallGrammar.open(shipped_tokenizer())
    assert made is not None
    assert CallGrammar.open(shipped_tokenizer()) is made  # made once per tokenizer
    return made


def registry() -> list[Contract]:
    return list(contracts().values())


def accepts(
    grammar: CallGrammar, cs: Sequence[Contract], span: str, failed: Sequence[str] = ()
) -> bool:
    """Whether ``span``, as the shipped tokenizer encodes it, is a whole call (once the
    session was shown the ``failed`` results)."""
    matcher = grammar.start(cs, failed)
    ids = encode(span)
    scores = np.zeros(CLOSE + 1)
    for token in ids:
        if not np.isfinite(matcher.restrict(scores.copy(), CLOSE)[token]):
            return False
        matcher.consume(token)
    return bool(np.isfinite(matcher.restrict(scores.copy(), CLOSE)[CLOSE]))


def encode(text: str) -> list[int]:
    """Token ids of ``text`` as the shipped engines' tokenizer (Hugging Face) makes them."""
    return shipped_tokenizer().encode(text)


@functools.cache
def shipped_tokenizer() -> Tokenizer:
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    text_vocab = min(manifest["special_tokens"].values())
    return Tokenizer.open(SHIPPED / "tokenizer.json", text_vocab)


def decode(
    grammar: CallGrammar, matcher: SpanMatcher, rng: np.random.Generator, choose: object
) -> str:
    """A span written by random logits under the grammar, until it closes."""
    out: list[int] = []
    for _ in range(400):
        scores = matcher.restrict(rng.normal(0.0, 3.0, CLOSE + 1), CLOSE)
        token = choose(scores)  # type: ignore[operator]
        if token == CLOSE:
            return bytes(grammar.tokenizer.decode_bytes(out)).decode("utf-8")
        matcher.consume(token)
        out.append(token)
    raise AssertionError("the span never closed")


def test_every_call_the_training_data_writes_is_allowed(grammar: CallGrammar) -> None:
    cs = registry()
    rng = np.random.default_rng(0)
    seen = set()
    for domain in DOMAINS.values():
        for _ in range(25):
            request = domain.make(rng)
            revised = domain.revise(rng, request)
            call = {"name": request.capability, "arguments": dict(request.arguments)}
            revision = {
                "name": revised.capability,
                "arguments": dict(revised.arguments),
                "supersedes": request.capability,
            }
            for span in (
                json.dumps(call, ensure_ascii=False),  # as datagen's plan_parts writes them
                json.dumps(revision, ensure_ascii=False),
                json.dumps({"cancel": request.capability}),
                json.dumps({"retry": "3f2a9c1b"}),
            ):
                assert accepts(grammar, cs, span), span
            seen.add(request.capability)
    assert seen == set(DOMAINS)
    # and what it is there to stop
    for bad in (
        '{"name": "weather", "arguments": {"city": "Oslo"}}',  # day is required
        '{"name": "weather", "arguments": {"city": "Oslo", "day": "someday"}}',  # not an enum
        '{"name": "teleport", "arguments": {}}',  # no such capability
        '{"name":"weather","arguments":{"city":"Oslo","day":"today"}}',  # not the layout
        '{"name": "weather", "arguments": {"city": "Oslo", "day": "today"}',  # not closed
    ):
        assert not accepts(grammar, cs, bad), bad


@pytest.mark.parametrize("seed", range(6))
def test_random_logits_under_the_grammar_write_a_valid_call(
    grammar: CallGrammar, seed: int
) -> None:
    cs = registry()
    rng = np.random.default_rng(seed)
    choose = Greedy() if seed % 2 else TopP(1.0, 0.95, rng=np.random.default_rng(seed))
    text = decode(grammar, grammar.start(cs), rng, choose)
    call = parse_call(text)
    assert call.valid, (text, call.error)
    if call.action == "call":
        assert call.name in contracts() and call.arguments is not None
        schema = contracts()[call.name].input_schema
        if "if" not in schema:  # llguidance ignores if / then (lenient): looser, not wrong
            validator = validators.validator_for(schema)(schema)
            assert not list(validator.iter_errors(call.arguments)), text
    else:
        assert call.target


def test_with_no_capability_online_a_call_still_parses(grammar: CallGrammar) -> None:
    rng = np.random.default_rng(1)
    for _ in range(4):
        call = parse_call(decode(grammar, grammar.start(()), rng, Greedy()))
        assert call.valid and call.name is not None


def test_the_span_closes_only_on_a_whole_call(grammar: CallGrammar) -> None:
    matcher = grammar.start(registry())
    scores = np.zeros(CLOSE + 1)
    for token in encode('{"name": "shopping_list", "arguments": {'):
        assert not np.isfinite(matcher.restrict(scores.copy(), CLOSE)[CLOSE])
        matcher.consume(token)
    allowed = np.isfinite(matcher.restrict(scores.copy(), CLOSE))
    # only the schema's first property may open the arguments now
    key = b'"action": "'
    text = [bytes(grammar.tokenizer.decode_bytes([int(t)])) for t in np.flatnonzero(allowed)]
    assert text and all(key.startswith(t) or t.startswith(key) for t in text), text
    with pytest.raises(EngineError, match="refused"):
        matcher.consume(encode("}")[0])


def test_a_schema_it_cannot_compile_is_called_with_any_object(
    grammar: CallGrammar, caplog: pytest.LogCaptureFixture
) -> None:
    odd = Contract(
        name="odd",
        input_schema={
            "type": "object",
            "properties": {"x": {"type": "string", "pattern": "^(?=a)b"}},
        },
    )
    with caplog.at_level(logging.WARNING):
        assert accepts(grammar, [odd], '{"name": "odd", "arguments": {"y": [1, 2]}}')
    assert "capability odd: its input schema does not compile" in caplog.text


# --- the whole step ----------------------------------------------------------------------


class Registry(NoHarness):
    """A harness channel with the mock domains online; it keeps what it is given."""

    def __init__(self) -> None:
        self.delegations: list[Delegation] = []

    def contracts(self) -> Sequence[Contract]:
        return registry()

    def delegate(self, delegation: Delegation) -> None:
        self.delegations.append(delegation)


def delegating_step(
    engines: Engines,
    harness: Registry,
    call_grammar: bool,
    calls: CallGrammar | None = None,
    prefer: Mapping[int, float] | None = None,
) -> tuple[list[ParsedCall], int]:
    """One chunk of random engines made to speak and to open a span at every chance
    (``calls``: the step's grammar replaced; ``prefer``: more text tokens pushed)."""
    push = LogitBias({**(prefer or {}), engines.token_id("<|delegate|>"): 1e4})
    samplers = Samplers(
        control=Sampler(bias=LogitBias({engines.token_id("<|speak|>"): 1e4})),
        text=Sampler(choose=Greedy(), bias=push),
        speech=Sampler(),
    )
    settings = StepSettings(call_grammar=call_grammar)
    step = ChunkStep(engines, harness, samplers, Deadlines(1.0, enabled=False), settings)
    if calls is not None:
        step.calls = calls
    rate = engines.manifest.schedule.sample_rate_in
    noise = np.random.default_rng(3).normal(0, 0.1, rate).astype(np.float32)
    out = step(step.new_stream(), ChunkInput(0, 0.0, noise, None))
    return out.calls, len(harness.delegations)


def test_random_engines_delegate_only_well_formed_calls_under_the_grammar(
    tiny_export: TinyExport,
) -> None:
    engines = Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",)))
    free, _ = delegating_step(engines, Registry(), call_grammar=False)
    assert free and not any(c.valid for c in free)  # random weights write no JSON
    calls, delegated = delegating_step(engines, Registry(), call_grammar=True)
    assert calls and all(c.valid for c in calls), [c.raw for c in calls]
    names = {c.name for c in calls if c.action == "call"}
    assert names <= set(contracts())
    assert delegated == len(calls)  # each one reached the harness


def test_a_grammar_that_fails_to_start_leaves_the_span_to_the_model(
    tiny_export: TinyExport, caplog: pytest.LogCaptureFixture
) -> None:
    """The chunk goes on (the daemon degrades): the span decodes freely, is parsed as it
    comes, and a warning says why."""
    engines = Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",)))

    class Broken(CallGrammar):
        def start(self, contracts: Sequence[Contract], failed: Sequence[str] = ()) -> SpanMatcher:
            raise EngineError("the grammar compiler is out of order")

    with caplog.at_level(logging.WARNING):
        calls, _ = delegating_step(
            engines, Registry(), call_grammar=True, calls=Broken(engines.tokenizer)
        )
    assert calls and not any(c.valid for c in calls)  # free text of random weights
    assert "the delegation span decodes freely: the grammar compiler is out of order" in (
        caplog.text
    )


# --- what a retry may name ---------------------------------------------------------------

SHOWN = ("e3e70682", "eb1167b3")  # short ids of failed results, as the harness shows them


def test_a_retry_names_a_failed_result_the_session_was_shown(grammar: CallGrammar) -> None:
    cs = registry()
    for shown in SHOWN:
        assert accepts(grammar, cs, json.dumps({"retry": shown}), SHOWN)
    # what the thirty-third round's model wrote after such failures: no item of the session
    for wrong in ("accf0607a", "accfddd00a", "e3e706820", "weather"):
        assert not accepts(grammar, cs, json.dumps({"retry": wrong}), SHOWN), wrong
        assert accepts(grammar, cs, json.dumps({"retry": wrong})), wrong  # before: open
    assert not accepts(grammar, cs, json.dumps({"retry": "e3e7068"}), SHOWN)  # a prefix
    assert accepts(grammar, cs, json.dumps({"cancel": "weather"}), SHOWN)  # as before


@pytest.mark.parametrize("seed", range(4))
def test_random_logits_after_a_retry_opens_copy_a_shown_id(grammar: CallGrammar, seed: int) -> None:
    matcher = grammar.start(registry(), SHOWN)
    opened = '{"retry": "'
    for token in encode(opened):
        matcher.consume(token)
    rng = np.random.default_rng(seed)
    choose = Greedy() if seed % 2 else TopP(1.0, 0.95, rng=np.random.default_rng(seed))
    call = parse_call(opened + decode(grammar, matcher, rng, choose))
    assert call.valid and call.action == "retry" and call.target in SHOWN, call.raw


def harness_results(tmp_path: Path) -> tuple[str, str, list[InjectedResult]]:
    """The real harness's offers of one failed and one completed item (ids, offers)."""
    down = Contract(name="down", input_schema={"type": "object"})
    fine = Contract(name="fine", input_schema={"type": "object"})

    def fail(ctx: Context) -> str:
        raise RuntimeError("the service is down")

    transport = InProcessTransport([Capability(down, fail), Capability(fine, lambda c: "ok")])
    harness = Harness.open(tmp_path / "journal.sqlite3", [transport])
    harness.start()
    try:
        failed = harness.submit(Capture("down", {}, "s"))
        done = harness.submit(Capture("fine", {}, "s"))
        assert harness.wait(failed, 10) is not None and harness.wait(done, 10) is not None
        return failed, done, harness.results("s", 0, True)
    finally:
        harness.stop()


def test_the_harness_s_failed_result_shows_the_id_a_retry_names(tmp_path: Path) -> None:
    failed, done, results = harness_results(tmp_path)
    assert {r.item_id: failed_item(r.text) for r in results} == {failed: failed[:8], done: None}
    for text in ("prose, not JSON", "[1, 2]", '{"status": "failed"}'):
        assert failed_item(text) is None


class ShowsAFailure(Registry):
    """The mock domains online, and a failed result injected in chunk 0."""

    def __init__(self, shown: InjectedResult) -> None:
        super().__init__()
        self.shown = shown

    def results(self, session_id: str, chunk_index: int, idle: bool) -> list[InjectedResult]:
        return [self.shown] if chunk_index == 0 else []


class Seen(CallGrammar):
    """The real grammar, keeping what each span may retry."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self.spans: list[tuple[str, ...]] = []

    def start(self, contracts: Sequence[Contract], failed: Sequence[str] = ()) -> SpanMatcher:
        self.spans.append(tuple(failed))
        return super().start(contracts, failed)


@pytest.mark.parametrize("retrying", [False, True])
def test_a_failure_shown_in_a_chunk_may_be_retried_by_a_later_span_once(
    tiny_export: TinyExport, tmp_path: Path, retrying: bool
) -> None:
    """Random engines pushed to delegate (``retrying``: and to write ``retry`` where the
    grammar lets them): every span may retry the failure shown until one does."""
    failed, _, results = harness_results(tmp_path)
    shown = next(r for r in results if r.item_id == failed)
    engines = Engines.open(tiny_export.engines, EngineOptions(providers=("cpu",)))
    seen = Seen(engines.tokenizer)
    word = b'{"retry": "'
    prefer = {i: 5e3 for i, p in enumerate(seen.pieces) if b"r" in p and p in word}
    calls, _ = delegating_step(
        engines, ShowsAFailure(shown), True, calls=seen, prefer=prefer if retrying else None
    )
    assert calls and all(c.valid for c in calls), [c.raw for c in calls]
    retries = [n for n, c in enumerate(calls) if c.action == "retry"]
    if not retrying:  # random weights write calls: the failure stays open to a retry
        assert not retries and set(seen.spans) == {(failed[:8],)}
        return
    assert retries and calls[retries[0]].target == failed[:8], [c.raw for c in calls]
    after = retries[0] + 1
    assert seen.spans[:after] == [(failed[:8],)] * after
    assert len(seen.spans) > after and set(seen.spans[after:]) == {()}  # retried: open again
