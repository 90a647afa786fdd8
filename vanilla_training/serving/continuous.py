"""Continuous batching for the torch backend: sentences join the running batch at any decoding step and leave it as
soon as their beam search is done (iteration-level scheduling, as Orca and vLLM schedule language models). A batch
never decodes on for its longest sentence, and a new request never waits for a whole batch to finish.

Each sentence runs transformers' beam search by the model's generation config (section 6.1 for this project's
models: beam 4, length penalty 0.6, early stopping), rule for rule: the same candidates, the same finished set, the
same stopping tests, and the length limit of its own source (+ 50 tokens), so that its translations are those of
`generate` for that sentence alone. What lets sentences at different steps share one batch: the decoder takes each
row's positions (`decoder_position_ids`); a row that joined later has padding where the others have earlier steps,
masked by the decoder attention mask; the cross-attention keys and values, computed when a sentence joins, are
padded to the longest source and masked by the source mask. Columns that have become padding for every row are cut.
"""

import dataclasses
from collections.abc import Hashable

import torch
from torch.nn import functional as F
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from modeling_vanilla import EXTRA_OUTPUT_LENGTH
from modeling_vanilla.gnmt_beam_search import EXCLUDED, eos_ids_of

# Generation settings that make transformers add logits processors (or sample); of these the decoder here applies
# only banned single tokens (`bad_words_ids` of one token each: OPUS-MT models ban their pad token).
PROCESSOR_SETTINGS = (
    "do_sample",
    "sequence_bias",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "min_length",
    "min_new_tokens",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "repetition_penalty",
    "encoder_repetition_penalty",
    "exponential_decay_length_penalty",
    "renormalize_logits",
    "remove_invalid_values",
    "diversity_penalty",
)
NEUTRAL_VALUES = (None, False, 0, 1.0, [])


def unsupported_settings(config: GenerationConfig) -> list[str]:
    """The settings of `config` that the continuous decoder does not apply (sampling, banned sequences of several
    tokens, forced tokens, penalties, ...): a model whose generation config has any is translated batch by batch by
    `generate`."""
    unsupported = [name for name in PROCESSOR_SETTINGS if getattr(config, name, None) not in NEUTRAL_VALUES]
    if any(len(sequence) != 1 for sequence in config.bad_words_ids or []):
        unsupported.insert(0, "bad_words_ids")
    return unsupported


def banned_tokens(config: GenerationConfig) -> list[int]:
    """The tokens `config.bad_words_ids` bans (one-token sequences), but an end token, as transformers leaves it."""
    eos = set(eos_ids_of(config))
    return [sequence[0] for sequence in config.bad_words_ids or [] if sequence[0] not in eos]


@dataclasses.dataclass
class Beams:
    """The beam search of the sentences in the batch, `(sentences, beams, ...)`, as transformers keeps it for a
    batch, except that each sentence has its own step (`generated`) and length limit (its source length + 50).
    Tokens are the generated ones (the decoder start token left out), left-aligned, filled after their length with
    transformers' filler (the pad id, or the end id)."""

    keys: list[Hashable]  # the caller's handle of each sentence
    source_lengths: torch.LongTensor  # (sentences,) source tokens, end token included
    generated: torch.LongTensor  # (sentences,) tokens generated so far by every running hypothesis
    running: torch.LongTensor  # (sentences, beams, width)
    running_scores: torch.Tensor  # (sentences, beams) summed log-probabilities, float32
    finished: torch.LongTensor  # (sentences, beams, width)
    finished_scores: torch.Tensor  # (sentences, beams) penalised scores
    is_finished: torch.BoolTensor  # (sentences, beams)
    can_improve: torch.BoolTensor  # (sentences,)

    def select(self, index: torch.LongTensor) -> "Beams":
        """The sentences at `index`, in that order."""
        return Beams(
            [self.keys[i] for i in index.tolist()],
            *(getattr(self, field.name).index_select(0, index) for field in dataclasses.fields(self)[1:]),
        )

    @staticmethod
    def concatenate(first: "Beams", second: "Beams", filler: int) -> "Beams":
        """`first`'s sentences, then `second`'s, their token tensors widened to the wider of the two."""
        width = max(first.running.shape[2], second.running.shape[2])

        def widen(tokens: torch.Tensor) -> torch.Tensor:
            return F.pad(tokens, (0, width - tokens.shape[2]), value=filler)

        merged = {}
        for field in dataclasses.fields(Beams)[1:]:
            a, b = getattr(first, field.name), getattr(second, field.name)
            if field.name in ("running", "finished"):
                a, b = widen(a), widen(b)
            merged[field.name] = torch.cat((a, b))
        return Beams(first.keys + second.keys, **merged)


class ContinuousDecoder:
    """Beam search over a batch that sentences join (`join`) and leave (`step` returns them once done, `drop` takes
    them out unfinished). Rows of the model's cache are the hypotheses, sentence after sentence, `beams` each."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, beams: int | None = None):
        config = model.generation_config
        unsupported = unsupported_settings(config)
        if unsupported:
            raise ValueError(f"the continuous decoder does not apply these generation settings: {unsupported}")
        self.model, self.tokenizer = model, tokenizer
        self.beams = beams or config.num_beams or 1
        self.alpha = config.length_penalty if config.length_penalty is not None else 1.0
        # Beam search of one hypothesis is greedy search only if it stops at its first finished hypothesis.
        self.early_stopping = True if self.beams == 1 else config.early_stopping
        self.eos_ids = torch.tensor(eos_ids_of(config), dtype=torch.long)
        self.candidates = max(2, 1 + len(self.eos_ids)) * self.beams
        self.filler = (config.pad_token_id or int(self.eos_ids[0])) if len(self.eos_ids) else -1
        self.start_id = config.decoder_start_token_id
        self.banned = torch.tensor(banned_tokens(config), dtype=torch.long)
        self.beams_state: Beams | None = None
        self.cache: EncoderDecoderCache | None = None
        self.source_mask: torch.LongTensor | None = None  # (rows, longest source)

    @property
    def keys(self) -> list[Hashable]:
        """The handles of the sentences in the batch."""
        return [] if self.beams_state is None else list(self.beams_state.keys)

    @torch.inference_mode()
    def join(self, keys: list[Hashable], sentences: list[str]) -> None:
        """Adds `sentences` (with their handles `keys`) to the batch: encodes them and puts their cross-attention
        keys and values in the cache. Their first step is the batch's next step."""
        device = self.model.device
        inputs = self.tokenizer(sentences, return_tensors="pt", padding=True, padding_side="right").to(device)
        encoded = self.model.get_encoder()(**inputs).last_hidden_state
        count = len(sentences)
        scores = torch.zeros(count, self.beams)
        scores[:, 1:] = EXCLUDED  # every beam starts as the same hypothesis: only the first is extended
        newcomers = Beams(
            keys=list(keys),
            source_lengths=inputs["attention_mask"].sum(dim=1).cpu(),
            generated=torch.zeros(count, dtype=torch.long),
            running=torch.full((count, self.beams, 1), self.filler, dtype=torch.long),
            running_scores=scores,
            finished=torch.full((count, self.beams, 1), self.filler, dtype=torch.long),
            finished_scores=torch.full((count, self.beams), EXCLUDED),
            is_finished=torch.zeros(count, self.beams, dtype=torch.bool),
            can_improve=torch.ones(count, dtype=torch.bool),
        )
        rows = torch.arange(count, device=device).repeat_interleave(self.beams)  # a cache row for each beam
        cross = [
            (key.index_select(0, rows), value.index_select(0, rows))
            for key, value in self.model.get_decoder().cross_attention_keys_and_values(encoded)
        ]
        self._add(newcomers, cross, inputs["attention_mask"].index_select(0, rows))

    @torch.inference_mode()
    def step(self) -> list[tuple[Hashable, list[str]]]:
        """One decoding step of every sentence in the batch; returns those now done, with their finished
        translations, best first."""
        beams = self.beams_state
        if beams is None:
            return []
        device = self.model.device
        past = self.cache.get_seq_length()
        rows_generated = beams.generated.repeat_interleave(self.beams).to(device)
        columns = torch.arange(past + 1, device=device)
        decoder_mask = (columns[None, :] >= (past - rows_generated)[:, None]).long()
        last = (beams.generated - 1).clamp(min=0)[:, None, None].expand(-1, self.beams, 1)
        last_tokens = beams.running.gather(2, last)
        last_tokens[beams.generated == 0] = self.start_id  # a sentence's first step reads the start token
        last_tokens = last_tokens.reshape(-1, 1).to(device)
        rows = last_tokens.shape[0]
        # The cross-attention keys and values are in the cache: the decoder reads only the encoder output's shape.
        source_shape = torch.zeros((), dtype=self.model.dtype, device=device).expand(
            rows, self.source_mask.shape[1], self.model.config.d_model
        )
        output = self.model(
            encoder_outputs=(source_shape,),
            attention_mask=self.source_mask,
            decoder_input_ids=last_tokens,
            decoder_attention_mask=decoder_mask,
            decoder_position_ids=rows_generated[:, None],
            cache=self.cache,
            use_cache=True,
        )
        log_probs = self._log_probs(output.logits)
        sentences = len(beams.keys)
        parents, done = self._search_step(beams, log_probs.view(sentences, self.beams, -1))
        answers = self._translations(beams, done)
        self._keep(~done, torch.arange(sentences)[:, None] * self.beams + parents)
        return answers

    @torch.inference_mode()
    def drop(self, keys: set) -> None:
        """Takes the sentences with these handles out of the batch, unfinished."""
        beams = self.beams_state
        if beams is None or not keys:
            return
        keep = torch.tensor([key not in keys for key in beams.keys])
        self._keep(keep, torch.arange(len(beams.keys) * self.beams).view(-1, self.beams))

    def _log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the next token of every row, in float32 on the CPU, banned tokens at -inf (where
        transformers' processors put them)."""
        log_probs = F.log_softmax(logits[:, -1, :].to(torch.float32), dim=-1).cpu()
        log_probs[:, self.banned] = -float("inf")
        return log_probs

    def _translations(self, beams: Beams, done: torch.BoolTensor) -> list[tuple[Hashable, list[str]]]:
        """The finished hypotheses of the sentences that are done, as text, best first."""
        answers = []
        for i in torch.nonzero(done).view(-1).tolist():
            hypotheses = beams.finished[i][beams.is_finished[i]]
            answers.append((beams.keys[i], self.tokenizer.batch_decode(hypotheses, skip_special_tokens=True)))
        return answers

    def _search_step(self, beams: Beams, log_probs: torch.Tensor) -> tuple[torch.LongTensor, torch.BoolTensor]:
        """transformers' beam search step (`GenerationMixin._beam_search`: top candidates, running beams, finished
        set, early-stop test) for every sentence at its own step, in place on `beams`. `log_probs` is
        `(sentences, beams, vocabulary)`. Returns the parent beam of each new running beam, `(sentences, beams)`,
        and which sentences are done."""
        sentences, vocabulary = log_probs.shape[0], log_probs.shape[2]
        summed = (log_probs + beams.running_scores[:, :, None]).view(sentences, -1)
        top_scores, top_indices = torch.topk(summed, k=self.candidates)
        parents, tokens = top_indices // vocabulary, top_indices % vocabulary
        length = beams.generated + 1  # tokens generated by every candidate
        width = max(beams.running.shape[2], int(length.max()))
        running = F.pad(beams.running, (0, width - beams.running.shape[2]), value=self.filler)
        extended = running.gather(1, parents[:, :, None].expand(-1, -1, width)).clone()
        extended.scatter_(2, beams.generated[:, None, None].expand(-1, self.candidates, 1), tokens[:, :, None])
        limits = beams.source_lengths + EXTRA_OUTPUT_LENGTH  # section 6.1: input length + 50
        ends = torch.isin(tokens, self.eos_ids) | (length >= limits)[:, None]

        # The best candidates that did not end keep running.
        still_running = top_scores + ends.float() * EXCLUDED
        keep = torch.topk(still_running, k=self.beams).indices
        beams.running = extended.gather(1, keep[:, :, None].expand(-1, -1, width))
        beams.running_scores = still_running.gather(1, keep)

        # Those among the best `beams` that ended compete with the finished set by their penalised score.
        just_finished = ends & (torch.arange(self.candidates) < self.beams)[None, :]
        penalised = top_scores / self._penalties(length)[:, None]
        full = beams.is_finished.all(dim=1, keepdim=True) & (self.early_stopping is True)
        penalised = penalised + full.float() * EXCLUDED
        penalised = penalised + (~beams.can_improve[:, None]).float() * EXCLUDED
        penalised = penalised + (~just_finished).float() * EXCLUDED
        finished = F.pad(beams.finished, (0, width - beams.finished.shape[2]), value=self.filler)
        merged_scores = torch.cat((beams.finished_scores, penalised), dim=1)
        best = torch.topk(merged_scores, k=self.beams).indices
        beams.finished = torch.cat((finished, extended), dim=1).gather(1, best[:, :, None].expand(-1, -1, width))
        beams.finished_scores = merged_scores.gather(1, best)
        beams.is_finished = torch.cat((beams.is_finished, just_finished), dim=1).gather(1, best)
        beams.generated = length

        # Can the best running beam still beat the worst finished one (transformers' heuristic)?
        best_length = limits if self.early_stopping == "never" and self.alpha > 0 else length
        best_running = beams.running_scores[:, :1] / self._penalties(best_length)[:, None]
        worst = torch.where(beams.is_finished, beams.finished_scores.min(dim=1, keepdim=True).values, EXCLUDED)
        beams.can_improve &= (best_running > worst).any(dim=1)
        all_full = beams.is_finished.all(dim=1) & (self.early_stopping is True)
        return parents.gather(1, keep), ~beams.can_improve | all_full | ends.all(dim=1)

    def _penalties(self, lengths: torch.LongTensor) -> torch.Tensor:
        """length ** alpha, computed as transformers does (a Python float for each length)."""
        return torch.tensor([float(length) ** self.alpha for length in lengths.tolist()])

    def _add(self, newcomers: Beams, cross: list[tuple[torch.Tensor, torch.Tensor]], source_mask: torch.Tensor):
        """Appends the newcomers, with each layer's cross-attention keys and values `cross` and their `source_mask`
        (a row per hypothesis), to the batch: their self-attention cache is padding as long as the batch's, their
        sources and the batch's are padded to the longer."""
        if self.beams_state is None:
            config = self.model.config
            self.cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
            self.source_mask = source_mask[:0]
            self.beams_state = newcomers.select(torch.arange(0))
        past = self.cache.get_seq_length()
        if past:
            for layer in self.cache.self_attention_cache.layers:
                _, heads, _, size = layer.keys.shape
                padding = layer.keys.new_zeros(len(source_mask), heads, past, size)
                layer.keys, layer.values = torch.cat((layer.keys, padding)), torch.cat((layer.values, padding))
        longest = max(self.source_mask.shape[1], source_mask.shape[1])
        for index, (key, value) in enumerate(cross):
            layer = self.cache.cross_attention_cache.layers[index]
            if not layer.is_initialized:
                self.cache.cross_attention_cache.update(key, value, index)
                self.cache.is_updated[index] = True
                continue
            layer.keys = torch.cat([F.pad(k, (0, 0, 0, longest - k.shape[2])) for k in (layer.keys, key)])
            layer.values = torch.cat([F.pad(v, (0, 0, 0, longest - v.shape[2])) for v in (layer.values, value)])
        self.source_mask = torch.cat([F.pad(m, (0, longest - m.shape[1])) for m in (self.source_mask, source_mask)])
        self.beams_state = Beams.concatenate(self.beams_state, newcomers, self.filler)

    def _keep(self, keep: torch.BoolTensor, rows: torch.LongTensor) -> None:
        """Keeps the sentences where `keep` holds, their hypotheses being cache rows `rows` `(sentences, beams)`;
        cuts the cache columns that are padding for every row left."""
        kept = torch.nonzero(keep).view(-1)
        if not len(kept):
            self.beams_state = self.cache = self.source_mask = None
            return
        beams = self.beams_state.select(kept)
        order = rows[kept].reshape(-1).to(self.model.device)
        padding = self.cache.get_seq_length() - int(beams.generated.max())
        longest = int(beams.source_lengths.max())
        for layer in self.cache.self_attention_cache.layers:
            if layer.is_initialized:  # (not before the batch's first step)
                layer.keys = layer.keys.index_select(0, order)[:, :, padding:]
                layer.values = layer.values.index_select(0, order)[:, :, padding:]
        for layer in self.cache.cross_attention_cache.layers:
            layer.keys = layer.keys.index_select(0, order)[:, :, :longest]
            layer.values = layer.values.index_select(0, order)[:, :, :longest]
        self.source_mask = self.source_mask.index_select(0, order)[:, :longest]
        self.beams_state = beams
