"""A voice recipe small enough to train in seconds (``venus train-voice`` in tests)."""

from __future__ import annotations

from venus.train.voice_config import VoiceConfig, parse_voice_config


def quick(
    steps: int, utterances: int = 0, source: str = "none", kind: str = "hifigan"
) -> VoiceConfig:
    return parse_voice_config({
        "data": {"validation": 0.34},
        "units": {"k": 32, "iterations": 5},
        "flow": {"steps": steps, "batch": 2, "warmup_steps": 1, "window_s": 2.0,
                 "d_model": 32, "ffn_dim": 64},
        "vocoder": {"steps": steps - 1, "batch": 2, "warmup_steps": 1, "segment_s": 0.4,
                    "channels": 16, "kernels": [3], "dilations": [1, 3], "source": source,
                    "kind": kind},
        "train": {"checkpoint_every": 2, "threads": 1},
        "eval": {"utterances": utterances},
    })  # fmt: skip
