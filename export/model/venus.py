"""The whole Venus model: its components under the names the checkpoint uses.

``state_dict()`` keys are component-prefixed (``backbone.layers.0...``), exactly the
names stored in checkpoint shards. An audio-frontend model has no ``vision_encoder``.
"""

from __future__ import annotations

from torch import nn

from venus.export.model.audio import AudioEncoder
from venus.export.model.backbone import Backbone
from venus.export.model.config import ModelConfig
from venus.export.model.flow import FlowDecoder
from venus.export.model.speech import SpeechDecoder
from venus.export.model.vision import VisionEncoder
from venus.export.model.vocoders import make_vocoder

COMPONENTS = (
    "audio_encoder",
    "vision_encoder",
    "backbone",
    "speech_decoder",
    "flow_decoder",
    "vocoder",
)


class VenusModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hidden = cfg.backbone.hidden_size
        self.audio_encoder = AudioEncoder(cfg.audio, hidden, cfg.mel_frames_per_chunk)
        self.vision_encoder = VisionEncoder(cfg.vision, hidden) if cfg.vision is not None else None
        self.backbone = Backbone(cfg.backbone)
        self.speech_decoder = SpeechDecoder(cfg.speech, hidden)
        self.flow_decoder = FlowDecoder(cfg.flow)
        self.vocoder = make_vocoder(cfg.vocoder)

    def components(self) -> dict[str, nn.Module]:
        """The present components by checkpoint prefix, in a fixed order."""
        out: dict[str, nn.Module] = {}
        for name in COMPONENTS:
            module = getattr(self, name)
            if module is not None:
                out[name] = module
        return out


def component_names(cfg: ModelConfig) -> tuple[str, ...]:
    return tuple(n for n in COMPONENTS if n != "vision_encoder" or cfg.vision is not None)
