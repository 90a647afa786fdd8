"""The vanilla-* commands."""
