"""Property-based fuzzing: the checker never crashes and fixes never corrupt code.

Programs come from hypothesmith (arbitrary Python) and from `torch_programs`,
a strategy that assembles real device idioms (loads, saves, moves in loops,
factories, loaders, module moves, amp, DataParallel, legacy tensor types)
with random names, import aliases, nesting and formatting. For each program
the check raises nothing but a SourceError, and a fix run with unsafe fixes
satisfies `fix_properties.check_fix_properties`.

The bounded profile (default) takes about a minute; `TDL_FUZZ_PROFILE=long`
(or `scripts/fuzz_long.py`) runs many more examples with fresh randomness.
"""

from __future__ import annotations

import keyword
import os
from collections.abc import Callable

import hypothesmith
import pytest
from fix_properties import check_fix_properties
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.rule import all_rules

# No shrinking in CI: a failure prints its (unshrunk) program, which reproduces it, in bounded time.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),
)
settings.register_profile("long", deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
PROFILE = os.environ.get("TDL_FUZZ_PROFILE", "ci")
settings.load_profile(PROFILE)
SCALE = {"ci": 1, "long": int(os.environ.get("TDL_FUZZ_SCALE", "100"))}.get(PROFILE, 1)


def examples(n: int) -> settings:
    """`n` examples in the bounded profile, `n * SCALE` in the long one."""
    return settings(max_examples=n * SCALE, deadline=None)


RULES = all_rules()
Draw = Callable[[st.SearchStrategy[object]], object]

# ---------------------------------------------------------------- the idiom strategy

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in ("torch", "nn", "print", "range", "open")
)


class Writer:
    """Draws names and formatting while a program is assembled, so shrinking stays meaningful."""

    def __init__(self, draw: Draw) -> None:
        self.draw = draw
        self.indent = draw(st.sampled_from(["    ", "  ", "\t"]))

    def name(self) -> str:
        return self.draw(identifiers)  # type: ignore[return-value]

    def pick(self, *options: str) -> str:
        return self.draw(st.sampled_from(options))  # type: ignore[return-value]

    def flag(self) -> bool:
        return self.draw(st.booleans())  # type: ignore[return-value]

    def arg(self, text: str) -> str:
        wrap = self.draw(st.integers(0, 5)) == 0 and "=" not in text and not text.startswith("*")
        return f"({text})" if wrap else text

    def call(self, func: str, *args: str) -> str:
        """`func(args)` laid out one of several ways: one line, split lines, comments, trailing comma."""
        args = tuple(self.arg(a) for a in args)
        style = self.draw(st.integers(0, 4))
        if style == 0 or not args:
            return f"{func}({', '.join(args)})"
        if style == 1:
            return f"{func}({', '.join(args)},)"
        if style == 2:
            return f"{func}(\n" + "".join(f"        {a},\n" for a in args) + ")"
        if style == 3:
            return f"{func}(  # {self.name()}\n    " + ",\n    ".join(args) + "\n)"
        return f"({func}(\n    {', '.join(args)}))"


@st.composite
def torch_programs(draw: Draw) -> str:
    """A program of torch device idioms under random names, aliases, nesting and layout."""
    w = Writer(draw)
    lines: list[str] = []
    torch = w.pick("torch", "T", "th", w.name())
    lines.append("import torch" if torch == "torch" else f"import torch as {torch}")
    nn = w.pick(f"{torch}.nn", "nn", w.name())
    if nn != f"{torch}.nn":
        lines.append(f"from torch import nn as {nn}" if nn != "nn" else "from torch import nn")
    load = f"{torch}.load"
    if w.flag():
        load = w.pick("load", "L", w.name())
        lines.append(f"from torch import load as {load}" if load != "load" else "from torch import load")
    loader_cls = f"{torch}.utils.data.DataLoader"
    if w.flag():
        loader_cls = w.pick("DataLoader", "DL", w.name())
        alias = "" if loader_cls == "DataLoader" else f" as {loader_cls}"
        lines.append(f"from torch.utils.data import DataLoader{alias}")
    if w.flag():
        lines.append(f"# {w.name()}")
    dev = w.name()
    lines.append(f"{dev} = {torch}.device('cuda' if {torch}.cuda.is_available() else 'cpu')")
    model = w.name()
    lines.append(f"{model} = {w.call(f'{nn}.Linear', '4', '4')}")
    block: list[str] = []
    for _ in range(draw(st.integers(1, 8))):  # type: ignore[call-overload]
        block.extend(_snippet(w, torch, nn, load, loader_cls, dev, model))
    lines.extend(_nest(w, block or ["pass"]))
    return "\n".join(lines) + "\n"


def _snippet(w: Writer, torch: str, nn: str, load: str, loader_cls: str, dev: str, model: str) -> list[str]:
    """One idiom: a statement or a small block."""
    x, xs, y, path = w.name(), w.name(), w.name(), repr(w.name() + ".pt")
    target = w.pick(dev, "'cuda'", "'cuda:0'", "'cpu'", f"{torch}.device('cuda')")
    factory = w.pick("zeros", "ones", "rand", "randn", "empty", "tensor")
    kind = w.draw(st.integers(0, 19))
    if kind == 0:
        return [f"{y} = {w.call(load, path)}"]
    if kind == 1:
        extra = w.pick("map_location='cpu'", "weights_only=False", "weights_only=True", dev)
        return [f"{y} = {w.call(load, path, extra)}"]
    if kind == 2:
        return [w.call(f"{torch}.save", model, path)]
    if kind == 3:
        return [w.call(f"{torch}.save", f"{{'model': {model}, 'epoch': 1}}", path)]
    if kind == 4:
        return [f"for {x} in {xs}:", f"{w.indent}{y} = {model}({w.call(f'{x}.to', target)})"]
    if kind == 5:
        args = "[1.0, 2.0]" if factory == "tensor" else "3, 4"
        made = f"{torch}.{factory}({args})"
        return [
            f"{y} = " + w.pick(w.call(f"{made}.to", target), f"{made}.cuda()", f"{made}.to({torch}.float16)")
        ]
    if kind == 6:
        pin = w.pick("", ", pin_memory=True", ", pin_memory=False", ", **kw")
        return [
            f"{x} = {loader_cls}({xs}, batch_size=8{pin})",
            f"for {y} in {x}:",
            f"{w.indent}{y} = {w.call(f'{y}.to', target)}",
            f"{w.indent}{model}({y})",
        ]
    if kind == 7:
        return [f"{model}.to({target})" if w.flag() else f"{model} = {model}.cuda()"]
    if kind == 8:
        return [f"{y} = {nn}.Linear(2, 2).{w.pick('eval', 'train')}().to({target})"]
    if kind == 9:
        return [f"with {w.call(f'{torch}.cuda.amp.autocast')}:", f"{w.indent}{y} = {model}({x})"]
    if kind == 10:
        return [f"{y} = {torch}.cuda.amp.GradScaler()"]
    if kind == 11:
        return [f"{model} = {w.call(f'{nn}.DataParallel', model)}"]
    if kind == 12:
        legacy = w.pick("FloatTensor", "LongTensor", "cuda.FloatTensor", "cuda.HalfTensor")
        return [f"{y} = {torch}.{legacy}({w.pick('3, 4', '[1, 2]')})"]
    if kind == 13:
        return [f"{y} = {model}({x}.cuda()).{w.pick('numpy', 'cpu', 'detach')}()"]
    if kind == 14:
        join = w.pick("stack", "cat")
        return [f"{y} = {torch}.{join}([{w.call(f'{x}.to', target)} for {x} in {xs}])"]
    if kind == 15:
        return [f"for {x} in range(3):", f"{w.indent}{model}.to({target})", f"{w.indent}{y} = {model}({x})"]
    if kind == 16:
        return [f"{y} = {torch}.{w.pick('_C._cuda_getDevice()', '_utils._get_device_index(0)')}"]
    if kind == 17:
        return [f"{y} = {xs}.to({target}){w.pick('', '  # noqa', '  # noqa: TDL1')}"]
    if kind == 18:
        return [f"{y} = {load}({path}).to({target})", f"{y}.eval()"]
    return [f"{torch}.set_default_tensor_type({torch}.cuda.FloatTensor)"]


def _nest(w: Writer, block: list[str]) -> list[str]:
    """Wrap `block` in zero or more functions, classes, loops, ifs and trys."""
    for _ in range(w.draw(st.integers(0, 3))):  # type: ignore[call-overload]
        inner = [f"{w.indent}{line}" if line.strip() else line for line in block]
        wrapper = w.draw(st.integers(0, 5))
        if wrapper == 0:
            block = [f"def {w.name()}({w.pick('', 'x', 'model, device', 'loader')}):", *inner]
        elif wrapper == 1:
            method = [f"{w.indent}{line}" for line in [f"def {w.name()}(self):", *inner]]
            block = [f"class {w.name().title() or 'C'}:", *method]
        elif wrapper == 2:
            block = [f"for {w.name()} in range(2):", *inner]
        elif wrapper == 3:
            block = [f"if {w.name()}:", *inner, "else:", f"{w.indent}pass"]
        elif wrapper == 4:
            block = ["try:", *inner, "except Exception:", f"{w.indent}raise"]
        else:
            block = [f"while {w.name()}:", *inner, f"{w.indent}break"]
    return block


# ---------------------------------------------------------------- properties


def assert_never_crashes_never_corrupts(source: str) -> None:
    data = source.encode()
    try:
        check_source("fuzz.py", data, RULES, skip_filter=False)
    except SourceError as error:
        assert str(error).startswith("fuzz.py: ") and "\n" not in str(error)
        return
    outcome = check_fix_properties("fuzz.py", data, RULES)
    assert not outcome.problems, f"{source}\n" + "\n".join(outcome.problems)


def _compiles(source: str) -> bool:
    try:
        compile(source, "fuzz.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


@given(torch_programs())
@examples(300)
def test_torch_idioms(source: str) -> None:
    assert _compiles(source), source  # the strategy itself must only build valid programs
    assert_never_crashes_never_corrupts(source)


@given(hypothesmith.from_grammar())
@examples(25)
def test_arbitrary_programs(source: str) -> None:
    assert_never_crashes_never_corrupts(source)


@given(hypothesmith.from_node())
@examples(15)
def test_programs_from_libcst_nodes(source: str) -> None:
    assert_never_crashes_never_corrupts(source)


@given(hypothesmith.from_grammar(), torch_programs())
@examples(20)
def test_torch_idioms_spliced_into_arbitrary_programs(program: str, idioms: str) -> None:
    source = program.rstrip("\\\n") + "\n" + idioms
    if _compiles(source):
        assert_never_crashes_never_corrupts(source)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nx = torch.load('a')\nx = torch.load('a')\n",
        "import torch as T\nfor i in range(2):\n    T.load(\n        'a',\n    )\n",
    ],
)
def test_properties_hold_on_known_programs(source: str) -> None:
    """The property checker itself accepts ordinary fixes (a guard against a vacuous fuzz run)."""
    outcome = check_fix_properties("fuzz.py", source.encode(), RULES)
    assert outcome.fixed is not None and not outcome.problems
