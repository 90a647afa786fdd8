"""vanilla-train's options, declared once in `TrainSettings` and `recipe.Recipe`: the command line gives each field's
own default, offers every field as an option and nothing else, and names the option whose value is too small."""

import dataclasses

import pytest

from vanilla_training import recipe
from vanilla_training.cli.train import build_parser, parse_args
from vanilla_training.train_settings import TrainSettings, settings_from


def test_the_command_line_gives_each_fields_own_default():
    settings = settings_from(build_parser().parse_args(["--output-dir", "x"]))
    assert settings == TrainSettings(output_dir="x")
    assert settings.recipe_overrides == {}  # a recipe option not given keeps the preset's value


def test_every_field_is_an_option_and_every_option_a_field():
    destinations = {action.dest for action in build_parser()._actions} - {"help"}
    settings = {field.name for field in dataclasses.fields(TrainSettings)} - {"recipe_overrides"}
    recipe_options = {field.name for field in dataclasses.fields(recipe.Recipe)} - {"size"}  # --size is a setting
    assert destinations == settings | recipe_options


@pytest.mark.parametrize(
    "field", [field for field in dataclasses.fields(TrainSettings) if field.metadata.get("least") is not None]
)
def test_a_value_under_an_options_least_is_refused_by_name(field, capsys):
    option, least = "--" + field.name.replace("_", "-"), field.metadata["least"]
    parse_args([option, str(least), "--output-dir", "x"])
    with pytest.raises(SystemExit):
        parse_args([option, str(least - 1), "--output-dir", "x"])
    assert f"{option} must be at least {least}, got {least - 1}" in capsys.readouterr().err
