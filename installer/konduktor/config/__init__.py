"""The installer's config.yaml: models, loader with line numbers, lint rules, derived capacity."""

from konduktor.config.findings import ConfigError, Finding
from konduktor.config.load import LoadedConfig, load_config, parse_config
from konduktor.config.model import Config

__all__ = ["Config", "ConfigError", "Finding", "LoadedConfig", "load_config", "parse_config"]
