"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar, 2018, "Fast Lexically Constrained
Decoding with Dynamic Beam Allocation for Neural Machine Translation"), for `generate(..., force_words_ids=...)`.

transformers 5 no longer runs `force_words_ids` itself: it hands them to a Hub repository, which cannot be reached
offline. This model's `generate` decodes them here instead, with transformers' meaning: every listed sequence of
token ids appears in the output; a list of such lists is a disjunctive constraint, met by any one of its forms.

    model.generate(**inputs, num_beams=4, force_words_ids=[tokenizer("Haus", add_special_tokens=False).input_ids])

Each sentence of a batch may have its own constraints (a glossary's terms differ from sentence to sentence):

    model.generate(**inputs, num_beams=4, force_words_ids_per_sentence=[[term_ids], [], [other_ids, term_ids]])

The beam keeps its size k (Post & Vilar's algorithm):
- a hypothesis may end (end-of-sequence) only once every constraint is met, or at the length limit;
- the candidates of a step are plain beam search's best extensions, each hypothesis' best next token, and every
  token that starts or continues a constraint's form;
- the candidates are grouped into banks by the number of constraint tokens they have placed, and the k places of
  the beam are shared among the banks, so that hypotheses that placed more constraint tokens are not crowded out by
  better-scoring ones that placed fewer; places a bank cannot fill go to the other banks in turn, fullest first;
- a form begun and then left counts nothing (only a complete occurrence meets a constraint).

A sentence without constraints is decoded exactly as transformers' beam search decodes it (one bank: the same
candidates, the same ranking by log P(Y | X) / |Y| ** alpha, the same stopping). Where the length limit comes before
every constraint is met, the best hypothesis that placed the most constraint tokens is returned: the caller can see
which constraint is missing.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation import GenerateBeamEncoderDecoderOutput

from .gnmt_beam_search import EXCLUDED, _check_supported, _gather_beams, _next_token_logits, eos_ids_of

# One constraint: its forms (token-id sequences); the output meets it when any one form appears in it.
Constraint = tuple[tuple[int, ...], ...]


def as_constraints(force_words_ids: list) -> list[Constraint]:
    """transformers' `force_words_ids`: each item a list of token ids (it must appear) or a list of such lists
    (one of them must appear). ValueError naming an item that is neither."""
    constraints = []
    for item in force_words_ids:
        forms = [item] if isinstance(item, (list, tuple)) and item and all(isinstance(t, int) for t in item) else item
        if not (
            isinstance(forms, (list, tuple))
            and forms
            and all(
                isinstance(form, (list, tuple)) and form and all(isinstance(t, int) and t >= 0 for t in form)
                for form in forms
            )
        ):
            raise ValueError(f"force_words_ids: {item!r} is neither a list of token ids nor a list of such lists")
        constraints.append(tuple(tuple(form) for form in forms))
    return constraints


def constraint_length(constraint: Constraint) -> int:
    """The constraint tokens a hypothesis places by meeting it: its shortest form's length."""
    return min(len(form) for form in constraint)


def _begun(tokens: list[int], form: tuple[int, ...]) -> int:
    """The longest j < len(form) such that `tokens` end with the first j tokens of `form` (0: not begun)."""
    for j in range(min(len(form) - 1, len(tokens)), 0, -1):
        if tuple(tokens[-j:]) == form[:j]:
            return j
    return 0


def _ends_with(tokens: list[int], form: tuple[int, ...]) -> bool:
    return len(tokens) >= len(form) and tuple(tokens[-len(form) :]) == form


def wanted_tokens(tokens: list[int], met: tuple[bool, ...], constraints: list[Constraint]) -> set[int]:
    """The tokens that start or continue a form of an unmet constraint after `tokens`."""
    wanted = set()
    for done, forms in zip(met, constraints, strict=True):
        for form in () if done else forms:
            wanted.update(
                form[j] for j in range(len(form)) if j == 0 or (j <= len(tokens) and _ends_with(tokens, form[:j]))
            )
    return wanted


def advance(tokens: list[int], met: tuple[bool, ...], constraints: list[Constraint]) -> tuple[tuple[bool, ...], int]:
    """The constraints met once `tokens` (the last one just added) are generated, and the bank: the number of
    constraint tokens placed (a met constraint counts its length, an unmet one the tokens of its longest form
    begun, less than its length)."""
    now_met = tuple(
        done or any(_ends_with(tokens, form) for form in forms) for done, forms in zip(met, constraints, strict=True)
    )
    bank = sum(
        constraint_length(forms) if done else min(constraint_length(forms) - 1, max(_begun(tokens, f) for f in forms))
        for done, forms in zip(now_met, constraints, strict=True)
    )
    return now_met, bank


def allocate(candidates: list["_Candidate"], num_beams: int, num_banks: int) -> list["_Candidate"]:
    """Post & Vilar's beam allocation: `num_beams` of the candidates (sorted best first), each bank getting
    num_beams // num_banks places, the rest to the fullest banks; a bank's unfilled places go round the other banks,
    fullest first. Returned best first."""
    banks: list[list[_Candidate]] = [[] for _ in range(num_banks)]
    for candidate in candidates:
        banks[candidate.bank].append(candidate)
    sizes = [num_beams // num_banks + (bank >= num_banks - num_beams % num_banks) for bank in range(num_banks)]
    chosen = [candidate for bank, size in zip(banks, sizes, strict=True) for candidate in bank[:size]]
    leftovers = [bank[size:] for bank, size in zip(banks, sizes, strict=True)][::-1]
    while len(chosen) < num_beams and any(leftovers):
        for rest in leftovers:
            if rest and len(chosen) < num_beams:
                chosen.append(rest.pop(0))
    return sorted(chosen, key=lambda candidate: -candidate.score)


@dataclass
class _Candidate:
    """One extension of a running hypothesis: its parent beam, the token added, its summed log-probability, the
    constraints it meets, its bank, and whether it ends."""

    parent: int
    token: int
    score: float
    met: tuple[bool, ...]
    bank: int
    ends: bool = False


@dataclass
class _Finished:
    """A finished hypothesis: its bank, its penalised score, its tokens (decoder start included)."""

    bank: int
    score: float
    tokens: list[int]


@dataclass
class _ConstrainedSearch:
    """The state of the search: the running hypotheses of each sentence, `(batch, num_beams, ...)`, the constraints
    they met, and each sentence's finished hypotheses (best first: most constraint tokens, then penalised score)."""

    num_beams: int
    alpha: float
    early_stopping: bool | str
    max_length: int
    prompt_length: int
    cur_len: int
    plain_candidates: int  # plain beam search's candidates per step: enough that num_beams of them still run
    filler: int  # transformers' beam-search filler of unused positions
    constraints: list[list[Constraint]]
    running: torch.LongTensor
    running_scores: torch.Tensor
    running_met: list[list[tuple[bool, ...]]]
    finished: list[list[_Finished]]
    can_improve: list[bool]
    step_scores: tuple[torch.Tensor, ...] | None

    @classmethod
    def start(
        cls, input_ids: torch.LongTensor, generation_config: GenerationConfig, constraints: list[list[Constraint]]
    ) -> "_ConstrainedSearch":
        """The search before the first step: `input_ids` is the decoder start of each hypothesis."""
        num_beams, max_length = generation_config.num_beams, generation_config.max_length
        eos_ids = eos_ids_of(generation_config)
        batch_size, prompt_length = len(constraints), input_ids.shape[1]
        filler = (generation_config.pad_token_id or eos_ids[0]) if eos_ids else -1
        running = torch.full((batch_size, num_beams, max_length), filler, dtype=torch.long, device=input_ids.device)
        running[:, :, :prompt_length] = input_ids.view(batch_size, num_beams, prompt_length)
        running_scores = torch.zeros(batch_size, num_beams, device=input_ids.device)
        running_scores[:, 1:] = EXCLUDED  # all beams start identical: extend only the first one at the first step
        return_scores = generation_config.return_dict_in_generate and generation_config.output_scores
        return cls(
            num_beams=num_beams,
            alpha=generation_config.length_penalty,
            early_stopping=generation_config.early_stopping,
            max_length=max_length,
            prompt_length=prompt_length,
            cur_len=prompt_length,
            plain_candidates=max(2, 1 + len(eos_ids)) * num_beams,
            filler=filler,
            constraints=constraints,
            running=running,
            running_scores=running_scores,
            running_met=[[(False,) * len(sentence)] * num_beams for sentence in constraints],
            finished=[[] for _ in constraints],
            can_improve=[True] * batch_size,
            step_scores=() if return_scores else None,
        )

    def penalised(self, score: float, length: int) -> float:
        """transformers' ranking of a finished hypothesis: log P(Y | X) / |Y| ** alpha (in float32, as it does)."""
        return float(torch.tensor(score, dtype=torch.float32) / length**self.alpha)

    def num_banks(self, sentence: int) -> int:
        return 1 + sum(constraint_length(constraint) for constraint in self.constraints[sentence])

    def next_token_log_probs(
        self, model: PreTrainedModel, logits_processor: LogitsProcessorList, model_kwargs: dict
    ) -> torch.Tensor:
        """Log-probabilities of the next token for every running hypothesis, `(batch * num_beams, vocab)`."""
        batch_size = len(self.constraints)
        flat_running = self.running[:, :, : self.cur_len].reshape(batch_size * self.num_beams, self.cur_len)
        logits = _next_token_logits(model, flat_running, self.cur_len == self.prompt_length, model_kwargs)
        log_probs = logits_processor(flat_running, F.log_softmax(logits, dim=-1))
        if self.step_scores is not None:
            self.step_scores += (log_probs.clone(),)
        return log_probs

    def candidates(self, log_probs: torch.Tensor, eos_ids: list[int]) -> list[list[_Candidate]]:
        """The candidates of each sentence, best first: plain beam search's best extensions, and, where the sentence
        has constraints, each hypothesis' best token and the tokens that start or continue a form. A hypothesis that
        has not met every constraint may not end."""
        batch_size, vocab_size = len(self.constraints), log_probs.shape[-1]
        summed = log_probs.view(batch_size, self.num_beams, vocab_size) + self.running_scores[:, :, None]
        unmet = torch.tensor([[not all(met) for met in beams] for beams in self.running_met], device=summed.device)
        summed[:, :, eos_ids] += unmet[:, :, None].to(summed.dtype) * EXCLUDED
        top_scores, top_indices = torch.topk(summed.view(batch_size, -1), k=self.plain_candidates)
        pairs = [[divmod(index, vocab_size) for index in row] for row in top_indices.tolist()]
        scores = top_scores.tolist()
        generated = self.running[:, :, self.prompt_length : self.cur_len].tolist()
        running_scores = self.running_scores.tolist()
        best_tokens = summed.argmax(dim=-1).tolist()
        extra = []
        for sentence in range(batch_size):
            if not self.constraints[sentence]:
                continue
            for beam in range(self.num_beams):
                if running_scores[sentence][beam] > EXCLUDED / 2:
                    met = self.running_met[sentence][beam]
                    tokens = wanted_tokens(generated[sentence][beam], met, self.constraints[sentence])
                    tokens.add(best_tokens[sentence][beam])
                    extra += [(sentence, beam, t) for t in tokens if (beam, t) not in pairs[sentence]]
        if extra:
            extra_scores = summed[tuple(torch.tensor(extra, device=summed.device).T)].tolist()
            for (sentence, beam, token), score in zip(extra, extra_scores, strict=True):
                pairs[sentence].append((beam, token))
                scores[sentence].append(score)
        candidates = []
        for sentence in range(batch_size):
            row = []
            for (beam, token), score in zip(pairs[sentence], scores[sentence], strict=True):
                met, bank = self.running_met[sentence][beam], 0
                if self.constraints[sentence]:
                    met, bank = advance(generated[sentence][beam] + [token], met, self.constraints[sentence])
                row.append(_Candidate(beam, token, score, met, bank))
            candidates.append(sorted(row, key=lambda candidate: -candidate.score))
        return candidates

    def mark_ends(self, candidates: list[list[_Candidate]], stopping_criteria: StoppingCriteriaList) -> torch.Tensor:
        """Sets `ends` of every candidate (end-of-sequence or length limit, as the stopping criteria say). Returns the
        sequences of the candidates, `(batch, candidates, cur_len + 1)`."""
        width = max(len(row) for row in candidates)
        parents = [[c.parent for c in row] + [0] * (width - len(row)) for row in candidates]
        tokens = [[c.token for c in row] + [self.filler] * (width - len(row)) for row in candidates]
        device = self.running.device
        extended = _gather_beams(self.running[:, :, : self.cur_len + 1], torch.tensor(parents, device=device))
        extended[:, :, self.cur_len] = torch.tensor(tokens, device=device)
        flat = extended.view(len(candidates) * width, self.cur_len + 1)
        ends = stopping_criteria(flat, self.step_scores).view(len(candidates), width).tolist()
        for row, row_ends in zip(candidates, ends, strict=True):
            for candidate, candidate_ends in zip(row, row_ends, strict=False):
                candidate.ends = candidate_ends
        return extended

    def admit_finished(self, sentence: int, candidates: list[_Candidate], sequences: torch.Tensor) -> None:
        """Candidates that end and are among the num_beams best of their bank compete with the finished hypotheses,
        by bank, then penalised score; unless the finished set is full (`early_stopping=True`) or can no longer
        improve."""
        finished = self.finished[sentence]
        if not self.can_improve[sentence] or (len(finished) == self.num_beams and self.early_stopping is True):
            return
        rank_in_bank: dict[int, int] = {}
        length = self.cur_len + 1 - self.prompt_length
        for index, candidate in enumerate(candidates):
            rank = rank_in_bank[candidate.bank] = rank_in_bank.get(candidate.bank, -1) + 1
            if candidate.ends and rank < self.num_beams and candidate.score > EXCLUDED / 2:
                score = self.penalised(candidate.score, length)
                finished.append(_Finished(candidate.bank, score, sequences[index].tolist()))
        finished.sort(key=lambda hypothesis: (-hypothesis.bank, -hypothesis.score))
        del finished[self.num_beams :]

    def keep_running(self, candidates: list[list[_Candidate]]) -> torch.LongTensor:
        """The candidates that did not end, shared among the banks (`allocate`), keep running. Returns the new order
        of the cache."""
        parents, tokens, scores = [], [], []
        for sentence, row in enumerate(candidates):
            running = [c for c in row if not c.ends and c.score > EXCLUDED / 2]
            chosen = allocate(running, self.num_beams, self.num_banks(sentence))
            chosen += [_Candidate(0, self.filler, EXCLUDED, row[0].met, 0)] * (self.num_beams - len(chosen))
            parents.append([c.parent for c in chosen])
            tokens.append([c.token for c in chosen])
            scores.append([c.score for c in chosen])
            self.running_met[sentence] = [c.met for c in chosen]
        device = self.running.device
        parents_tensor = torch.tensor(parents, device=device)
        self.running = _gather_beams(self.running, parents_tensor)
        self.running[:, :, self.cur_len] = torch.tensor(tokens, device=device)
        self.running_scores = torch.tensor(scores, device=device, dtype=self.running_scores.dtype)
        batch_offset = torch.arange(len(candidates), device=device)[:, None] * self.num_beams
        return (parents_tensor + batch_offset).view(-1)

    def update_can_improve(self) -> None:
        """Can a running hypothesis still beat the worst finished one? transformers' estimate: at the current length,
        or at the length limit with early_stopping="never" and alpha > 0."""
        if self.early_stopping == "never" and self.alpha > 0:
            best_length = self.max_length - self.prompt_length
        else:
            best_length = self.cur_len - self.prompt_length
        best_running = self.running_scores.max(dim=1)[0].tolist()
        for sentence, finished in enumerate(self.finished):
            if len(finished) == self.num_beams:
                worst = min(hypothesis.score for hypothesis in finished)
                improves = self.penalised(best_running[sentence], best_length) > worst
                self.can_improve[sentence] = self.can_improve[sentence] and improves

    def is_done(self, candidates: list[list[_Candidate]]) -> bool:
        """Stop when no sentence can improve, every finished set is full (`early_stopping=True`), or every candidate
        of the last step ended."""
        all_full = all(len(finished) == self.num_beams for finished in self.finished) and self.early_stopping is True
        all_ended = all(c.ends for row in candidates for c in row)
        return not (any(self.can_improve) and not all_full and not all_ended)

    def output(
        self, generation_config: GenerationConfig, cache: object | None
    ) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
        """The best finished hypotheses of each sentence, cut after the longest one returned."""
        returned = generation_config.num_return_sequences
        best = [hypothesis for finished in self.finished for hypothesis in finished[:returned]]
        if len(best) < returned * len(self.finished):
            raise RuntimeError("constrained beam search finished fewer hypotheses than it returns")
        width = max(len(hypothesis.tokens) for hypothesis in best)
        sequences = torch.full((len(best), width), self.filler, dtype=torch.long, device=self.running.device)
        for row, hypothesis in enumerate(best):
            sequences[row, : len(hypothesis.tokens)] = torch.tensor(hypothesis.tokens)
        if not generation_config.return_dict_in_generate:
            return sequences
        scores = torch.tensor([hypothesis.score for hypothesis in best], device=sequences.device)
        return GenerateBeamEncoderDecoderOutput(
            sequences=sequences,
            sequences_scores=scores if self.step_scores is not None else None,
            scores=self.step_scores,
            cache=cache,
        )


def sentence_constraints(
    generation_config: GenerationConfig, per_sentence: list | None, batch_size: int, vocab_size: int
) -> list[list[Constraint]]:
    """The constraints of each sentence: `generation_config.force_words_ids` (every sentence's) and the sentence's
    own. ValueError naming what cannot be decoded: a token id outside the vocabulary, an end-of-sequence token, a
    list of another length than the batch."""
    shared = as_constraints(generation_config.force_words_ids or [])
    if per_sentence is None:
        per_sentence = [[]] * batch_size
    if len(per_sentence) != batch_size:
        raise ValueError(
            f"force_words_ids_per_sentence has {len(per_sentence)} lists of constraints for {batch_size} sentences"
        )
    constraints = [shared + as_constraints(own) for own in per_sentence]
    eos_ids = set(eos_ids_of(generation_config))
    for sentence in constraints:
        for form in (form for constraint in sentence for form in constraint):
            if max(form) >= vocab_size or eos_ids & set(form):
                raise ValueError(
                    f"force_words_ids: {list(form)} holds a token id outside the vocabulary (size {vocab_size}) or "
                    "the end-of-sequence token"
                )
    return constraints


@torch.no_grad()
def constrained_beam_search(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    force_words_ids_per_sentence: list | None = None,
    **model_kwargs,
) -> GenerateBeamEncoderDecoderOutput | torch.LongTensor:
    """Beam search in which every constraint appears in the output (Post & Vilar, 2018: dynamic beam allocation).

    The signature is that of transformers' `_beam_search`, which `generate(custom_generate=...)` calls (this model's
    `generate` does so whenever constraints are given): the constraints are `generation_config.force_words_ids`,
    for every sentence, and `force_words_ids_per_sentence`, one list of constraints per sentence, in transformers'
    format. Each step extends the running hypotheses, gathers the candidates (`_ConstrainedSearch.candidates`), lets
    those that end compete for the finished set, and shares the beam among the banks of those that did not.
    """
    _check_supported(model, generation_config)
    eos_ids = eos_ids_of(generation_config)
    batch_size = input_ids.shape[0] // generation_config.num_beams
    constraints = sentence_constraints(
        generation_config, force_words_ids_per_sentence, batch_size, model.config.vocab_size
    )
    search = _ConstrainedSearch.start(input_ids, generation_config, constraints)
    while True:
        log_probs = search.next_token_log_probs(model, logits_processor, model_kwargs)
        candidates = search.candidates(log_probs, eos_ids)
        sequences = search.mark_ends(candidates, stopping_criteria)
        for sentence, row in enumerate(candidates):
            search.admit_finished(sentence, row, sequences[sentence])
        cache_order = search.keep_running(candidates)
        if model_kwargs.get("cache") is not None:
            model_kwargs["cache"].reorder_cache(cache_order)
        search.cur_len += 1
        search.update_can_improve()
        if search.is_done(candidates):
            return search.output(generation_config, model_kwargs.get("cache"))
