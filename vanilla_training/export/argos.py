"""Export a model trained by `vanilla-train` as an Argos Translate package (`.argosmodel`) for LibreTranslate.

    vanilla-export-argos runs/demo en_de.argosmodel
    vanilla-export-argos runs/multilingual de_fr.argosmodel --source de --target fr

The package is a zip of one folder holding what argos-translate (and so LibreTranslate) reads:

- `model/`: the CTranslate2 model (`export_ctranslate2`; int8 weights unless `--quantization float32`), with
  `add_source_eos`, since argos gives CTranslate2 the source pieces without the end token that our tokenizer adds;
- `sentencepiece.model`: our tokenizer as a SentencePiece BPE model (`sentencepiece_bpe`), checked before anything
  is written: it must split exactly as ours every verse of the pair's test split (the built-in corpus), every test
  example training recorded (a corpus of files or a dataset), and `RAW_TEXTS` (text as users type it); a
  tokenizer that cannot agree is refused, with the first text split differently;
- `spacy/`: a blank spaCy pipeline of the source language ("xx", spaCy's multi-language one, where spaCy's own needs
  more packages), to which argos adds spaCy's rule-based sentencizer with `ARGOS_CHUNK_TYPE=SPACY`. Argos's default
  splitter (MiniSBD) downloads a model at the first translation; this one works offline;
- `metadata.json`: the languages training recorded, with their names, and `package_version` the day of the export
  (`2026.12.7`: above the 1.x of Argos's own packages, which `libretranslate --update-models` would otherwise put in
  place of ours); for one direction of a multilingual model, its target-language token as `target_prefix`, which
  argos gives CTranslate2 as the first target token (what `generate` is told as `forced_bos_token_id`);
- `README.md`: the decoding argos applies, then the model card of the run (data, licences, scores), where training
  wrote one.

Argos decodes with CTranslate2 at beam `ARGOS_BEAM_SIZE` (4) and length penalty 0.2 (fixed in argos-translate),
where `vanilla-translate` uses the model's generation config (the recipe's 0.6 or 1.0); argos also keeps
CTranslate2's `min_decoding_length=1` and `max_decoding_length=256`, replaces `<unk>` by a source piece, and turns
every "_" of a translation into a space.
"""

import argparse
import datetime
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from transformers import AutoTokenizer

from modeling_vanilla import QUANTIZATIONS
from modeling_vanilla.export_ctranslate2 import VanillaConverter
from modeling_vanilla.tokenization_vanilla import language_token

from ..card import LOCAL_NOTE, render_card
from ..corpus import build_corpus, language_name
from ..translator import RESULTS, local_folder, trained_languages

ARGOS_VERSION = "1.9"  # the package layout of argos-translate 1.9 on (LibreTranslate's argos-translate-lt 1.12)


class ArgosConverter(VanillaConverter):
    """`VanillaConverter` whose model appends the end token to each source itself."""

    def _load(self):
        spec = super()._load()
        spec.config.add_source_eos = True
        return spec


def package_version(day: datetime.date) -> str:
    """The package's version: the day of the export, "2026.12.7". Argos and LibreTranslate replace an installed
    package by one of the same languages in their index with a higher version; Argos's own are 1.x."""
    return f"{day.year}.{day.month}.{day.day}"


def texts_to_check(results: dict, languages: tuple[str, str]) -> list[str]:
    """`RAW_TEXTS`; both sides of the pair's test split for the built-in corpus (built, offline once bible.db is
    cached), else the sources and references of the test examples training recorded (none without a test)."""
    from .sentencepiece_bpe import RAW_TEXTS

    data = results.get("data", {})
    if data.get("corpus") == "built-in":
        test = build_corpus("-".join(languages), versions=data.get("versions", "one"))["test"]
        rows = [json.loads(line)["translation"] for line in test.read_text(encoding="utf-8").splitlines()]
        return [*RAW_TEXTS, *(row[language] for row in rows for language in languages)]
    examples = results.get("test", {}).get("examples", [])
    return [*RAW_TEXTS, *(text for example in examples for text in (example["source"], example["reference"]))]


def sentencepiece_of(folder: Path, texts: list[str]) -> bytes:
    """The SentencePiece model of the tokenizer in `folder`, checked to split every one of `texts` as the tokenizer
    does; ValueError naming the first text split otherwise, or why the tokenizer has no SentencePiece equivalent."""
    import sentencepiece  # the argos extra, imported here so that `vanilla-export-argos --help` runs without it

    from .sentencepiece_bpe import differences, sentencepiece_model

    model = sentencepiece_model(folder / "tokenizer.json")
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    differing = differences(AutoTokenizer.from_pretrained(folder), processor, texts)
    if differing:
        text, ours, theirs = differing[0]
        raise ValueError(
            f"the SentencePiece model splits {len(differing)} of {len(texts)} test texts otherwise than the "
            f"tokenizer, e.g. {text!r}: {ours} against {theirs}; no package is written"
        )
    return model


def blank_spacy(language: str, destination: Path) -> str:
    """Writes spaCy's blank pipeline of `language` (or "xx" where spaCy's needs other packages) to `destination`;
    returns the language of the pipeline written."""
    import spacy

    try:
        nlp = spacy.blank(language)
    except (ImportError, LookupError):  # e.g. Korean needs mecab-ko, Vietnamese pyvi; a language spaCy lacks
        nlp = spacy.blank("xx")
    nlp.to_disk(destination)
    return nlp.lang


def readme(folder: Path, languages: tuple[str, str], spacy_language: str, quantization: str, tested: bool) -> str:
    """The package's README.md: what it is, how argos decodes it, and the run's model card without its YAML header
    (and without the note of a local card, which is about the folder) where the run was tested."""
    if tested:
        card = render_card(folder).split("---\n", 2)[2].replace(LOCAL_NOTE, "").lstrip()
    else:
        card = "The run recorded no test (trained without a test split): no model card, no scores.\n"
    source, target = (language_name(code) for code in languages)
    return (
        f"# {source} to {target}: an Argos Translate package of a vanilla Transformer\n\n"
        f"Written by `vanilla-export-argos` from `{folder}`: the CTranslate2 model ({quantization} weights), "
        "the tokenizer as an equivalent SentencePiece model, and a blank spaCy pipeline "
        f"(`{spacy_language}`) for argos's rule-based sentence splitting: run argos or LibreTranslate with "
        "`ARGOS_CHUNK_TYPE=SPACY` (spaCy installed) to translate offline.\n\n"
        "Argos decodes at beam 4 (`ARGOS_BEAM_SIZE`) with length penalty 0.2; the scores below were measured with "
        "`vanilla-evaluate`'s decoding (the card's beam and length penalty), in float32.\n\n" + card
    )


def build_package(folder: Path, root: Path, languages: tuple[str, str], quantization: str, multilingual: bool) -> None:
    """Writes the package's files for the model in `folder` into the empty folder `root`: one direction, with its
    target-language token as argos's `target_prefix` for a multilingual model."""
    results_file = folder / RESULTS
    results = json.loads(results_file.read_text(encoding="utf-8")) if results_file.is_file() else {}
    tokenizer = sentencepiece_of(folder, texts_to_check(results, languages))
    ArgosConverter(folder).convert(str(root / "model"), quantization=quantization)
    (root / "sentencepiece.model").write_bytes(tokenizer)
    spacy_language = blank_spacy(languages[0], root / "spacy")
    metadata = {
        "package_version": package_version(datetime.datetime.now(datetime.UTC).date()),
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "from_code": languages[0],
        "from_name": language_name(languages[0]),
        "to_code": languages[1],
        "to_name": language_name(languages[1]),
        **({"target_prefix": language_token(languages[1])} if multilingual else {}),
    }
    (root / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    tested = "test" in results
    (root / "README.md").write_text(readme(folder, languages, spacy_language, quantization, tested), encoding="utf-8")


def package_languages(model: str | Path, folder: Path, direction: tuple[str | None, str | None]) -> tuple[str, str]:
    """The (source, target) of the package: the languages training recorded, or the `direction` asked of a
    multilingual model, which must be two of its languages. ValueError saying why otherwise."""
    trained = trained_languages(folder)
    multilingual = trained.languages
    if multilingual:
        if None in direction or direction[0] == direction[1] or not set(direction) <= set(multilingual):
            raise ValueError(
                f"{model} is a multilingual model ({', '.join(multilingual)}): a package holds one direction; give "
                "two different languages of it as --source and --target"
            )
        return direction
    languages = trained.direction
    if languages is None:
        raise ValueError(
            f"{model} records no languages (no {RESULTS}): only a model trained by vanilla-train is packaged, "
            "with its languages and its card"
        )
    if direction not in ((None, None), languages):
        raise ValueError(f"{model} translates {languages[0]} into {languages[1]} only: leave --source/--target out")
    return languages


def export_argos(
    model: str | Path,
    destination: str | Path,
    quantization: str = "int8",
    direction: tuple[str | None, str | None] = (None, None),
) -> Path:
    """Writes the `.argosmodel` package of `model` (a run folder, a model folder or a Hub id) to `destination`, for
    the `direction` (source, target) asked of a multilingual model; returns its path. ValueError saying why where
    the model cannot be packaged (no languages, no direction, a tokenizer that SentencePiece cannot reproduce);
    FileExistsError if `destination` exists; FileNotFoundError if `model` cannot be found."""
    destination = Path(destination)
    if destination.exists():
        raise FileExistsError(f"{destination} exists; remove it or choose another name")
    folder = local_folder(model)
    languages = package_languages(model, folder, direction)
    multilingual = bool(trained_languages(folder).languages)
    name = f"translate-{languages[0]}_{languages[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        root.mkdir()
        build_package(folder, root, languages, quantization, multilingual)
        partial = destination.with_name(destination.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as package:
            for path in sorted(root.rglob("*")):
                package.write(path, path.relative_to(tmp))
        shutil.move(partial, destination)
    return destination


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-export-argos",
        description="Export a model trained by vanilla-train as an Argos Translate package for LibreTranslate.",
    )
    parser.add_argument("model", metavar="MODEL", help="a run folder (its final/), a model folder, or a Hub id")
    parser.add_argument("destination", metavar="OUT.argosmodel", help="the package file to write")
    parser.add_argument(
        "--quantization", choices=QUANTIZATIONS, default="int8", help="CTranslate2 weight type (default: int8)"
    )
    parser.add_argument("--source", help="a multilingual model: the source language of the package's direction")
    parser.add_argument("--target", help="a multilingual model: the target language of the package's direction")
    args = parser.parse_args(argv)
    if not args.destination.endswith(".argosmodel"):
        parser.error(f"{args.destination}: the package's name must end in .argosmodel")
    try:
        print(export_argos(args.model, args.destination, args.quantization, (args.source, args.target)))
    except ImportError as error:
        parser.error(f"the argos extra is needed (pip install 'vanilla-transformer[argos]'): {error}")
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
