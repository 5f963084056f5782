"""The error hierarchy: one base, one subclass per area.

Every subpackage raises its own subclass, chained with ``raise ... from e``. Messages
say what went wrong, where, and what to do next. Only a supervisor (the CLI's
``main`` or the daemon's part supervisors) catches broad exceptions.
"""


class VenusError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(VenusError):
    """The configuration file is missing, unreadable or invalid."""


class EngineError(VenusError):
    """An engine directory, manifest or inference session is unusable."""


class DeviceError(VenusError):
    """A microphone, speaker or camera could not be opened or was lost."""


class CapabilityError(VenusError):
    """A capability contract, MQTT message or worker misbehaved."""


class HarnessError(VenusError):
    """A work item, the journal or delivery went wrong."""


class ExportError(VenusError):
    """A checkpoint could not be read, converted or exported."""


class ServiceError(VenusError):
    """Service glue (sd_notify, signals, metrics) failed."""


class BenchError(VenusError):
    """A benchmark was asked for something it cannot measure or estimate."""


class DatagenError(VenusError):
    """The offline data pipeline (``venus.datagen``) cannot plan, synthesize or render a
    sample. Each stage raises its own subclass (``PlanError``, ``SynthesisError``,
    ``VideoError``); a bad generation config is a ``ConfigError`` instead."""


class EvaluationError(VenusError):
    """The evaluation suite (``venus.evaluation``) was given data or outputs it cannot
    score: a missing or misaligned file, bad metadata."""


class MemoryStoreError(VenusError):
    """The long-session memory file (``venus.daemon.memory.persist``) is unreadable, of a
    newer or foreign schema, or holds an entry that does not add up."""
