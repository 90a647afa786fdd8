"""The `vanilla-*` commands, `python -m vanilla_training.cli.NAME`: each parses its arguments and calls the
library."""
