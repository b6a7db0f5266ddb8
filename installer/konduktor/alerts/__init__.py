"""Alertmanager's configuration from the config's `alerts:` section (pure)."""
