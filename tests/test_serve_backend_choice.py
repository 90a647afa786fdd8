"""`vanilla-serve` with no --backend picks the fastest it has: CTranslate2 where it is installed, else torch; int8
weights only where the CPU computes int8 natively (VNNI or AMX), else float32 (int8 was the slower on the AVX2 EPYC
without VNNI); and says which and why. (That its answers are vanilla-translate's: test_serve.py.)"""

import pytest

from vanilla_training.serving import backends
from vanilla_training.serving.backends import fastest_backend

AVX2 = {"sse4_2", "avx", "avx2", "fma"}


@pytest.fixture
def cpu(monkeypatch):
    """Sets this machine's CPU flags, CTranslate2's presence and the GPU's absence for `fastest_backend`."""

    def machine(flags: set[str], ctranslate2: bool = True) -> None:
        monkeypatch.setattr(backends, "cpu_flags", lambda: flags)
        monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: object() if ctranslate2 else None)
        monkeypatch.setattr(backends.torch.cuda, "is_available", lambda: False)

    return machine


def test_without_vnni_the_default_is_ctranslate2_in_float32(cpu):
    cpu(AVX2 | {"avx512f", "avx512bw"})
    assert fastest_backend("auto", "auto") == (
        "ctranslate2",
        "float32",
        " (auto: CTranslate2 is installed, this CPU lacks VNNI/AMX)",
    )


@pytest.mark.parametrize("flag", ["avx512_vnni", "avx_vnni", "amx_int8"])
def test_with_native_int8_the_default_is_ctranslate2_in_int8(cpu, flag):
    cpu(AVX2 | {flag})
    assert fastest_backend("auto", "auto") == (
        "ctranslate2",
        "int8",
        " (auto: CTranslate2 is installed, this CPU has VNNI/AMX)",
    )


def test_without_ctranslate2_the_default_is_torch_and_what_is_asked_for_is_kept(cpu):
    cpu(AVX2 | {"avx512_vnni"}, ctranslate2=False)
    assert fastest_backend("auto", "auto")[:1] == ("torch",)
    assert fastest_backend("auto", "auto")[2] == " (auto: CTranslate2 is not installed)"
    assert fastest_backend("torch", "float32") == ("torch", "float32", "")
    assert fastest_backend("ctranslate2", "int8") == ("ctranslate2", "int8", "")
    assert fastest_backend("ctranslate2", "auto") == ("ctranslate2", "int8", " (auto: this CPU has VNNI/AMX)")
