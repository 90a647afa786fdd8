"""Beam search with the paper's length penalty (section 6.1), as a decoding loop for transformers' `generate`.

The paper decodes with "beam search with a beam size of 4 and length penalty alpha = 0.6 [38]", reference 38 being
GNMT (Wu et al., 2016, equation 14), which ranks a finished hypothesis Y by

    log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6) ** alpha.

transformers' beam search ranks it by log P(Y | X) / |Y| ** alpha. Both favour longer outputs as alpha grows,
transformers' form more strongly: for alpha = 0.6, going from 5 to 10 tokens raises |Y| ** alpha by 52% and lp(Y)
by 28%. Scores differ, and sometimes the chosen hypothesis. |Y| counts the generated tokens, the end-of-sequence
token included and the decoder start token left out, in both forms (tensor2tensor, the paper's code, counts the
same way).

`gnmt_beam_search` is transformers' beam search with that one change: its ranking of finished hypotheses and its
test for stopping early divide by lp(Y) instead of |Y| ** alpha. Everything else follows transformers' beam search
step for step (which candidates are kept, when a hypothesis counts as finished, `early_stopping`), so with
alpha = 0 both give the same sequences and scores. It is a public extension point of `generate`, not a patch:

    from modeling_vanilla.gnmt_beam_search import gnmt_beam_search

    model.generate(**inputs, custom_generate=gnmt_beam_search)  # num_beams, length_penalty (alpha) as usual

`generate` prepares the inputs, encoder output, cache, logits processors and stopping criteria as it always does,
then calls `gnmt_beam_search` instead of its own beam search. The default decoding stays transformers' form.

The same file works as a `custom_generate` folder (remote code: it imports only torch, transformers and the
standard library): `save_custom_generate("gnmt")` writes `gnmt/custom_generate/generate.py`, and
`model.generate(**inputs, custom_generate="gnmt", trust_remote_code=True)` runs it. Do not write that folder into a
model folder: `from_pretrained(..., trust_remote_code=True)` would then make it that model's `generate`.
"""

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch.nn import functional as F
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation import GenerateBeamEncoderDecoderOutput

# A score that never wins: transformers' beam search marks excluded candidates the same way.
EXCLUDED = -1.0e9


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (GNMT, Wu et al. 2016, equation 14; the paper's section 6.1)."""
    return ((5 + length) / 6) ** alpha


def _gather_beams(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """`tensor[b, indices[b, j], ...]` for every batch item b: picks hypotheses along dimension 1."""
    while indices.dim() < tensor.dim():
        indices = indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, indices, dim=1)


def _check_supported(model: PreTrainedModel, generation_config: GenerationConfig) -> None:
    """ValueError naming the setting if `gnmt_beam_search` (or `constrained_beam_search`) cannot honour it."""
    if not model.config.is_encoder_decoder:
        raise ValueError(f"this beam search decodes encoder-decoder models; {type(model).__name__} is not one")
    if generation_config.do_sample:
        raise ValueError("this beam search is deterministic: do_sample=True is not supported")
    for option in ("output_attentions", "output_hidden_states", "output_logits"):
        if generation_config.return_dict_in_generate and getattr(generation_config, option):
            raise ValueError(f"this beam search returns sequences and scores only: {option}=True is not supported")


def eos_ids_of(generation_config: GenerationConfig) -> list[int]:
    """`generation_config.eos_token_id` as a list (none, one or several end-of-sequence ids)."""
    eos_ids = generation_config.eos_token_id
    return [] if eos_ids is None else [eos_ids] if isinstance(eos_ids, int) else list(eos_ids)


def _next_token_logits(
    model: PreTrainedModel, flat_running: torch.LongTensor, first_step: bool, model_kwargs: dict
) -> torch.Tensor:
    """The model's float32 logits for the next token of every hypothesis, `(batch * num_beams, vocab)`; updates the
    cache and the decoder attention mask in `model_kwargs` (the cache holds the earlier steps)."""
    model_inputs = model.prepare_inputs_for_generation(
        flat_running,
        next_sequence_length=None if first_step or not model_kwargs.get("use_cache") else 1,
        is_first_iteration=first_step,
        **model_kwargs,
    )
    outputs = model(**model_inputs, return_dict=True)
    if outputs.get("cache") is not None:
        model_kwargs["cache"] = outputs.cache
    if model_kwargs.get("decoder_attention_mask") is not None:
        mask = model_kwargs["decoder_attention_mask"]
        model_kwargs["decoder_attention_mask"] = torch.cat((mask, mask.new_ones(mask.shape[0], 1)), dim=-1)
    return outputs.logits[:, -1, :].to(dtype=torch.float32, copy=True)


class _Extensions(NamedTuple):
    """The best extensions of all hypotheses of each sentence, `(batch, candidates, ...)`, best first."""

    scores: torch.Tensor  # summed log-probability
    parent_beams: torch.LongTensor  # the running hypothesis each one extends
    sequences: torch.LongTensor  # `(batch, candidates, max_length)`
    ends: torch.BoolTensor  # end-of-sequence or length limit


@dataclass
class _BeamSearch:
    """The state of the search: running and finished hypotheses of each sentence, `(batch, num_beams, ...)`."""

    num_beams: int
    alpha: float
    early_stopping: bool | str
    max_length: int
    prompt_length: int
    cur_len: int
    # Candidates kept per step: enough that num_beams of them are still running even if the best ones all end.
    candidates: int
    among_best: torch.BoolTensor  # `(candidates,)`: only the best num_beams may join the finished set
    batch_offset: torch.LongTensor  # first flat (batch * num_beams) index of each sentence, for the cache
    running: torch.LongTensor
    running_scores: torch.Tensor
    finished: torch.LongTensor
    finished_scores: torch.Tensor
    finished_lengths: torch.LongTensor
    is_finished: torch.BoolTensor
    can_improve: torch.BoolTensor  # `(batch, 1)`: can a running hypothesis still beat the finished ones?
    step_scores: tuple[torch.Tensor, ...] | None

    @classmethod
    def start(cls, input_ids: torch.LongTensor, generation_config: GenerationConfig) -> "_BeamSearch":
        """The search before the first step: `input_ids` is the decoder start of each hypothesis."""
        num_beams, max_length = generation_config.num_beams, generation_config.max_length
        eos_ids = eos_ids_of(generation_config)
        batch_size, prompt_length = input_ids.shape[0] // num_beams, input_ids.shape[1]
        device = input_ids.device
        candidates = max(2, 1 + len(eos_ids)) * num_beams
        # Unused positions hold transformers' beam-search filler (the pad id, or the first end-of-sequence id where
        # the pad id is 0 or unset), so that both forms return identical tensors.
        filler = (generation_config.pad_token_id or eos_ids[0]) if eos_ids else -1
        running = torch.full((batch_size, num_beams, max_length), filler, dtype=torch.long, device=device)
        running[:, :, :prompt_length] = input_ids.view(batch_size, num_beams, prompt_length)
        running_scores = torch.zeros(batch_size, num_beams, device=device)
        running_scores[:, 1:] = EXCLUDED  # all beams start identical: extend only the first one at the first step
        return_scores = generation_config.return_dict_in_generate and generation_config.output_scores
        return cls(
            num_beams=num_beams,
            alpha=generation_config.length_penalty,
            early_stopping=generation_config.early_stopping,
            max_length=max_length,
            prompt_length=prompt_length,
            cur_len=prompt_length,
            candidates=candidates,
            among_best=torch.arange(candidates, device=device) < num_beams,
            batch_offset=torch.arange(batch_size, device=device)[:, None] * num_beams,
            running=running,
            running_scores=running_scores,
            finished=running.clone(),
            finished_scores=torch.full((batch_size, num_beams), EXCLUDED, device=device),
            finished_lengths=torch.zeros(batch_size, num_beams, dtype=torch.long, device=device),
            is_finished=torch.zeros(batch_size, num_beams, dtype=torch.bool, device=device),
            can_improve=torch.ones(batch_size, 1, dtype=torch.bool, device=device),
            step_scores=() if return_scores else None,
        )

    @property
    def batch_size(self) -> int:
        """The number of sentences."""
        return self.running.shape[0]

    def next_token_log_probs(
        self, model: PreTrainedModel, logits_processor: LogitsProcessorList, model_kwargs: dict
    ) -> torch.Tensor:
        """a. Log-probabilities of the next token for every running hypothesis, `(batch * num_beams, vocab)`."""
        flat_running = self.running[:, :, : self.cur_len].reshape(self.batch_size * self.num_beams, self.cur_len)
        logits = _next_token_logits(model, flat_running, self.cur_len == self.prompt_length, model_kwargs)
        log_probs = logits_processor(flat_running, F.log_softmax(logits, dim=-1))
        if self.step_scores is not None:
            self.step_scores += (log_probs.clone(),)
        return log_probs

    def best_extensions(self, log_probs: torch.Tensor, stopping_criteria: StoppingCriteriaList) -> _Extensions:
        """b. The best extensions of all hypotheses of a sentence, by summed log-probability."""
        vocab_size = log_probs.shape[-1]
        summed = log_probs.view(self.batch_size, self.num_beams, vocab_size) + self.running_scores[:, :, None]
        top_scores, top_indices = torch.topk(summed.view(self.batch_size, -1), k=self.candidates)
        parent_beams, tokens = top_indices // vocab_size, top_indices % vocab_size
        extended = _gather_beams(self.running, parent_beams)
        extended[:, :, self.cur_len] = tokens
        flat_extended = extended[:, :, : self.cur_len + 1].reshape(self.batch_size * self.candidates, -1)
        ends = stopping_criteria(flat_extended, self.step_scores).view(self.batch_size, self.candidates)
        return _Extensions(top_scores, parent_beams, extended, ends)

    def keep_running(self, extensions: _Extensions) -> torch.LongTensor:
        """c. The num_beams best extensions that did not end keep running. Returns the new order of the cache."""
        still_running_scores = extensions.scores + extensions.ends.to(torch.float32) * EXCLUDED
        keep = torch.topk(still_running_scores, k=self.num_beams)[1]
        self.running = _gather_beams(extensions.sequences, keep)
        self.running_scores = _gather_beams(still_running_scores, keep)
        return (_gather_beams(extensions.parent_beams, keep) + self.batch_offset).view(-1)

    def admit_finished(self, extensions: _Extensions) -> None:
        """d. Extensions that ended compete with the finished hypotheses by their penalised score (the paper's form,
        GNMT equation 14), unless the finished set is full (`early_stopping=True`) or can no longer improve."""
        length = self.cur_len + 1 - self.prompt_length
        penalised = extensions.scores / gnmt_length_penalty(length, self.alpha)
        all_full = torch.all(self.is_finished, dim=-1, keepdim=True) & (self.early_stopping is True)
        penalised += all_full.to(torch.float32) * EXCLUDED
        penalised += (~self.can_improve).to(torch.float32) * EXCLUDED
        just_finished = extensions.ends & self.among_best[None, :]
        penalised += (~just_finished) * EXCLUDED
        merged_scores = torch.cat((self.finished_scores, penalised), dim=1)
        best = torch.topk(merged_scores, k=self.num_beams)[1]
        self.finished = _gather_beams(torch.cat((self.finished, extensions.sequences), dim=1), best)
        self.finished_scores = _gather_beams(merged_scores, best)
        lengths = torch.full_like(extensions.ends, length, dtype=torch.long)
        self.finished_lengths = _gather_beams(torch.cat((self.finished_lengths, lengths), dim=1), best)
        self.is_finished = _gather_beams(torch.cat((self.is_finished, just_finished), dim=1), best)

    def update_can_improve(self) -> None:
        """e. Can a running hypothesis still beat the worst finished one? Estimated at the current length, or at the
        length limit with early_stopping="never" and alpha > 0 (where longer can only score higher)."""
        if self.early_stopping == "never" and self.alpha > 0:
            best_length = self.max_length - self.prompt_length
        else:
            best_length = self.cur_len - self.prompt_length
        best_running = self.running_scores[:, :1] / gnmt_length_penalty(best_length, self.alpha)
        worst_finished = torch.where(self.is_finished, self.finished_scores.min(dim=1, keepdim=True)[0], EXCLUDED)
        self.can_improve = self.can_improve & torch.any(best_running > worst_finished, dim=-1, keepdim=True)

    def is_done(self, ends: torch.BoolTensor) -> bool:
        """Stop when no sentence can improve, every finished set is full (`early_stopping=True`, the paper's
        "terminate early when possible"), or every candidate of the last step ended."""
        all_done = torch.all(self.is_finished) & (self.early_stopping is True)
        return not (torch.any(self.can_improve) and not all_done and not torch.all(ends))

    def output(
        self, generation_config: GenerationConfig, cache: object | None
    ) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
        """The best hypotheses, cut after the longest one returned."""
        returned = generation_config.num_return_sequences
        sequences = self.finished[:, :returned].reshape(self.batch_size * returned, self.max_length)
        sequences = sequences[:, : self.prompt_length + int(self.finished_lengths[:, :returned].max())]
        if not generation_config.return_dict_in_generate:
            return sequences
        return GenerateBeamEncoderDecoderOutput(
            sequences=sequences,
            sequences_scores=self.finished_scores[:, :returned].reshape(-1) if self.step_scores is not None else None,
            scores=self.step_scores,
            cache=cache,
        )


@torch.no_grad()
def gnmt_beam_search(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    **model_kwargs,
) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
    """Beam search ranking finished hypotheses by log P(Y | X) / ((5 + |Y|) / 6) ** alpha (section 6.1).

    The signature is that of transformers' `_beam_search`, which `generate(custom_generate=...)` calls: `input_ids`
    holds the decoder start of each hypothesis, `(batch * num_beams, 1)`, and `model_kwargs` the encoder output,
    the source attention mask and the cache. alpha is `generation_config.length_penalty`.

    Each step extends every running hypothesis by every token, keeps the 2 * num_beams best extensions by summed
    log-probability (more with several end-of-sequence ids), lets those among the best num_beams that end
    (end-of-sequence or length limit) compete for the finished set by their penalised score, and continues with the
    num_beams best that did not end. The search stops when the finished set of every sentence is full
    (`early_stopping=True`, the paper's "terminate early when possible"), when no running hypothesis can beat the
    finished ones any more (the same heuristic as transformers, with lp in place of |Y| ** alpha), or at the
    length limit.
    """
    _check_supported(model, generation_config)
    if generation_config.force_words_ids is not None:
        raise ValueError(
            "gnmt_beam_search does not place force_words_ids: leave custom_generate out, and the model's generate "
            "decodes them with constrained_beam_search"
        )
    search = _BeamSearch.start(input_ids, generation_config)
    while True:
        log_probs = search.next_token_log_probs(model, logits_processor, model_kwargs)
        extensions = search.best_extensions(log_probs, stopping_criteria)
        cache_order = search.keep_running(extensions)
        search.admit_finished(extensions)
        if model_kwargs.get("cache") is not None:
            model_kwargs["cache"].reorder_cache(cache_order)
        search.cur_len += 1
        search.update_can_improve()
        if search.is_done(extensions.ends):
            return search.output(generation_config, model_kwargs.get("cache"))


def generate(model: PreTrainedModel, *args, **kwargs) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
    """Entry point of the `custom_generate` folder route: transformers calls it with `generate`'s own arguments.
    It runs the class's `generate` (not an instance attribute, which a folder loaded with the model would be)."""
    return type(model).generate(model, *args, custom_generate=gnmt_beam_search, **kwargs)


def save_custom_generate(folder: str | Path) -> Path:
    """Writes this file as `folder/custom_generate/generate.py`, for
    `model.generate(..., custom_generate=str(folder), trust_remote_code=True)`; returns the file's path."""
    target = Path(folder) / "custom_generate" / "generate.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, target)
    return target
