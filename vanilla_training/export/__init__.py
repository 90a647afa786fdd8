"""Exporters that need the application: the Argos Translate package (`argos.py`) reads what training recorded."""
