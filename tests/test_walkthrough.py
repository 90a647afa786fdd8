"""What a reader of the paper asks, checked (linked from docs/paper-walkthrough.md), and the page's own references.

Reader's checks: PE(pos + k) is a fixed linear function of PE(pos) (section 3.5); multi-head attention has
4 d_model^2 weights whatever the number of heads, and is h separate heads side by side (section 3.2.2); the
key/value cache grows linearly with the generated length (the decoder's sequential cost, section 4).
"""

import ast
import math
import re
from pathlib import Path

import pytest
import torch

from modeling_vanilla import sinusoidal_positional_encoding
from modeling_vanilla.modeling_vanilla import VanillaAttention
from vanilla_training.cli.show_positional_encoding import main as show_positional_encoding

from helpers import padded_batch, tiny_config, tiny_model

ROOT = Path(__file__).resolve().parent.parent
WALKTHROUGH = ROOT / "docs" / "paper-walkthrough.md"


def offset_matrix(offset: int, d_model: int) -> torch.Tensor:
    """M_k with PE(pos + k) = M_k PE(pos), built from the angle sum identities alone: for the frequency
    w_i = 1 / 10000^(2i / d_model), the pair (sin, cos) of dimensions (2i, 2i + 1) turns by the angle k w_i:
    sin(a + b) = cos(b) sin(a) + sin(b) cos(a) and cos(a + b) = -sin(b) sin(a) + cos(b) cos(a)."""
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = offset / 10000 ** (2 * i / d_model)
        cos, sin = math.cos(angle), math.sin(angle)
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[cos, sin], [-sin, cos]], dtype=torch.float64)
    return matrix


@pytest.mark.parametrize("offset", [1, 3, 10, 57])
def test_positional_encoding_at_pos_plus_k_is_a_fixed_linear_function_of_pos(offset):
    """Section 3.5: "for any fixed offset k, PE(pos+k) can be represented as a linear function of PE(pos)". One
    matrix M_k (independent of pos), a rotation of each sin/cos pair, maps every position to the one k later."""
    d_model, positions = 64, torch.arange(1000)
    encoding = sinusoidal_positional_encoding(positions, d_model).double()
    matrix = offset_matrix(offset, d_model)
    mapped = encoding[:-offset] @ matrix.T
    assert torch.allclose(mapped, encoding[offset:], atol=1e-5)
    assert torch.allclose(matrix @ matrix.T, torch.eye(d_model, dtype=torch.float64))  # a rotation
    assert not torch.allclose(encoding[:-offset], encoding[offset:], atol=1e-2)  # and not the identity


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_multi_head_attention_has_4_d_model_squared_weights_whatever_the_number_of_heads(heads):
    """Section 3.2.2: h heads with W_i^Q, W_i^K, W_i^V of d_model x d_k (d_k = d_v = d_model / h) and W^O of
    h d_v x d_model. Summed over the heads that is 4 d_model^2 weights, plus a bias per output (4 d_model)."""
    d_model = 64
    attention = VanillaAttention(tiny_config(d_model=d_model), num_heads=heads, is_causal=False)
    weights = sum(p.numel() for p in attention.parameters() if p.dim() == 2)
    biases = sum(p.numel() for p in attention.parameters() if p.dim() == 1)
    d_k = d_v = d_model // heads
    assert weights == heads * (d_model * d_k + d_model * d_k + d_model * d_v) + heads * d_v * d_model
    assert weights == 4 * d_model**2 and biases == 4 * d_model


def test_multi_head_attention_is_h_heads_concatenated_then_projected():
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V): each
    head by hand from its own d_k rows of the projection matrices, then concatenated and projected."""
    torch.manual_seed(0)
    heads, d_model = 4, 32
    attention = VanillaAttention(tiny_config(d_model=d_model), num_heads=heads, is_causal=False)
    x = torch.randn(1, 5, d_model)
    d_k = d_model // heads
    outputs = []
    for i in range(heads):
        rows = slice(i * d_k, (i + 1) * d_k)
        q, k, v = (x @ p.weight[rows].T + p.bias[rows] for p in (attention.q_proj, attention.k_proj, attention.v_proj))
        outputs.append(torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d_k), dim=-1) @ v)
    by_hand = torch.cat(outputs, dim=-1) @ attention.out_proj.weight.T + attention.out_proj.bias
    with torch.no_grad():
        assert torch.allclose(attention(x, attention_mask=None)[0], by_hand, atol=1e-5)


def test_the_key_value_cache_grows_linearly_with_the_generated_length():
    """At decoding step t every decoder layer keeps the keys and values of t target positions for its
    self-attention (layers x 2 x batch x d_model x t numbers) and of the S source positions for its
    cross-attention, computed once (layers x 2 x batch x d_model x S, whatever t)."""
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    batch, source_length = ids.shape
    layers, d_model = model.config.decoder_layers, model.config.d_model
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        tokens, cache = torch.full((batch, 1), model.config.decoder_start_token_id), None
        for step in range(1, 13):
            out = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens, cache=cache)
            cache, tokens = out.cache, out.logits[:, -1:].argmax(-1)
            stored = {
                name: sum(layer.keys.numel() + layer.values.numel() for layer in part.layers)
                for name, part in (("self", cache.self_attention_cache), ("cross", cache.cross_attention_cache))
            }
            assert stored["self"] == layers * 2 * batch * d_model * step
            assert stored["cross"] == layers * 2 * batch * d_model * source_length


def test_the_positional_encoding_picture_is_made_by_a_command(tmp_path, capsys):
    path = show_positional_encoding(["--positions", "20", "--d-model", "16", "--output", str(tmp_path / "pe.png")])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(path) in capsys.readouterr().out
    with pytest.raises(ValueError, match="d_model must be even"):
        show_positional_encoding(["--d-model", "15", "--output", str(tmp_path / "odd.png")])
    with pytest.raises(ValueError, match="positions must be at least 1"):
        show_positional_encoding(["--positions", "0", "--output", str(tmp_path / "none.png")])


# ---------------------------------------------------------------------------------------------------------------
# The page's references: code by file and symbol, tests, images, commands
# ---------------------------------------------------------------------------------------------------------------

CODE_REFERENCE = re.compile(r"`([\w./-]+\.(?:py|md|png|json))(?:::([\w.]+))?`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"python -m ((?:vanilla_training|modeling_vanilla)(?:\.\w+)+)|`(vanilla-[\w-]+)")
CONSOLE_SCRIPTS = re.findall(
    r"^([\w-]+) = ", (ROOT / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0], re.M
)


def defines(path: Path, symbol: str) -> bool:
    """Whether `path` defines `symbol`: a top-level function, class or assignment, then (after a dot) one of its
    methods or class attributes."""
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    for name in symbol.split("."):
        found = None
        for node in scope:
            names = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            if name in names:
                found = node
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def unresolved(text: str, link_base: Path) -> list[str]:
    """The references of `text` that do not resolve: code paths (and their symbols) from the repository root,
    relative links from `link_base`, `python -m` modules of this repository and its console scripts."""
    missing = []
    for path, symbol in CODE_REFERENCE.findall(text):
        if not (ROOT / path).is_file() or (symbol and not defines(ROOT / path, symbol)):
            missing.append(f"{path}::{symbol}" if symbol else path)
    missing += [link for link in LINK.findall(text) if "://" not in link and not (link_base / link).exists()]
    for module, script in COMMAND.findall(text):
        if module and not (ROOT / (module.replace(".", "/") + ".py")).is_file():
            missing.append(module)
        if script and script not in CONSOLE_SCRIPTS:
            missing.append(script)
    return missing


def test_every_reference_of_the_walkthrough_resolves():
    text = WALKTHROUGH.read_text()
    assert len(CODE_REFERENCE.findall(text)) > 40 and len(LINK.findall(text)) > 3 and COMMAND.findall(text)
    missing = unresolved(text, WALKTHROUGH.parent)
    assert not missing, f"docs/paper-walkthrough.md refers to what does not exist: {missing}"


def test_the_readme_section_for_learners_refers_to_what_exists():
    section = (ROOT / "README.md").read_text().split("## For learners", 1)[1].split("\n## ", 1)[0]
    assert LINK.findall(section) and COMMAND.findall(section)
    missing = unresolved(section, ROOT)
    assert not missing, f"README.md's section For learners refers to what does not exist: {missing}"


def test_the_reference_checker_notices_what_is_missing():
    model_file = "modeling_vanilla/modeling_vanilla.py"
    assert defines(Path(__file__), "offset_matrix") and defines(ROOT / model_file, "VanillaAttention.forward")
    text = (
        f"`{model_file}::VanillaAttention` `{model_file}::VanillaAttention.nope` `{model_file}::nothing` `no/file.py` "
        "[ok](README.md) [missing](images/none.png) `python -m vanilla_training.cli.show_attention` "
        "`python -m vanilla_training.nope` "
        "`vanilla-translate model` `vanilla-nope model`"
    )
    assert unresolved(text, ROOT) == [
        f"{model_file}::VanillaAttention.nope",
        f"{model_file}::nothing",
        "no/file.py",
        "images/none.png",
        "vanilla_training.nope",
        "vanilla-nope",
    ]
