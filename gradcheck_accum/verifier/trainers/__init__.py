"""Adapters that run a training framework's own loop under `verify_loop`."""
