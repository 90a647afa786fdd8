"""Checkpoint averaging (section 6.1: "we used a single model obtained by averaging the last 5 checkpoints")."""

from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel

import modeling_vanilla  # noqa: F401  (registers the model with the Auto classes)

WEIGHTS = "model.safetensors"


def average_checkpoints(checkpoints: list[str | Path]) -> PreTrainedModel:
    """The model of the last checkpoint with every weight replaced by its mean over `checkpoints`.

    Means are taken in float64 and cast back, so the result does not depend on the order of the checkpoints.
    """
    if not checkpoints:
        raise ValueError("no checkpoints to average")
    resolved = [Path(c).resolve() for c in checkpoints]
    repeated = sorted({str(c) for c, path in zip(checkpoints, resolved, strict=True) if resolved.count(path) > 1})
    if repeated:
        raise ValueError(f"checkpoints given more than once would weigh more in the mean: {', '.join(repeated)}")
    total: dict[str, torch.Tensor] = {}
    for checkpoint in checkpoints:
        path = Path(checkpoint) / WEIGHTS
        if not path.is_file():
            raise FileNotFoundError(f"{checkpoint} holds no {WEIGHTS}")
        state = load_file(path)
        if total and state.keys() != total.keys():
            raise ValueError(f"{checkpoint} does not hold the same tensors as {checkpoints[0]}")
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.double()
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoints[-1])
    averaged = {name: tensor / len(checkpoints) for name, tensor in total.items()}
    state = model.state_dict()
    with torch.no_grad():
        for name, tensor in averaged.items():
            state[name].copy_(tensor.to(state[name].dtype))
    return model
