"""The label-smoothed training loss (section 5.4) computed from the decoder's output a slice of rows at a time.

The loss is transformers' `LabelSmoother`'s, to the rounding: for each target position that is not padding, (1 -
epsilon) times the cross-entropy of the label plus epsilon times the mean cross-entropy over the vocabulary, averaged
over those positions. Only the way it is computed differs. Written plainly, a step holds the logits of every target
position over the whole vocabulary (2,048 x V in the CPU recipes) and passes over them a dozen times (float32 casts,
log-softmax, negation, gather, sum, and each of their gradients), and on a CPU those passes are a large share of the
step at a vocabulary of thousands (experiments/README.md, "A cheaper loss step"). Here the projection (section 3.4: the
shared embedding matrix), the softmax, the loss and its gradient are computed together for `ROWS_PER_SLICE` positions at
a time, whose logits stay in the CPU's cache; the gradients of the decoder's output and of the embedding matrix are made
in the forward pass and handed to autograd in the backward pass.
"""

import torch

ROWS_PER_SLICE = 256  # so that a slice's float32 logits stay in a CPU's cache


class _LabelSmoothedProjectionLoss(torch.autograd.Function):
    """The loss and, at once, its gradients with respect to `hidden` and `weight` (see the module's docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, epsilon, denominator, compute_dtype):
        vocab_size = weight.shape[0]
        hidden_c, weight_c = hidden.to(compute_dtype), weight.to(compute_dtype)
        counted = labels.ne(-100)
        targets = labels.clamp(min=0).unsqueeze(1)
        grad_hidden = torch.empty_like(hidden_c)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        # The mean logit of a row is its hidden vector times the mean embedding: no pass over the logits needed.
        mean_embedding = weight_c.float().mean(dim=0)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], ROWS_PER_SLICE):
                rows = slice(start, start + ROWS_PER_SLICE)
                logits = (hidden_c[rows] @ weight_c.T).float()
                label_logits = logits.gather(1, targets[rows])
                top = logits.amax(dim=1, keepdim=True)
                exponentials = logits.sub_(top).exp_()  # in place: the logits are not needed again
                sums = exponentials.sum(dim=1, keepdim=True)
                log_normalizer = top + sums.log()
                mean_logits = hidden_c[rows].float() @ mean_embedding.unsqueeze(1)
                losses = log_normalizer - (1 - epsilon) * label_logits - epsilon * mean_logits
                weights = counted[rows].unsqueeze(1) / denominator  # each counted position's share of the mean
                total += (losses * weights).sum()
                # d loss / d logits = softmax - (1 - epsilon) * one_hot(label) - epsilon / V, per counted position
                grad_logits = torch.addcmul(-weights * (epsilon / vocab_size), exponentials, weights / sums)
                grad_logits.scatter_add_(1, targets[rows], weights * (epsilon - 1))
                grad_logits_c = grad_logits.to(compute_dtype)
                grad_hidden[rows] = grad_logits_c @ weight_c
                grad_weight += grad_logits_c.T @ hidden_c[rows]
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = hidden.dtype, weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return (grad_hidden * grad_loss).to(hidden_dtype), (grad_weight * grad_loss).to(weight_dtype), *[None] * 4


def label_smoothed_projection_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    epsilon: float,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """The label-smoothed cross-entropy of the logits `hidden @ weight.T` (`hidden`: the decoder's output, `(...,
    d_model)`; `weight`: the `(vocab_size, d_model)` pre-softmax projection; `labels`: `hidden`'s leading shape, -100
    where nothing is predicted), averaged over `num_items_in_batch` positions (default: the counted ones), as
    transformers' `LabelSmoother` averages it. Under autocast the matrix products run in its dtype and the softmax in
    float32, as they do when the logits are made whole."""
    if not 0 <= epsilon < 1:
        raise ValueError(f"label smoothing must lie in [0, 1), got {epsilon}")
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(f"labels of shape {tuple(labels.shape)} for outputs of shape {tuple(hidden.shape[:-1])}")
    device_type = hidden.device.type
    compute_dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype
    labels = labels.reshape(-1)
    denominator = labels.ne(-100).sum() if num_items_in_batch is None else num_items_in_batch
    return _LabelSmoothedProjectionLoss.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, labels, epsilon, denominator, compute_dtype
    )
