"""`pipeline("translation")` for transformers 5, which removed the built-in translation task.

The pipeline comes back through transformers' extension point for custom pipelines: `save_pretrained` of a Vanilla
model writes `custom_pipelines = {"translation": {"impl": "pipeline_vanilla.TranslationPipeline", ...}}` into
`config.json` and copies this file beside the model code, so that
`pipeline("translation", model=<folder or repo id>, trust_remote_code=True)` loads this class. With the package
installed, `pipeline("translation", model=folder, pipeline_class=TranslationPipeline)` needs no remote code.

This file is loaded as remote code, so it imports only torch and transformers.

Behaviour (as transformers 4's `TranslationPipeline`, plus defined edge cases):

- `pipe("text")` returns `[{"translation_text": ...}]`, one dict per returned sequence (`num_return_sequences`).
- `pipe(["a", "b"])` returns `[{...}, {...}]`, one dict per input, when one sequence is returned per input, and
  `[[{...}, ...], [{...}, ...]]`, a list per input, when `num_return_sequences > 1`. `pipe([])` returns `[]`.
- `batch_size=` batches inputs; generation options (`num_beams`, `max_new_tokens`, `num_return_sequences`,
  `length_penalty`, `do_sample`, ...) given to `pipeline(...)` or to the call go to `model.generate`, on top of the
  model's generation config: a model trained or converted by this project carries the paper's decoding there (beam
  4, length penalty 0.6); a model that carries none decodes greedily, as every transformers model does. The
  attention mask is always passed.
- Output length: the paper's input length + 50 tokens (applied by the Vanilla model's `generate`) unless the call
  or the generation config sets `max_new_tokens` or `max_length`; in a batch the limit follows the batch's longest
  input.
- An empty or whitespace-only string translates to `""`; the model does not run for it.
- An input longer than the tokenizer's `model_max_length` is truncated to it, with a warning that names how many
  tokens were dropped.
- An input is text: `"__fr__ la maison"`, `"a </s> b"` or `"<unk>"` are characters to translate, never special tokens
  (`split_special_tokens`), so no input can choose the target language or end itself early.
- An input that is not a string (or a list of strings) raises `TypeError` naming its type.
- A multilingual model (its config has `languages`) takes the direction as M2M-100 and NLLB do:
  `pipe(text, src_lang="de", tgt_lang="fr")` (or `pipeline(..., src_lang=..., tgt_lang=...)`); the target's language
  token becomes `forced_bos_token_id`. Without `tgt_lang`, or with a language it does not know, `ValueError` names
  its languages. A model of one direction refuses `src_lang`/`tgt_lang`.
"""

import torch
from transformers import Pipeline
from transformers.utils import ModelOutput, logging

logger = logging.get_logger(__name__)


class TranslationPipeline(Pipeline):
    """Translates a string or a list of strings with an encoder-decoder model; see the module docstring."""

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __call__(self, inputs: str | list[str], **kwargs) -> list[dict[str, str]] | list[list[dict[str, str]]]:
        """Translate `inputs`; keyword arguments are `batch_size`, `num_workers` and generation options."""
        if isinstance(inputs, list):
            for index, text in enumerate(inputs):
                if not isinstance(text, str):
                    raise TypeError(f"TranslationPipeline: inputs[{index}] is a {type(text).__name__}, not a str")
            if not inputs:
                return []
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(translations) == 1 for translations in result):
            return [translations[0] for translations in result]
        return result

    def _sanitize_parameters(
        self, src_lang: str | None = None, tgt_lang: str | None = None, **generate_kwargs
    ) -> tuple[dict, dict, dict]:
        """Every option of a call (besides `batch_size`, `num_workers`, `src_lang` and `tgt_lang`) is a generation
        option; `tgt_lang` becomes the `forced_bos_token_id` of its language token."""
        if src_lang is None and tgt_lang is None:
            return {}, generate_kwargs, {}
        languages = getattr(self.model.config, "languages", None)
        if not languages:
            raise ValueError(
                "this model translates one direction (its config records no languages): leave out src_lang and tgt_lang"
            )
        if src_lang is not None:
            self.tokenizer.check_language(src_lang, "src_lang")
        if tgt_lang is None:
            return {}, generate_kwargs, {}
        self.tokenizer.check_language(tgt_lang, "tgt_lang")
        return {}, {**generate_kwargs, "forced_bos_token_id": self.tokenizer.get_lang_id(tgt_lang)}, {}

    def preprocess(self, text: str) -> dict[str, torch.Tensor]:
        """Token ids and attention mask of `text` (none for an empty text), truncated to `model_max_length`."""
        if not isinstance(text, str):
            raise TypeError(f"TranslationPipeline translates a str or a list of str, got {type(text).__name__}")
        if not text.strip():
            empty = torch.zeros((1, 0), dtype=torch.long)
            return {"input_ids": empty, "attention_mask": empty}
        encoded = self.tokenizer(text, return_tensors="pt", verbose=False, split_special_tokens=True)
        length, limit = encoded["input_ids"].shape[1], self.tokenizer.model_max_length
        if length > limit:
            logger.warning(
                f"TranslationPipeline: an input of {length} tokens is longer than the tokenizer's model_max_length "
                f"({limit}); it is truncated and its last {length - limit} tokens are dropped"
            )
            encoded = self.tokenizer(text, return_tensors="pt", truncation=True, split_special_tokens=True)
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs) -> dict[str, torch.Tensor]:
        """Generated ids shaped (inputs, sequences per input, length); empty inputs get padding only."""
        languages = getattr(self.model.config, "languages", None)
        if languages and "forced_bos_token_id" not in generate_kwargs:
            raise ValueError(
                f"this model translates between {', '.join(languages)}: give the direction, e.g. "
                f"pipe(text, src_lang={languages[0]!r}, tgt_lang={languages[1]!r})"
            )
        input_ids, attention_mask = model_inputs["input_ids"], model_inputs["attention_mask"]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        per_input = self._get_set_generation_params(generate_kwargs).get("num_return_sequences") or 1
        nonempty = attention_mask.any(dim=1)
        generated = torch.empty((0, per_input, 1), dtype=torch.long, device=input_ids.device)
        if nonempty.any():
            generated = self.model.generate(
                input_ids=input_ids[nonempty], attention_mask=attention_mask[nonempty], **generate_kwargs
            )
            if isinstance(generated, ModelOutput):  # return_dict_in_generate=True
                generated = generated.sequences
            generated = generated.reshape(int(nonempty.sum()), per_input, -1)
        output_ids = generated.new_full((len(input_ids), per_input, generated.shape[-1]), self.tokenizer.pad_token_id)
        output_ids[nonempty] = generated
        return {"output_ids": output_ids}

    def postprocess(self, model_outputs: dict[str, torch.Tensor]) -> list[dict[str, str]]:
        """One `{"translation_text": ...}` per generated sequence of one input."""
        return [
            {"translation_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
            for ids in model_outputs["output_ids"][0]
        ]
