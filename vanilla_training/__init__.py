"""Training, data and evaluation for the vanilla Transformer."""
