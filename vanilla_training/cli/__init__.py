"""The command-line entry points of vanilla_training."""
