"""The grammar of a ``<|delegate|>`` span: the model can only write a call that parses.

While the model writes a span, the text sampler chooses among the tokens that keep the
span's text a prefix of a call the daemon accepts (``delegation.parse_call``), and may
close the span only when the call is complete. The grammar is a JSON schema, compiled
against the engines' own tokenizer by llguidance (a Rust library made for exactly this:
token masks in tens of microseconds for any vocabulary size, on x86-64 and aarch64
wheels)::

    anyOf: per registered capability
             {"name": <its name>, "arguments": <its input schema>, "supersedes"?: string}
           {"cancel": string}, {"retry": string}

so a call names a capability that is online now, with the arguments its contract asks
for (enums, required keys, string lengths). With no capability registered (no harness,
or none online yet) ``name`` is any capability name and ``arguments`` any object. Once
the session has been shown a failed result, ``retry`` names one of those (by the id its
result showed, as the training data copies it): a retry of anything else resolves to no
item, and a small model copies an id badly. Before any failure a retry stays open (it
resolves to nothing and is dropped), so that a span the model opens as a retry is never
turned into a call it did not mean. The
text is written as the training data writes it (``json.dumps``: ``", "`` and ``": "``,
no other whitespace, properties in the schema's order).

A grammar bounds what a call says, not how long it runs: a string may take a token a
byte, a number any count of digits. So in the last ``WRAP_UP`` tokens of the span's
budget the matcher steers toward the end: the close where the call is complete, else
(among what the grammar allows) a token that ends the string it is in, or one that
closes an object or array, starts the next key, or separates; the model still chooses
among those. A call that would run on past its budget is cut short instead of cut off.

A capability whose input schema llguidance cannot compile is called with any object as
arguments (one warning naming it); keywords it does not implement are ignored
(``lenient``), so the grammar may be looser than a schema, never stricter: the harness
still validates the arguments.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer as HFTokenizer

from venus.capabilities.contract import Contract
from venus.engines.tokenizer import Tokenizer
from venus.errors import EngineError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

log = logging.getLogger(__name__)

END = "<|venus_end_of_call|>"  # the grammar's end of text; stands for <|/delegate|>
# As json.dumps writes it (the training data's spans), and no whitespace elsewhere;
# keywords llguidance does not implement are ignored (lenient), not an error.
LAYOUT: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
}
WRAP_UP = 64  # tokens before the span's budget runs out: steer toward the end
NAME = {"type": "string", "pattern": "^[a-z0-9_]{1,64}$"}  # as Contract requires
ITEM_ID = {"type": "string", "pattern": "^[0-9a-f]{8,32}$"}  # whole, or as a result shows it


def failed_item(text: str) -> str | None:
    """The item id a ``<|result|>`` text shows, if it reports a failure (the harness's
    ``{"item", "capability", "status", "result"}``; None for anything else)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("status") != "failed":
        return None
    item = doc.get("item")
    return item if isinstance(item, str) and item else None


def span_schema(
    arguments: Mapping[str, Mapping[str, Any]], failed: Sequence[str] = ()
) -> dict[str, Any]:
    """The JSON schema of a span, given each capability's arguments schema by name, and
    the ids of the failed results the session was shown (``failed``; module doc).

    What a decision names (``supersedes``, ``cancel``, ``retry``) is an item id, or a
    capability for its newest pending item (``HarnessCore.resolve``)."""
    names = sorted(arguments)
    ref = {"anyOf": [{"enum": names}, ITEM_ID]} if names else NAME
    retry = {"enum": sorted(set(failed))} if failed else ref
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": name},
                "arguments": arguments[name],
                "supersedes": ref,
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name in names
    ] or [  # no capability registered: the shape alone
        {
            "type": "object",
            "properties": {"name": NAME, "arguments": {"type": "object"}, "supersedes": ref},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
    ]
    decisions = [
        {
            "type": "object",
            "properties": {key: named},
            "required": [key],
            "additionalProperties": False,
        }
        for key, named in (("cancel", ref), ("retry", retry))
    ]
    return {"anyOf": [*calls, *decisions]}


class CallGrammar:
    """One engine's tokenizer made ready for llguidance, and the grammar of the
    capabilities last seen (compiled again only when they change)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        hf = HFTokenizer.from_str(tokenizer.hf.to_str())  # a copy to add END to
        hf.add_special_tokens([END])
        end = hf.token_to_id(END)
        if end is None:
            raise EngineError(f"{tokenizer.source}: cannot add {END} to this tokenizer")
        self.end: int = end
        self.text_vocab = tokenizer.text_vocab
        try:
            self.tokenizer = llguidance.LLTokenizer(hf.to_str(), eos_token=self.end)
        except ValueError as e:
            raise EngineError(
                f"{tokenizer.source}: llguidance cannot read this tokenizer ({e})"
            ) from e
        # each text token's bytes, and what the wrap-up looks for in them
        n = min(self.text_vocab, self.tokenizer.vocab_size)
        self.pieces = [bytes(self.tokenizer.decode_bytes([i])) for i in range(n)]
        self.first = np.array([p[:1] or b"\0" for p in self.pieces], "S1")
        self.ends_string = np.array([_ends_string(p) for p in self.pieces], bool)
        self._key: tuple[object, ...] | None = None
        self._grammar = ""

    @classmethod
    def open(cls, tokenizer: Tokenizer) -> CallGrammar | None:
        """The grammar for these engines, or None (a warning: spans decode freely) where
        llguidance cannot read their tokenizer. Made once per tokenizer: every session
        on the same engines (each sample of an evaluation) shares it."""
        if tokenizer not in _OPENED:
            try:
                _OPENED[tokenizer] = cls(tokenizer)
            except EngineError as e:
                log.warning("delegation spans decode without a grammar: %s", e)
                _OPENED[tokenizer] = None
        return _OPENED[tokenizer]

    def start(self, contracts: Sequence[Contract], failed: Sequence[str] = ()) -> SpanMatcher:
        """A matcher for one span, over these capabilities (empty: any name), where a retry
        names one of the ``failed`` results shown (empty: any item; module doc)."""
        schemas = tuple(
            sorted((c.name, json.dumps(c.input_schema, sort_keys=True)) for c in contracts)
        )
        key = (schemas, tuple(sorted(set(failed))))
        if key != self._key:
            self._grammar = self._compile({c.name: c.input_schema for c in contracts}, failed)
            self._key = key
        matcher = llguidance.LLMatcher(self.tokenizer, self._grammar, log_level=0)
        if matcher.is_error():  # _compile checked it: only a library fault lands here
            raise EngineError(f"the delegation grammar failed: {matcher.get_error()}")
        return SpanMatcher(matcher, self)

    def _compile(self, arguments: Mapping[str, Mapping[str, Any]], failed: Sequence[str]) -> str:
        usable: dict[str, Mapping[str, Any]] = {}
        for name, schema in arguments.items():
            error = self._error(span_schema({name: schema}))
            if error:
                log.warning(
                    "capability %s: its input schema does not compile to a grammar (%s); "
                    "the model may call it with any arguments",
                    name,
                    error,
                )
            usable[name] = {"type": "object"} if error else schema
        whole = span_schema(usable, failed)
        error = self._error(whole)
        if error:
            raise EngineError(f"the delegation grammar does not compile: {error}")
        log.debug("delegation grammar: %d capabilities", len(usable))
        return _grammar_of(whole)

    def _error(self, schema: Mapping[str, Any]) -> str:
        """Why ``schema`` does not compile for this tokenizer ("" if it does)."""
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            _grammar_of(schema), self.tokenizer
        )
        return messages[0] if is_error else ""


_OPENED: weakref.WeakKeyDictionary[Tokenizer, CallGrammar | None] = weakref.WeakKeyDictionary()


class SpanMatcher:
    """Where one span is in the grammar: which token may come next, and taking it."""

    def __init__(self, matcher: llguidance.LLMatcher, grammar: CallGrammar) -> None:
        self.matcher, self.grammar = matcher, grammar
        self._mask = np.zeros((grammar.tokenizer.vocab_size + 31) // 32, np.int32)
        self.in_string = False  # inside a JSON string (the text so far, as bytes)
        self._escaped = False

    def restrict(
        self, scores: NDArray[np.float64], close: int, left: int | None = None
    ) -> NDArray[np.float64]:
        """``scores`` [vocab] with every token the grammar forbids at -inf; ``close``
        (the ``<|/delegate|>`` id) keeps its score only where the call is complete.
        ``left``: tokens left in the span's budget (within ``WRAP_UP``: steer to the end)."""
        self.matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        bits = np.unpackbits(self._mask.view(np.uint8), bitorder="little").astype(bool)
        text = min(self.grammar.text_vocab, bits.size)
        allowed = np.zeros(scores.size, bool)
        allowed[:text] = bits[:text]
        if self.grammar.end < text:  # a tokenizer padded past its last token
            allowed[self.grammar.end] = False
        allowed[close] = bool(bits[self.grammar.end])
        out = np.where(allowed, scores, -np.inf)
        if not np.isfinite(out).any():  # nothing the model scores is allowed: close it
            out[close] = 0.0
        if left is not None and left <= WRAP_UP:
            out = self._wrap_up(out, close)
        return out

    def _wrap_up(self, out: NDArray[np.float64], close: int) -> NDArray[np.float64]:
        """``out`` kept only on the first kind of allowed token that heads for the end."""
        if np.isfinite(out[close]):  # the call is whole: end it
            only = np.full_like(out, -np.inf)
            only[close] = out[close]
            return only
        g = self.grammar
        if self.in_string:
            heads = [g.ends_string]
        else:
            heads = [(g.first == b"}") | (g.first == b"]"), g.first == b'"', g.first == b","]
        text = out[: g.first.size]
        for head in heads:
            pick = np.isfinite(text) & head
            if pick.any():
                steered = np.full_like(out, -np.inf)
                steered[: g.first.size][pick] = text[pick]
                return steered
        return out

    def consume(self, token: int) -> None:
        """The model wrote ``token`` (a text token the mask allowed)."""
        if not self.matcher.consume_token(token):
            raise EngineError(
                f"delegation grammar refused token {token}: {self.matcher.get_error()}"
            )
        for byte in self.grammar.pieces[token]:
            if self._escaped:
                self._escaped = False
            elif self.in_string and byte == 0x5C:  # a backslash escapes the next byte
                self._escaped = True
            elif byte == 0x22:  # a double quote opens or closes a string
                self.in_string = not self.in_string


def _grammar_of(schema: Mapping[str, Any]) -> str:
    grammar: str = llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(schema), overrides=LAYOUT
    )
    return grammar


def _ends_string(piece: bytes) -> bool:
    """Whether a token holds a double quote that ends a string it starts inside of
    (one not escaped by a backslash within the token)."""
    escaped = False
    for byte in piece:
        if escaped:
            escaped = False
        elif byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            return True
    return False
