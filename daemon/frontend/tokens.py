"""The token layout of one chunk, and which tokens each decision may choose.

Per chunk the loop appends (``<|image_...|>`` only for an omni frontend with a frame)::

    <|chunk_start|>
        [<|memory|> <|image_start|> m ... <|image_end|> <|/memory|>] ...   <- recalled memory
        <|image_start|> v ... <|image_end|> <|audio_start|> a ... <|audio_end|>
        [<|result|> text <|/result|>] ...         <- fresh harness results
    DECISION                                      <- <|listen|> / <|speak|> / <|turn_eos|>
    [text ... [<|delegate|> json <|/delegate|>] ...]   <- only after <|speak|>
    <|chunk_end|>

Recalled memory entries (``memory``: past chunks' embeddings, audio ones framed by
``<|audio_start|> ... <|audio_end|>``) come first, only with ``[memory] recall`` on and
engines that have the ``<|memory|>`` tokens. The decision is chosen from the logits of
the last input token, among the control tokens only. After ``<|speak|>`` text tokens
follow until the model closes the chunk (``<|chunk_end|>``), ends its turn
(``<|turn_eos|>``) or the chunk's text budget runs out; the loop closes the chunk itself
when the model did not. Tokens whose logits are not
needed (a ``<|listen|>``, the closing ``<|chunk_end|>``) are not run on their own: they
lead the next chunk's prefill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from venus.daemon.frontend.timeline import Decision
from venus.engines.sampler import Constraint
from venus.errors import EngineError

DECISIONS: tuple[Decision, ...] = ("listen", "speak", "turn_eos")
NEEDED = (
    "<|listen|>",
    "<|speak|>",
    "<|turn_eos|>",
    "<|chunk_start|>",
    "<|chunk_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|delegate|>",
    "<|/delegate|>",
    "<|result|>",
    "<|/result|>",
)


@dataclass(frozen=True)
class Vocab:
    """Ids of the special tokens (from the engines' manifest) and the text vocabulary size."""

    text_vocab: int  # ids below are text; Venus's special tokens follow
    ids: Mapping[str, int]
    control: Constraint  # the decision: one of the control tokens
    speaking: Constraint  # text, and what structures it: end of chunk / turn, a delegation
    delegating: Constraint  # inside <|delegate|> ... <|/delegate|>: the JSON call, or the close

    @classmethod
    def of(cls, special_tokens: Mapping[str, int]) -> Vocab:
        missing = [t for t in NEEDED if t not in special_tokens]
        if missing:
            raise EngineError(
                f"the engines' manifest lacks special tokens {', '.join(missing)}; "
                "re-export the checkpoint with this version of venus"
            )
        ids = dict(special_tokens)
        text = min(ids.values())
        return cls(
            text_vocab=text,
            ids=ids,
            control=Constraint.of(ids[f"<|{d}|>"] for d in DECISIONS),
            speaking=Constraint.of(
                [*range(text), *(ids[t] for t in ("<|chunk_end|>", "<|turn_eos|>", "<|delegate|>"))]
            ),
            delegating=Constraint.of([*range(text), ids["<|/delegate|>"]]),
        )

    def __getitem__(self, name: str) -> int:
        return self.ids[name]

    def decision_of(self, token: int) -> Decision:
        for name in DECISIONS:
            if self.ids[f"<|{name}|>"] == token:
                return name
        raise EngineError(f"token {token} is not a control token")

    def decision(self, name: Decision) -> int:
        """The control token of decision ``name``."""
        return self.ids[f"<|{name}|>"]
