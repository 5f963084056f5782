"""``venus train --config FILE``: the recipe, TOML. Every key has a default; an unknown
key or a bad value is an error naming it.

    [model]
    preset = "tiny"          # tiny, tiny-audio, tiny-wide(-audio), small, small-audio
    seed = 0                 # the initial weights, the split, the batch order

    [data]
    validation = 0.1         # share of the samples held out (by sample id, seeded)

    [tokenizer]
    vocab_size = 0           # 0: the preset's text vocabulary (512 for tiny)

    [train]
    steps = 2000
    batch_size = 8
    learning_rate = 3e-3
    warmup_steps = 100       # linear warm-up, then cosine decay to 10%
    weight_decay = 0.01
    decision_weight = 1.0    # the decision loss's weight beside the text loss
    turn_weight = 1.0        # weight of decisions that start a reply or yield, in it
    reply_weight = 1.0       # weight of the text targets of a reply's first chunk
    call_weight = 1.0        # and of the one naming a call's capability, times that again
    argument_weight = 1.0    # and of a call's argument values' tokens, times that again
    event_weight = 1.0       # least weight of a decision an overlap event is decided in
                             #   (an interruption's yield, a hold through an aside ...)
    after_weight = 1.0       # least weight of carrying on in the 2 chunks after a hold
    addressee_weight = 0.0   # the addressee loss (whom each chunk's speech is for, at its
                             #   decision; addressee.py); 0: none
    max_text_tokens = 16     # the daemon's text budget per chunk (schedule default)
    crop = 0.5               # share of examples cut to start mid-conversation
    speech_weight = 1.0      # the speech decoder's loss (with --voice) beside the others
    speech_grad = false      # whether the speech loss also trains the backbone
    speech_sampling = 0.0    # share of fed units replaced by the decoder's own (ramped)
    ctc_weight = 0.0         # the listening loss (CTC over the user's words, heard.py)
    listen_only = false      # train the audio encoder and listening head alone (listen.py):
                             #   the only loss, so ctc_weight's value does not matter there
    clip = "all"             # gradient clipping to norm 1: "all" together, "component" apart
    mel_warp = 0.0           # log-mel augmentation (augment.py): vocal tract warp 1 +- w,
    mel_gain_db = 0.0        #   loudness +- dB,
    mel_freq_masks = 0       #   frequency bands masked per example
    checkpoint_every = 200   # steps between resumable states (and a validation pass)
    keep = "last"            # which validated step the exportable checkpoint holds: "last",
                             #   or "balanced_events": the best on overlap events, holds and
                             #   the rest apiece (validation.py; state.pt is the last still)
    threads = 0              # torch threads (0: one per CPU)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from venus.errors import VenusError
from venus.export.model.config import TRAINABLE_PRESETS
from venus.train.clip import CLIP_MODES
from venus.train.runlog import read_recipe

__all__ = ["TrainConfig", "TrainConfigError", "load_train_config", "parse_train_config"]


class TrainConfigError(VenusError):
    """The training recipe is not valid: the message names the key."""


@dataclass(frozen=True)
class TrainConfig:
    preset: str = "tiny"
    seed: int = 0
    validation: float = 0.1
    vocab_size: int = 0
    steps: int = 2000
    batch_size: int = 8
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    decision_weight: float = 1.0
    turn_weight: float = 1.0
    reply_weight: float = 1.0
    call_weight: float = 1.0
    argument_weight: float = 1.0
    event_weight: float = 1.0
    after_weight: float = 1.0
    addressee_weight: float = 0.0
    max_text_tokens: int = 16
    crop: float = 0.5
    speech_weight: float = 1.0
    speech_grad: bool = False
    speech_sampling: float = 0.0
    ctc_weight: float = 0.0
    listen_only: bool = False
    clip: str = "all"
    mel_warp: float = 0.0
    mel_gain_db: float = 0.0
    mel_freq_masks: int = 0
    checkpoint_every: int = 200
    keep: str = "last"
    threads: int = 0

    def to_toml_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for f in fields(self):
            out.setdefault(SECTION_OF[f.name], {})[f.name] = getattr(self, f.name)
        return out


SECTION_OF = {
    "preset": "model", "seed": "model", "validation": "data", "vocab_size": "tokenizer",
    **{k: "train" for k in ("steps", "batch_size", "learning_rate", "warmup_steps",
                            "weight_decay", "decision_weight", "turn_weight", "reply_weight",
                            "call_weight", "argument_weight", "event_weight", "after_weight",
                            "addressee_weight",
                            "max_text_tokens",
                            "crop", "speech_weight", "speech_grad", "speech_sampling", "ctc_weight",
                            "listen_only", "clip", "mel_warp", "mel_gain_db", "mel_freq_masks",
                            "checkpoint_every", "keep", "threads")},
}  # fmt: skip
PRESETS = TRAINABLE_PRESETS
KEEP = ("last", "balanced_events")  # train.keep: loop.py's _kept


def parse_train_config(data: dict[str, Any], source: str = "config") -> TrainConfig:
    values: dict[str, Any] = {}
    defaults = TrainConfig()
    for section, table in data.items():
        if section not in set(SECTION_OF.values()) or not isinstance(table, dict):
            raise TrainConfigError(
                f"{source}: unknown section [{section}] (known: model, data, tokenizer, train)"
            )
        for key, raw in table.items():
            if SECTION_OF.get(key) != section:
                raise TrainConfigError(f"{source}: unknown key {section}.{key}")
            want = type(getattr(defaults, key))
            value = raw
            if want is float and isinstance(raw, int) and not isinstance(raw, bool):
                value = float(raw)
            if type(value) is not want:
                raise TrainConfigError(
                    f"{source}: {section}.{key} must be a {want.__name__}, not {raw!r}"
                )
            values[key] = value
    cfg = TrainConfig(**values)
    checks = [
        (cfg.preset in PRESETS, f"model.preset must be one of {', '.join(PRESETS)}"),
        (0.0 <= cfg.validation < 1.0, "data.validation must be in [0, 1)"),
        (cfg.vocab_size == 0 or cfg.vocab_size >= 256, "tokenizer.vocab_size must be 0 or >= 256"),
        (cfg.steps >= 1, "train.steps must be at least 1"),
        (cfg.batch_size >= 1, "train.batch_size must be at least 1"),
        (cfg.learning_rate > 0, "train.learning_rate must be positive"),
        (cfg.warmup_steps >= 0, "train.warmup_steps must be >= 0"),
        (cfg.weight_decay >= 0, "train.weight_decay must be >= 0"),
        (cfg.decision_weight >= 0, "train.decision_weight must be >= 0"),
        (cfg.turn_weight > 0, "train.turn_weight must be positive"),
        (cfg.reply_weight > 0, "train.reply_weight must be positive"),
        (cfg.call_weight > 0, "train.call_weight must be positive"),
        (cfg.argument_weight > 0, "train.argument_weight must be positive"),
        (cfg.event_weight > 0, "train.event_weight must be positive"),
        (cfg.after_weight > 0, "train.after_weight must be positive"),
        (cfg.addressee_weight >= 0, "train.addressee_weight must be >= 0"),
        (1 <= cfg.max_text_tokens <= 256, "train.max_text_tokens must be in 1..256"),
        (0.0 <= cfg.crop <= 1.0, "train.crop must be in [0, 1]"),
        (cfg.speech_weight >= 0, "train.speech_weight must be >= 0"),
        (0.0 <= cfg.speech_sampling <= 1.0, "train.speech_sampling must be in [0, 1]"),
        (cfg.ctc_weight >= 0, "train.ctc_weight must be >= 0"),
        (
            not cfg.listen_only or cfg.ctc_weight > 0,
            "train.listen_only trains the listening head: set train.ctc_weight > 0",
        ),
        (cfg.clip in CLIP_MODES, f"train.clip must be one of {', '.join(CLIP_MODES)}"),
        (0.0 <= cfg.mel_warp < 0.5, "train.mel_warp must be in [0, 0.5)"),
        (0.0 <= cfg.mel_gain_db <= 40.0, "train.mel_gain_db must be in [0, 40]"),
        (0 <= cfg.mel_freq_masks <= 10, "train.mel_freq_masks must be in 0..10"),
        (cfg.checkpoint_every >= 1, "train.checkpoint_every must be at least 1"),
        (cfg.keep in KEEP, f"train.keep must be one of {', '.join(KEEP)}"),
        (
            cfg.keep == "last" or not cfg.listen_only,
            "train.keep = balanced_events: a listen_only run decides no overlap events",
        ),
        (cfg.threads >= 0, "train.threads must be >= 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise TrainConfigError(f"{source}: {message}")
    return cfg


def load_train_config(path: Path | None) -> TrainConfig:
    if path is None:
        return TrainConfig()
    return parse_train_config(read_recipe(path, TrainConfigError), str(path))
