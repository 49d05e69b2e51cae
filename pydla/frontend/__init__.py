"""Frontends: model formats → pydla IR."""
