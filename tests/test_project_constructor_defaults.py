"""The project-wide analysis, constructor defaults: TDL301 at a `device="cuda"` default no call overrides.

`encoder.py` defines `TextEncoder(vocab, device="cuda")`, stores the device in `self.device` and
moves tokens there; when every construction in the project leaves the device out, the program
always runs on CUDA: reported at the default. Each look-alike passes the device, or makes the
constructions unknowable (a subclass, a decorator, the class handed on as a value, an export
from a package), or has no construction at all: silent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import file_name, findings, record_checks, write_files

from torchdev_lint.cache import ResultCache
from torchdev_lint.config import select_rules
from torchdev_lint.runner import CheckOptions, process_files

ENCODER = """
    import torch


    class TextEncoder:
        def __init__(self, vocab, device="cuda"):
            self.device = device
            self.vocab = vocab

        def encode(self, tokens):
            return tokens.to(self.device)
"""
# The construction of the main script: `{call}` is the argument list.
MAIN = """
    from encoder import TextEncoder


    def main():
        encoder = TextEncoder({call})
        return encoder.encode(load_tokens())
"""
FLAGGED = ["encoder.py:6 TDL301"]


def _check(root: Path, files: dict[str, str], *names: str, cache: ResultCache | None = None) -> list[str]:
    write_files(root, {"setup.py": "", **files})
    return findings(root, ["TDL301"], *names, cache=cache)


def _main(call: str) -> str:
    return MAIN.format(call=call)


def test_a_default_no_construction_overrides_is_reported_at_the_default(tmp_path: Path) -> None:
    assert _check(tmp_path, {"encoder.py": ENCODER, "main.py": _main("vocab=100")}) == FLAGGED
    options = CheckOptions(rules=tuple(select_rules(["TDL301"])), with_edits=False)
    paths = [str(tmp_path / "encoder.py"), str(tmp_path / "main.py")]
    (report,) = [r for r in process_files(paths, options) if r.diagnostics]
    (finding,) = report.diagnostics
    assert finding.message.startswith("`device` defaults to CUDA and no construction of `TextEncoder`")
    assert finding.fix is None


@pytest.mark.parametrize(
    ("default", "stored", "use"),
    [
        ('device="cuda"', "device", "tokens.to(self.device)"),
        ('device="cuda:0"', "device", "tokens.to(device=self.device)"),
        ('device=torch.device("cuda")', "torch.device(device)", "torch.zeros(3, device=self.device)"),
        ('*, device: str = "cuda"', "device", "tokens.to(self.device)"),
        # Used as a device in `__init__` itself, not stored.
        ('device="cuda"', "torch.zeros(vocab, device=device)", "tokens"),
    ],
)
def test_the_spellings_of_a_stored_cuda_default(tmp_path: Path, default: str, stored: str, use: str) -> None:
    encoder = ENCODER.replace('device="cuda"', default).replace("= device\n", f"= {stored}\n")
    encoder = encoder.replace("tokens.to(self.device)", use)
    assert _check(tmp_path, {"encoder.py": encoder, "main.py": _main("100")}) == FLAGGED


@pytest.mark.parametrize(
    "main",
    [
        # Through the module, and a construction in the same file as the class.
        "import encoder\n\ndef main():\n    return encoder.TextEncoder(100)\n",
        "from encoder import TextEncoder as Encoder\n\ndef main():\n    return Encoder(100), Encoder(vocab=5)\n",
    ],
)
def test_constructions_through_an_alias_or_a_module(tmp_path: Path, main: str) -> None:
    assert _check(tmp_path, {"encoder.py": ENCODER, "main.py": main}) == FLAGGED


def test_a_construction_in_the_file_of_the_class(tmp_path: Path) -> None:
    encoder = ENCODER + "\n\n    def build():\n        return TextEncoder(100)\n"
    assert _check(tmp_path, {"encoder.py": encoder}) == FLAGGED


@pytest.mark.parametrize(
    "call",
    [
        'vocab=100, device="cpu"',  # by keyword
        '100, "mps"',  # by position
        "100, device=args.device",  # a setting
        "**options",  # everything it may
        "*arguments",
    ],
)
def test_a_construction_that_passes_the_device_is_silent(tmp_path: Path, call: str) -> None:
    assert _check(tmp_path, {"encoder.py": ENCODER, "main.py": _main(call)}) == []


def test_one_construction_that_passes_the_device_is_enough(tmp_path: Path) -> None:
    other = 'from encoder import TextEncoder\n\ndef evaluate():\n    return TextEncoder(5, device="cpu")\n'
    files = {"encoder.py": ENCODER, "main.py": _main("100"), "evaluate.py": other}
    assert _check(tmp_path, files) == []


def test_no_construction_at_all_is_silent(tmp_path: Path) -> None:
    files = {"encoder.py": ENCODER, "main.py": "from encoder import TextEncoder\n"}
    assert _check(tmp_path, files) == []


@pytest.mark.parametrize(
    "other",
    [
        # A subclass may pass it to `super().__init__(...)`.
        "from encoder import TextEncoder\n\nclass CharEncoder(TextEncoder):\n    pass\n",
        # Handed on as a value: constructed where the analysis cannot see.
        "import functools\nfrom encoder import TextEncoder\n\nmake = functools.partial(TextEncoder, 5)\n",
        "from encoder import TextEncoder\n\nENCODERS = {'text': TextEncoder}\n",
        "from encoder import TextEncoder\n\ndef encoder_class():\n    return TextEncoder\n",
        # A name the analysis does not take for a class.
        "from encoder import TextEncoder as make_encoder\n\nENCODER = make_encoder(5, 'cpu')\n",
        "import registry\nfrom encoder import TextEncoder\n\nregistry.register(TextEncoder)\n",
    ],
)
def test_a_class_used_as_a_value_is_unknown(tmp_path: Path, other: str) -> None:
    files = {"encoder.py": ENCODER, "main.py": _main("100"), "other.py": other}
    assert _check(tmp_path, files) == []


def test_an_old_style_super_call_is_not_a_value(tmp_path: Path) -> None:
    encoder = ENCODER.replace("class TextEncoder:", "class TextEncoder(torch.nn.Module):").replace(
        "self.device = device", "super(TextEncoder, self).__init__()\n            self.device = device"
    )
    assert _check(tmp_path, {"encoder.py": encoder, "main.py": _main("100")}) == FLAGGED


def test_type_tests_and_annotations_are_not_values(tmp_path: Path) -> None:
    other = (
        "from encoder import TextEncoder\n\n"
        "def check(encoder: TextEncoder) -> bool:\n    return isinstance(encoder, TextEncoder)\n"
    )
    files = {"encoder.py": ENCODER, "main.py": _main("100"), "other.py": other}
    assert _check(tmp_path, files) == FLAGGED


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # A decorator: registries and dataclasses build it from what the analysis cannot see.
        ("class TextEncoder:", "@register\nclass TextEncoder:"),
        # The class builds itself.
        (
            "    def encode(self, tokens):",
            "    @classmethod\n    def small(cls):\n        return cls(10)\n\n    def encode(self, tokens):",
        ),
        # Chosen by availability in `__init__`, or the device never used as one.
        ("self.vocab = vocab", "self.vocab = vocab if torch.cuda.is_available() else 0"),
        ("tokens.to(self.device)", "tokens"),
        ("self.device = device", "self.table = torch.zeros(3).to(args.device)"),
        # Rebound before it is stored: no longer the default alone.
        ("self.device = device", "device = torch.device(device)\n        self.device = device"),
    ],
)
def test_look_alikes_in_the_class_are_silent(tmp_path: Path, before: str, after: str) -> None:
    encoder = ENCODER.replace(before, after.replace("\n", "\n    "))
    assert before in ENCODER
    assert _check(tmp_path, {"encoder.py": encoder, "main.py": _main("100")}) == []


def test_a_class_about_cuda_by_its_name_is_silent(tmp_path: Path) -> None:
    encoder, main = (
        ENCODER.replace("TextEncoder", "CudaEncoder"),
        _main("100").replace("TextEncoder", "CudaEncoder"),
    )
    assert _check(tmp_path, {"encoder.py": encoder, "main.py": main}) == []


def test_a_class_exported_by_a_library_package_is_silent(tmp_path: Path) -> None:
    """A library's public class (`setup.py`) is constructed by its users, not by the project."""
    files = {
        "textlib/__init__.py": "from .encoder import TextEncoder\n",
        "textlib/encoder.py": ENCODER,
        "textlib/cli.py": "from .encoder import TextEncoder\n\ndef main():\n    return TextEncoder(100)\n",
    }
    assert _check(tmp_path, files) == []
    files["textlib/__init__.py"] = "from .cli import *\nfrom .encoder import *\n"
    assert _check(tmp_path, files) == []
    files["textlib/__init__.py"] = "from .cli import main\n"
    assert _check(tmp_path, files) == ["textlib/encoder.py:6 TDL301"]


def test_a_research_repository_exporting_its_models_to_its_script_is_reported(tmp_path: Path) -> None:
    """No packaging metadata: `models/__init__.py` serves `train.py`, not users of a library."""
    (tmp_path / ".git").mkdir()
    files = {
        "models/__init__.py": "from .encoder import TextEncoder\n",
        "models/encoder.py": ENCODER,
        "train.py": _main("100").replace("from encoder import", "from models import"),
    }
    write_files(tmp_path, files)
    assert findings(tmp_path, ["TDL301"]) == ["models/encoder.py:6 TDL301"]


def test_a_construction_that_runs_only_with_cuda_is_silent(tmp_path: Path) -> None:
    main = _main("100").replace(
        "def main():\n", "def main():\n    assert torch.cuda.is_available(), 'needs a GPU'\n"
    )
    files = {"encoder.py": ENCODER, "main.py": "import torch\n" + main}
    assert _check(tmp_path, files) == []


def test_an_unparsable_file_naming_the_class_is_unknown(tmp_path: Path) -> None:
    files = {"encoder.py": ENCODER, "main.py": _main("100"), "broken.py": "TextEncoder(5, device=\n"}
    assert _check(tmp_path, files, "encoder.py", "main.py", "broken.py") == []


def test_checked_alone_the_file_of_the_class_has_no_finding(tmp_path: Path) -> None:
    write_files(tmp_path, {"setup.py": "", "encoder.py": ENCODER, "main.py": _main("100")})
    assert findings(tmp_path, ["TDL301"], "encoder.py") == []
    assert findings(tmp_path, ["TDL301"], "main.py") == []


def test_same_results_with_workers(tmp_path: Path) -> None:
    files = {"encoder.py": ENCODER, "main.py": _main("100")}
    files.update({f"tool{index}.py": "import torch\n\nX = torch.zeros(1)\n" for index in range(6)})
    assert _check(tmp_path, files) == FLAGGED
    assert findings(tmp_path, ["TDL301"], jobs=2) == FLAGGED


def test_cache_rechecks_the_class_when_a_call_in_another_file_changes_what_it_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = record_checks(monkeypatch, file_name)
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    files = {"encoder.py": ENCODER, "main.py": _main('100, device="cpu"'), "other.py": "VERSION = 1\n"}
    assert _check(project, files, cache=cache) == []

    # An edit of main.py that constructs the class as before: only main.py is checked again.
    checked.clear()
    write_files(project, {"main.py": _main('100, device="cpu"') + "\n    VERSION = 2\n"})
    assert findings(project, ["TDL301"], cache=cache) == []
    assert checked == ["main.py"]

    # main.py stops passing the device: encoder.py's facts (FileFacts.cuda_defaults, in its cache
    # key) change, so encoder.py is checked again; other.py is not.
    checked.clear()
    write_files(project, {"main.py": _main("100")})
    assert findings(project, ["TDL301"], cache=cache) == FLAGGED
    assert sorted(set(checked)) == ["encoder.py", "main.py"]

    # Passing a device again: encoder.py's result without facts is still cached.
    checked.clear()
    write_files(project, {"main.py": _main('100, device="mps"')})
    assert findings(project, ["TDL301"], cache=cache) == []
    assert checked == ["main.py"]


# A module-level function's CUDA default, used as a device in its body (RULES.md: "a `device="cuda"`
# parameter default that no call in the project overrides").
SPECTRA = """
    import torch


    def spectrum(signal, bins=64, device="cuda:0"):
        return torch.fft.rfft(signal.to(device), n=bins)
"""
CALLER = """
    import functools

    import torch
    from spectra import spectrum


    def run(signal, where, pool):
        {body}
"""


@pytest.mark.parametrize(
    ("body", "reported"),
    [
        ("return spectrum(signal)", True),
        ("return spectrum(signal, 32)", True),
        ("return [spectrum(signal, bins=8), spectrum(signal, 16)]", True),
        ("return spectrum(signal, 32, where)", False),  # by position
        ("return spectrum(signal, device=where)", False),
        ("return spectrum(signal), spectrum(signal, device=where)", False),  # one call of two passes it
        ("return spectrum(*signal)", False),
        ("return functools.partial(spectrum, device=where)", False),  # handed on: calls unseen
        ("return pool.map(spectrum, signal)", False),
        ("assert torch.cuda.is_available()\n        return spectrum(signal)", False),  # CUDA-only caller
    ],
)
def test_a_function_default_no_call_overrides(tmp_path: Path, body: str, reported: bool) -> None:
    caller = CALLER.format(body=body)
    found = _check(tmp_path, {"spectra.py": SPECTRA, "main.py": caller})
    assert found == (["spectra.py:5 TDL301"] if reported else [])
    if reported:
        options = CheckOptions(rules=tuple(select_rules(["TDL301"])), with_edits=False)
        paths = [str(tmp_path / "spectra.py"), str(tmp_path / "main.py")]
        (report,) = [r for r in process_files(paths, options) if r.diagnostics]
        assert report.diagnostics[0].message.startswith("`device` defaults to CUDA and no call of `spectrum`")


@pytest.mark.parametrize(
    "spectra",
    [
        SPECTRA.replace("def spectrum", "@torch.no_grad()\n    def spectrum"),  # a decorator may call it
        SPECTRA.replace("return torch", "device = torch.device(device)\n        return torch"),  # rebound
        SPECTRA.replace("signal.to(device)", "signal"),  # never used as a device
    ],
)
def test_function_defaults_that_are_not_facts(tmp_path: Path, spectra: str) -> None:
    caller = CALLER.format(body="return spectrum(signal)")
    assert _check(tmp_path, {"spectra.py": spectra, "main.py": caller}) == []


def test_a_function_no_file_calls_or_a_library_exports_is_silent(tmp_path: Path) -> None:
    assert _check(tmp_path, {"spectra.py": SPECTRA}) == []
    package = {
        "audio/__init__.py": "from .spectra import spectrum\n",
        "audio/spectra.py": SPECTRA,
        "main.py": CALLER.format(body="return spectrum(signal)").replace("from spectra", "from audio"),
    }
    assert _check(tmp_path, package) == []  # `setup.py`: users of the library call it too
