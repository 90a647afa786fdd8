"""The multilingual preset trains English to and from every other language unless `--directions` says otherwise;
the other presets, every direction of `--languages`."""

import pytest

from vanilla_training.cli.train import parse_args
from vanilla_training.corpus import Direction


def directions_of(*options: str) -> set[Direction]:
    return set(parse_args([*options, "--output-dir", "unused"]).data.directions)


def test_the_multilingual_preset_trains_english_to_and_from_every_other_language_by_default() -> None:
    job = parse_args(["--preset", "multilingual", "--languages", "all", "--output-dir", "unused"])
    others = [code for code in job.data.languages if code != "en"]
    assert "en" in job.data.languages and len(others) >= 10
    by_hand = {Direction("en", code) for code in others} | {Direction(code, "en") for code in others}
    assert set(job.data.directions) == by_hand and len(job.data.directions) == 2 * len(others)
    assert directions_of("--preset", "multilingual", "--languages", "en,de,fr") == {
        Direction("en", "de"), Direction("de", "en"), Direction("en", "fr"), Direction("fr", "en"),
    }  # fmt: skip


def test_directions_all_and_the_other_presets_train_every_direction() -> None:
    every = {Direction(a, b) for a in ("en", "de", "fr") for b in ("en", "de", "fr") if a != b}
    assert directions_of("--preset", "multilingual", "--languages", "en,de,fr", "--directions", "all") == every
    assert directions_of("--preset", "demo", "--languages", "en,de,fr") == every
    job = parse_args(["--preset", "multilingual", "--languages", "all", "--directions", "all", "--output-dir", "x"])
    assert len(job.data.directions) == len(job.data.languages) * (len(job.data.languages) - 1)


def test_the_presets_default_without_english_is_refused_naming_it(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--preset", "multilingual", "--languages", "de,fr", "--output-dir", "unused"])
    assert (
        "--preset multilingual's --directions english-centric: english-centric: English (en) is not one of the "
        "languages de,fr" in capsys.readouterr().err
    )
    assert directions_of("--preset", "multilingual", "--languages", "de,fr", "--directions", "all") == {
        Direction("de", "fr"), Direction("fr", "de"),
    }  # fmt: skip
