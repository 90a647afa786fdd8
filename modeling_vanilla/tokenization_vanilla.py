"""The tokenizer of a multilingual Vanilla model: the joint BPE with one target-language token per language, used as
transformers users use M2M-100's and NLLB's.

Language tokens are spelt as M2M-100's (`__de__`) and are special tokens of the vocabulary. Only the target language
is marked (Johnson et al. 2017, "Google's Multilingual NMT"): a source encodes as `text </s>` whatever `src_lang`
says, and a target (`tokenizer(..., text_target=...)`) as `__tgt__ text </s>`, `tgt` being `tokenizer.tgt_lang`. The
decoder, which starts from `<s>`, therefore reads the target language as its first token; `generate` is told it as
M2M-100 and NLLB are:

    tokenizer.src_lang, tokenizer.tgt_lang = "de", "fr"
    inputs = tokenizer("Im Anfang schuf Gott den Himmel und die Erde.", return_tensors="pt")
    ids = model.generate(**inputs, forced_bos_token_id=tokenizer.get_lang_id("fr"))
    tokenizer.batch_decode(ids, skip_special_tokens=True)  # the language token is a special token: dropped

`get_lang_id` refuses, naming the choices, a language the model does not have (`convert_tokens_to_ids("__it__")`
would give `<unk>`'s id); M2M-100's `lang_code_to_id` and `id_to_lang_token` are there too.
`src_lang` is checked and kept (tools read it, e.g. to split a paragraph into sentences) but changes no token id.
`languages`, `src_lang` and `tgt_lang` are keyword arguments of the constructor, saved in `tokenizer_config.json`.
The class defines no `__init__`, so that `from_pretrained` loads `tokenizer.json` exactly as it was saved.

This file is loaded as remote code, so it imports only transformers and tokenizers.
"""

from tokenizers import processors
from transformers import TokenizersBackend


def language_token(language: str) -> str:
    """The token that names `language` (an ISO 639-1 code), as M2M-100 spells it: "de" -> "__de__"."""
    return f"__{language}__"


class VanillaTokenizer(TokenizersBackend):
    """A joint BPE tokenizer with a target-language token per language; see the module docstring."""

    @property
    def languages(self) -> list[str]:
        """The languages this tokenizer has a token for, in the order of their ids."""
        return list(self.init_kwargs.get("languages") or [])

    def check_language(self, language: str, name: str = "language") -> str:
        """`language` itself; ValueError naming the choices if the tokenizer has no token for it."""
        if language not in self.languages:
            raise ValueError(
                f"{name}={language!r} is not a language of this model; choose one of {', '.join(self.languages)}"
            )
        return language

    @property
    def src_lang(self) -> str | None:
        return self.init_kwargs.get("src_lang")

    @src_lang.setter
    def src_lang(self, language: str | None) -> None:
        self.init_kwargs["src_lang"] = None if language is None else self.check_language(language, "src_lang")

    @property
    def tgt_lang(self) -> str | None:
        return self.init_kwargs.get("tgt_lang")

    @tgt_lang.setter
    def tgt_lang(self, language: str | None) -> None:
        self.init_kwargs["tgt_lang"] = None if language is None else self.check_language(language, "tgt_lang")

    def get_lang_token(self, language: str) -> str:
        """M2M-100's name for `language_token`, checked: "fr" -> "__fr__"."""
        return language_token(self.check_language(language))

    def get_lang_id(self, language: str) -> int:
        """The id of the token of `language`: the `forced_bos_token_id` that makes `generate` translate into it."""
        return self.convert_tokens_to_ids(self.get_lang_token(language))

    @property
    def lang_code_to_id(self) -> dict[str, int]:
        """Each language's token id, as M2M-100's tokenizer has it: {"fr": id of "__fr__", ...}."""
        return {language: self.get_lang_id(language) for language in self.languages}

    @property
    def id_to_lang_token(self) -> dict[int, str]:
        """Each language token by its id, as M2M-100's tokenizer has it: {id of "__fr__": "__fr__", ...}."""
        return {self.get_lang_id(language): language_token(language) for language in self.languages}

    def _set_template(self, prefix: list[str]) -> None:
        eos = self.eos_token
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=[*prefix, "$A", eos],
            pair=[*prefix, "$A", eos, "$B", eos],
            special_tokens=[(token, self.convert_tokens_to_ids(token)) for token in (*prefix, eos)],
        )

    def _switch_to_input_mode(self) -> None:
        """Sources: `text </s>`."""
        self._set_template([])

    def _switch_to_target_mode(self) -> None:
        """Targets: `__tgt__ text </s>`; ValueError naming the choices when `tgt_lang` is unset."""
        if self.tgt_lang is None:
            raise ValueError(
                "set tokenizer.tgt_lang to encode a target: a target starts with its language's token; "
                f"choose one of {', '.join(self.languages)}"
            )
        self._set_template([self.get_lang_token(self.tgt_lang)])


__all__ = ["VanillaTokenizer", "language_token"]
