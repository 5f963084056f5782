"""Service glue: systemd notification and watchdog, signals, metrics and health."""
