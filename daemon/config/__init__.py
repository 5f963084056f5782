"""Configuration: one TOML file loaded into frozen dataclasses, every key validated.

``load_config(path)`` returns a :class:`VenusConfig` or raises
:class:`ConfigInvalid` carrying every problem found, each naming its key path.
"""

from venus.daemon.config.load import ConfigInvalid, ConfigProblem, load_config, parse_config
from venus.daemon.config.render import render_config
from venus.daemon.config.schema import DEFAULT_CONFIG_PATH, VenusConfig

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ConfigInvalid",
    "ConfigProblem",
    "VenusConfig",
    "load_config",
    "parse_config",
    "render_config",
]
