"""The configuration schema: one frozen dataclass per section of ``venus.toml``.

Each field's ``description`` is its documentation; ``systemd/venus.toml`` is the
commented example and a test keeps the two in step. Constraints are declared on the
field (``ge`` / ``le`` / choices) so error messages can quote the allowed range.
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)
from pydantic.dataclasses import dataclass

DEFAULT_CONFIG_PATH = Path("/etc/venus/venus.toml")

# Scalars are strict: TOML has real types, so "16000" for an integer is a mistake, not a
# conversion. Sections stay lax so they accept TOML tables; paths accept TOML strings.
_SECTION = ConfigDict(extra="forbid", frozen=True)

Provider = Literal["tensorrt", "cuda", "cpu"]
# Sampling where neither [model] nor the engines' manifest says (ModelConfig.temperature).
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 0.9
DEFAULT_FLOW_TEMPERATURE = 1.0  # the flow decoder's noise as it was trained (x_0 ~ N(0, 1))
NODE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MQTT_SCHEMES = ("mqtt", "mqtts", "ws", "wss")


def _chunk_on_hop(value: float) -> float:
    # The audio front end works in 10 ms hops (160 samples at 16 kHz).
    if abs(round(value * 100) - value * 100) > 1e-6:
        raise ValueError(f"{value} s is not a whole number of 10 ms audio hops (e.g. 0.5, 1.0)")
    return value


def _broker_url(value: str) -> str:
    if value == "":
        return value
    parts = urlsplit(value)
    if parts.scheme not in MQTT_SCHEMES or not parts.hostname:
        raise ValueError(
            f"{value!r} is not a broker URL; use mqtt://HOST[:PORT] or mqtts://HOST[:PORT] "
            '(ws:// and wss:// also work), or "" for no broker'
        )
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as e:
        raise ValueError(f"{value!r}: {e}") from None
    return value


def _node_id(value: str) -> str:
    if not NODE_ID.match(value):
        raise ValueError(
            f"{value!r} is not a node id: use 1-64 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit (it becomes an MQTT client id and topic level)"
        )
    return value


def _host_port(value: str) -> str:
    if value == "":
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'{value!r} is not HOST:PORT (e.g. 127.0.0.1:9464), or "" to disable')
    return value


@dataclass(config=_SECTION)
class ModelConfig:
    engines: Path = Field(
        default=Path("/var/lib/venus/engines"),
        description="Engine directory written by `venus export` (holds manifest.json).",
    )
    frontend: Literal["auto", "omni", "audio"] = Field(
        default="auto",
        description="Which frontend to run; auto takes it from the engines' manifest.",
    )
    seed: StrictInt = Field(default=0, ge=0, le=2**32 - 1, description="Sampling seed.")
    temperature: StrictFloat | None = Field(
        default=None,
        ge=0.0,
        le=2.0,
        description="Sampling temperature of text and speech tokens; 0 is greedy. Not set: "
        "the engines' recommendation (their manifest's sampling), else 0.7.",
    )
    top_p: StrictFloat | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling: keep this probability mass. Not set: the engines' "
        "recommendation, else 0.9.",
    )
    flow_temperature: StrictFloat | None = Field(
        default=None,
        ge=0.0,
        le=2.0,
        description="Scale of the flow decoder's starting noise when it turns speech "
        "tokens into a mel; 0 follows its mean path (no noise). Not set: the engines' "
        "recommendation, else 1.0.",
    )
    listen_bias: StrictFloat = Field(
        default=0.0,
        ge=-20.0,
        le=20.0,
        description="Added to the <|listen|> logit at each decision; > 0 talks less.",
    )
    call_grammar: StrictBool = Field(
        default=True,
        description="Decode <|delegate|> spans under a grammar of the capabilities online "
        "(their input schemas), so every call parses; false: the model's text as is.",
    )


@dataclass(config=_SECTION)
class EnginesConfig:
    providers: tuple[Provider, ...] = Field(
        default=("tensorrt", "cuda", "cpu"),
        min_length=1,
        description="ONNX Runtime execution providers to try, in order.",
    )
    device_id: StrictInt = Field(default=0, ge=0, le=15, description="CUDA device index.")
    intra_op_threads: StrictInt = Field(
        default=0,
        ge=0,
        le=256,
        description="CPU threads per inference session; 0 lets ONNX Runtime pick.",
    )
    graph_optimization: Literal["disable", "basic", "extended", "all"] = Field(
        default="all", description="ONNX Runtime graph optimisation level."
    )
    cache_dir: Path = Field(
        default=Path("/var/cache/venus"),
        description="Optimised models and the TensorRT engine / timing cache.",
    )


@dataclass(config=_SECTION)
class ScheduleConfig:
    chunk_s: Annotated[StrictFloat, AfterValidator(_chunk_on_hop)] = Field(
        default=1.0,
        ge=0.25,
        le=2.0,
        description="Chunk period in seconds: one frontend step per chunk.",
    )
    max_context_tokens: StrictInt = Field(
        default=8192,
        ge=512,
        le=131072,
        description="Backbone context limit before old chunks are evicted.",
    )
    sink_tokens: StrictInt = Field(
        default=64,
        ge=0,
        le=4096,
        description="First tokens always kept when evicting (attention sinks).",
    )
    max_text_tokens: StrictInt = Field(
        default=16, ge=1, le=256, description="Text tokens the model may say per chunk."
    )
    speech_tokens_per_chunk: StrictInt = Field(
        default=0,
        ge=0,
        le=1000,
        description="Speech tokens per chunk (the chunk that ends a reply may say half as "
        "many more); 0: the model's rate times the chunk.",
    )
    deadlines: StrictBool = Field(
        default=True,
        description="Degrade a chunk that would finish late (skip vision, shorten speech).",
    )

    def __post_init__(self) -> None:
        if 2 * self.sink_tokens >= self.max_context_tokens:
            raise ValueError(
                f"sink_tokens ({self.sink_tokens}) must be less than half of "
                f"max_context_tokens ({self.max_context_tokens})"
            )


@dataclass(config=_SECTION)
class AudioConfig:
    backend: Literal["sounddevice", "pyaudio"] = Field(
        default="sounddevice", description="Audio library; pyaudio needs the pyaudio extra."
    )
    device: StrictStr = Field(
        default="default",
        min_length=1,
        description="Input device: 'default', a name substring or an index.",
    )
    sample_rate: StrictInt = Field(
        default=16000,
        ge=8000,
        le=192000,
        description="Capture rate in Hz; resampled to 16 kHz for the model.",
    )
    channels: StrictInt = Field(
        default=1, ge=1, le=8, description="Channels captured; mixed down to mono."
    )
    block_ms: StrictInt = Field(
        default=20, ge=5, le=200, description="Capture block length in milliseconds."
    )
    echo_cancellation: Literal["auto", "off", "headset", "suppress"] = Field(
        default="auto",
        description="auto: cancel the speaker echo; headset: no echo path; "
        "suppress: ignore user speech while speaking; off: nothing.",
    )
    vad_aggressiveness: StrictInt = Field(
        default=2, ge=0, le=3, description="webrtcvad mode, 0 (lenient) to 3."
    )
    muted: StrictBool = Field(default=False, description="Start with the microphone muted.")


@dataclass(config=_SECTION)
class VideoConfig:
    enabled: StrictBool = Field(
        default=True, description="Privacy switch: false never opens the camera."
    )
    source: StrictStr = Field(
        default="0",
        min_length=1,
        description="V4L2 index, 'gst:PIPELINE', rtsp:// or http:// URL, or a video file.",
    )
    capture_width: StrictInt = Field(
        default=1280, ge=64, le=7680, description="Requested capture width in px."
    )
    capture_height: StrictInt = Field(
        default=720, ge=64, le=4320, description="Requested capture height in px."
    )
    reconnect_max_s: StrictFloat = Field(
        default=30.0, gt=0, le=3600, description="Longest wait between camera reconnect attempts."
    )


@dataclass(config=_SECTION)
class PlaybackConfig:
    device: StrictStr = Field(
        default="default",
        min_length=1,
        description="Output device: 'default', a name substring or an index.",
    )
    sample_rate: StrictInt = Field(
        default=48000, ge=8000, le=192000, description="Playback rate in Hz."
    )
    buffer_ms: StrictInt = Field(
        default=40,
        ge=5,
        le=500,
        description="Output buffer; flushes and position reports are this exact.",
    )
    volume: StrictFloat = Field(
        default=1.0, ge=0.0, le=4.0, description="Linear gain on the assistant's voice."
    )


@dataclass(config=_SECTION)
class HarnessConfig:
    journal: Path = Field(
        default=Path("/var/lib/venus/journal.sqlite3"), description="SQLite journal of work items."
    )
    broker_url: Annotated[StrictStr, AfterValidator(_broker_url)] = Field(
        default="mqtt://127.0.0.1:1883",
        description='MQTT broker for capability workers; "" runs built-in capabilities only.',
    )
    node_id: Annotated[StrictStr, AfterValidator(_node_id)] = Field(
        default="venus", description="This daemon's MQTT client id and topic subtree."
    )
    site_id: StrictStr = Field(
        default="default", min_length=1, max_length=64, description="Site name sent with calls."
    )
    credentials_file: Path | None = Field(
        default=None,
        description="File with 'username:password' for the broker (keep it mode 0600).",
    )
    tls_ca: Path | None = Field(default=None, description="CA certificate to verify the broker.")
    tls_cert: Path | None = Field(default=None, description="Client certificate (with tls_key).")
    tls_key: Path | None = Field(default=None, description="Client private key (with tls_cert).")
    keepalive_s: StrictInt = Field(
        default=30, ge=5, le=3600, description="MQTT keepalive interval."
    )
    retention_days: StrictInt = Field(
        default=30, ge=1, le=3650, description="Finished work items and evidence kept this long."
    )
    max_attempts: StrictInt = Field(
        default=3,
        ge=1,
        le=10,
        description="Dispatches of an idempotent item that fails retryably (a timeout, a "
        "lost worker), and makings in a row of one call the model retries.",
    )
    idle_speech_ratio: StrictFloat = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="The user speaks in a chunk (results that wait for a pause wait) when "
        "the VAD hears speech in this share of it ...",
    )
    idle_rise_db: StrictFloat = Field(
        default=9.0,
        ge=0.0,
        le=60.0,
        description="... and its loud frames rise this many dB above the noise floor of "
        "the last 8 s (raise it in a loud room).",
    )
    idle_wait_s: StrictFloat = Field(
        default=8.0,
        ge=0.0,
        le=600.0,
        description="After this long of such speech while the assistant listens, results "
        "come in anyway and the model decides when to speak them.",
    )

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: set both or neither")


def _http_url(value: str) -> str:
    if value == "":
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{value!r} is not an HTTP URL; use e.g. http://127.0.0.1:8080/v1 "
            '(an OpenAI-compatible API base), or "" to leave reason off'
        )
    return value


@dataclass(config=_SECTION)
class CapabilitiesConfig:
    devices_file: Path | None = Field(
        default=None,
        description="Devices for mqtt_device (TOML, see systemd/devices.example.toml); "
        "needs harness.broker_url. Unset: no mqtt_device.",
    )
    devices_credentials_file: Path | None = Field(
        default=None,
        description="'username:password' for mqtt_device's own connection (mode 0600); "
        "a broker with the shipped ACL needs a user allowed on the device topics.",
    )
    reason_url: Annotated[StrictStr, AfterValidator(_http_url)] = Field(
        default="",
        description='OpenAI-compatible API base for reason, e.g. "http://127.0.0.1:8080/v1"; '
        '"" leaves reason off.',
    )
    reason_model: StrictStr = Field(
        default="", max_length=200, description="The model name sent to that endpoint."
    )
    reason_key_file: Path | None = Field(
        default=None, description="File with the endpoint's API key (mode 0600); unset: no key."
    )
    reason_timeout_s: StrictFloat = Field(
        default=60.0, gt=0.0, le=600.0, description="How long reason waits for an answer."
    )


@dataclass(config=_SECTION)
class HomeAssistantConfig:
    enabled: StrictBool = Field(
        default=True,
        description="Appear in Home Assistant by MQTT discovery (needs harness.broker_url).",
    )
    name: StrictStr = Field(
        default="Venus", min_length=1, max_length=64, description="The device's name there."
    )
    discovery_prefix: StrictStr = Field(
        default="homeassistant",
        pattern=r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$",
        description="Home Assistant's MQTT discovery prefix.",
    )


@dataclass(config=_SECTION)
class MemoryConfig:
    enabled: StrictBool = Field(
        default=True,
        description="Keep past chunks' audio and vision embeddings and recall relevant ones.",
    )
    budget_mb: StrictFloat = Field(
        default=64.0, gt=0.0, le=65536.0, description="Memory store budget in MiB."
    )
    tier_tokens: tuple[StrictInt, ...] = Field(
        default=(0, 2, 1),
        min_length=1,
        max_length=8,
        description="Tokens an entry keeps in each tier, newest tier first; 0: as encoded.",
    )
    tier_shares: tuple[StrictFloat, ...] = Field(
        default=(0.25, 0.25, 0.5),
        min_length=1,
        max_length=8,
        description="Share of the budget each tier may hold (one per tier, summing to 1).",
    )
    merge_similarity: StrictFloat = Field(
        default=0.95,
        ge=0.0,
        le=1.0,
        description="Consecutive chunks at least this similar become one entry.",
    )
    recall: StrictInt = Field(
        default=2,
        ge=0,
        le=16,
        description="Entries re-inserted into the context per chunk; 0 only stores.",
    )
    min_similarity: StrictFloat = Field(
        default=0.5,
        ge=-1.0,
        le=1.0,
        description="An entry is recalled only if at least this similar to the chunk.",
    )
    persist: StrictBool = Field(
        default=False,
        description="Keep the memory on disk so a restart within the session keeps it.",
    )
    path: Path | None = Field(
        default=None,
        description="Memory file (SQLite); unset: memory.sqlite3 beside the journal.",
    )
    resume_within_s: StrictFloat = Field(
        default=300.0,
        ge=0.0,
        le=86400.0,
        description="A restart this soon after the last chunk continues the session.",
    )
    keep_after_session: StrictBool = Field(
        default=False,
        description="Keep an ended session's memory on disk (default: wipe it).",
    )

    def __post_init__(self) -> None:
        if len(self.tier_shares) != len(self.tier_tokens):
            raise ValueError(
                f"tier_shares has {len(self.tier_shares)} values but tier_tokens has "
                f"{len(self.tier_tokens)}: give one share per tier"
            )
        if any(t < 0 for t in self.tier_tokens):
            raise ValueError(f"tier_tokens {list(self.tier_tokens)}: counts must be >= 0")
        if any(s <= 0 for s in self.tier_shares) or abs(sum(self.tier_shares) - 1) > 1e-6:
            raise ValueError(f"tier_shares {list(self.tier_shares)} must be > 0 each and sum to 1")


@dataclass(config=_SECTION)
class ServiceConfig:
    watchdog: StrictBool = Field(
        default=True, description="Send WATCHDOG=1 while the chunk loop makes progress."
    )
    metrics_address: Annotated[StrictStr, AfterValidator(_host_port)] = Field(
        default="127.0.0.1:9464", description='Prometheus /metrics and /healthz; "" disables.'
    )


@dataclass(config=_SECTION)
class LoggingConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level; --log-level overrides it."
    )
    format: Literal["auto", "journal", "text"] = Field(
        default="auto", description="auto: journal prefixes under systemd, timestamps elsewhere."
    )


@dataclass(config=_SECTION)
class VenusConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    engines: EnginesConfig = field(default_factory=EnginesConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    video: VideoConfig = field(default_factory=VideoConfig)
    playback: PlaybackConfig = field(default_factory=PlaybackConfig)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    capabilities: CapabilitiesConfig = field(default_factory=CapabilitiesConfig)
    homeassistant: HomeAssistantConfig = field(default_factory=HomeAssistantConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
