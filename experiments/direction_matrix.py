"""The direction matrix of a multilingual run (issue 52): its test chrF (or BLEU) by source and target language, as a
markdown table and a heat map, from the run's `final/training_results.json`.

    python experiments/direction_matrix.py runs/multilingual --out experiments/results/multilingual-chrf.png
    python experiments/direction_matrix.py runs/multilingual --metric bleu

Rows are source languages, columns target languages, in the run's order; a direction the run was not tested in is
blank (and grey in the picture). Directions left out of training (`--leave-out`, a zero-shot probe) are marked `*`.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_results(run: Path) -> dict:
    """`training_results.json` of a run folder (its final/) or of a model folder; ValueError if it is not a
    multilingual run's."""
    path = next(
        (p for p in (run / "final" / "training_results.json", run / "training_results.json") if p.is_file()), None
    )
    if path is None:
        raise FileNotFoundError(f"{run} holds no training_results.json (nor final/training_results.json)")
    results = json.loads(path.read_text(encoding="utf-8"))
    if "multilingual" not in results or "directions" not in results.get("test", {}):
        raise ValueError(f"{path} is not a multilingual run's with test scores (vanilla-train --languages ...)")
    return results


def matrix(results: dict, metric: str) -> tuple[list[str], np.ndarray]:
    """The run's languages and their `metric` by source (rows) and target (columns); NaN where not tested."""
    languages = results["multilingual"]["languages"]
    values = np.full((len(languages), len(languages)), np.nan)
    for direction, score in results["test"]["directions"].items():
        source, target = direction.split("-")
        values[languages.index(source), languages.index(target)] = score[metric]
    return languages, values


def markdown(languages: list[str], values: np.ndarray, left_out: set[str]) -> str:
    """The matrix as a markdown table, source down and target across, `*` on the directions not trained."""
    lines = ["| source \\ target | " + " | ".join(languages) + " |", "|---|" + "---:|" * len(languages)]
    for i, source in enumerate(languages):
        cells = [
            "" if np.isnan(value) else f"{value:.1f}" + ("*" if f"{source}-{target}" in left_out else "")
            for target, value in zip(languages, values[i], strict=True)
        ]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw(languages: list[str], values: np.ndarray, metric: str, left_out: set[str], out: Path) -> None:
    """The heat map: one cell a direction, its value written in it."""
    size = 0.6 * len(languages) + 2
    figure, axes = plt.subplots(figsize=(size + 1, size))
    image = axes.imshow(np.ma.masked_invalid(values), cmap="viridis")
    image.cmap.set_bad("lightgrey")
    axes.set_xticks(range(len(languages)), languages)
    axes.set_yticks(range(len(languages)), languages)
    axes.set_xlabel("target language")
    axes.set_ylabel("source language")
    middle = np.nanmean(values)
    for (i, j), value in np.ndenumerate(values):
        if not np.isnan(value):
            mark = "*" if f"{languages[i]}-{languages[j]}" in left_out else ""
            color = "black" if value > middle else "white"
            axes.text(j, i, f"{value:.0f}{mark}", ha="center", va="center", color=color, fontsize=8)
    figure.colorbar(image, ax=axes, label=f"test {metric}")
    axes.set_title(f"test {metric} by direction" + (" (* left out of training)" if left_out else ""))
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a multilingual run folder (or its final/ model folder)")
    parser.add_argument("--metric", choices=("chrf", "bleu"), default="chrf", help="the score shown (default: chrf)")
    parser.add_argument("--out", type=Path, help="the heat map's PNG file (default: none drawn)")
    args = parser.parse_args(argv)
    try:
        results = read_results(args.run)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    languages, values = matrix(results, args.metric)
    left_out = set(results["data"].get("left_out") or [])
    print(markdown(languages, values, left_out))
    print(f"\nmean over {int(np.sum(~np.isnan(values)))} directions: {np.nanmean(values):.2f}")
    if args.out:
        draw(languages, values, args.metric, left_out, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
