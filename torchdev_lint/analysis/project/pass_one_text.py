"""Which files pass 1 reads, from their text alone (`analysis/project/project_facts.py`): a cheap test
before parsing, since parsing every file of a project would cost more than checking it.

`wants_summary`: can the text hold a fact of its own (a gate, a loader built, a checkpoint
saved, a load in a derived class, a CUDA constructor default)? `may_test_group`: can it test for a
process group (`analysis/context/project_groups.py`)? `may_gate`: can it hold a gate
(a function that stops its caller where CUDA is missing)? `may_place`: can it place a module on
CUDA, and `constructs`: does it construct a class it imports? `imports`: the modules its import lines name, to find the project files a checked
file leads to without parsing it.
"""

from __future__ import annotations

import re

from torchdev_lint.analysis.project import constructor_facts
from torchdev_lint.analysis.provenance import load_facts

# Text a parameter boundary needs in the file that starts it: a loader built (TDL204/TDL205),
# a checkpoint saved (TDL105). Its callers and callees are found as for gates, by name. (An
# alias, `DL(...)` or `T.save(...)`, keeps the file out: that only leaves a finding out.)
# Each test runs only where its literal occurs: one alternation over every file's text cost more
# than the rest of the text tests together (0.1 s on the torch subset).
_PARAMETER_TEXT = (
    (b"DataLoader", re.compile(rb"\bDataLoader(?:\(| as\b)")),
    (b"torch.save(", re.compile(rb"\btorch\.save\(")),
    (b"from torch import", re.compile(rb"^from torch import[^\n]*\bsave\b", re.MULTILINE)),
)
# Text a gate of the file's own needs (see requirements.CudaRequirements.stops_caller): a claim
# of the GPU, an assert about CUDA on its first line, an `if` about CUDA (or the CPU) whose
# block stops within a few lines, or an `else:` that stops in a file with such an `if`. Only
# files with it are parsed at first (under a tenth of a project's bytes); a test spread over
# lines can be missed, which only leaves a finding in place.
# (Matched against the lower-cased text: case-insensitive patterns are several times slower.)
_STOP_TEXT = re.compile(rb"\b(?:raise|exit|quit|_exit|skip\w*)\b")
_CLAIM_TEXT = re.compile(
    rb"set_device|current_device|init_process_group|assert\b[^\n]*(?:cuda|gpu|nccl|accelerator)"
)
_IF_TEXT = re.compile(rb"^[ \t]*(?:el)?if\b[^\n]*(?:cuda|gpu|nccl|accelerator|cpu)", re.MULTILINE)
_ELSE_TEXT = re.compile(rb"^[ \t]*else[ \t]*:", re.MULTILINE)
# Calls of collectives that take tensors (`torch_api.COLLECTIVES`), as a file's text spells them.
_COLLECTIVE_TEXT = (b"all_reduce(", b"all_gather(", b"reduce_scatter(", b"broadcast(", b"all_to_all(")
# Import statements, read from the text to find project modules outside the checked files.
_IMPORT = re.compile(
    rb"^([ \t]*)(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*|[^\n#]*)|import[ \t]+([^\n#]*))",
    re.MULTILINE,
)
_COMMENT = re.compile(r"#[^\n]*")


def wants_summary(source: bytes) -> bool:
    """Can the text hold a fact of its own: a gate, a loader built, a checkpoint saved, a load
    in a class derived from another (a cheap test, before parsing)?"""
    if constructor_facts.may_define(source):
        return True
    if any(literal in source and pattern.search(source) for literal, pattern in _PARAMETER_TEXT):
        return True
    return bool(may_gate(source) or load_facts.may_need(source))


def may_test_group(source: bytes) -> bool:
    """Can the text test whether a process group is initialised (`dist.is_initialized()`, a world
    size, a helper named for either), or hand a tensor to a collective (`dist.all_reduce(t)`)? Such
    files receive the project's NCCL fact, and so do those importing a project module that defines
    a group test (`ContextFacts.with_facts`)."""
    return (
        b"initialized" in source
        or b"world_size" in source
        or any(collective in source for collective in _COLLECTIVE_TEXT)
    )


def may_place(source: bytes) -> bool:
    """Can the text place a module on CUDA (the device flow's evidence of a mismatch: `cuda` and a
    move)? Only such files learn which classes they import and construct (`constructs`) from
    project modules are nn.Module subclasses."""
    return b"cuda" in source and (b".to(" in source or b".cuda(" in source)


def constructs(source: bytes, name: str) -> bool:
    """Can the text construct the class-like `name` it imports (`Encoder(` follows the name)?
    (`in` first: a pattern per imported name is compiled, and most names are never called.)"""
    if not name[:1].isupper() or f"{name}(".encode() not in source:
        return False
    return re.search(rb"\b%s\(" % re.escape(name.encode()), source) is not None


def may_gate(source: bytes) -> bool:
    """Can the text hold a gate of its own (a cheap test, before parsing)?"""
    text = source.lower()
    if _CLAIM_TEXT.search(text):
        return True
    checks = [match.start() for match in _IF_TEXT.finditer(text)]
    if any(_STOP_TEXT.search(_lines(text, start, 7)) for start in checks):
        return True
    return bool(checks) and any(
        _STOP_TEXT.search(_lines(text, match.start(), 4)) for match in _ELSE_TEXT.finditer(text)
    )


def _lines(source: bytes, start: int, count: int) -> bytes:
    """`count` lines of `source` from offset `start`."""
    end = start
    for _ in range(count):
        end = source.find(b"\n", end + 1)
        if end < 0:
            return source[start:]
    return source[start:end]


# (level, "dotted.module", unindented) of each module an import line names (`imports`).
Imports = list[tuple[int, str, bool]]


def imports(source: bytes) -> Imports:
    """`(level, "dotted.module", unindented)` of each import statement, and of each name a `from`
    imports (it may be a module: `from . import utils`), on every line of a parenthesised one. An
    unindented import runs whenever the module is imported (not in a function, a `try:` or an `if`)."""
    found: Imports = []
    for match in _IMPORT.finditer(source):
        indent, dots, module, names, plain = (
            group.decode("utf-8", "replace") if group else "" for group in match.groups()
        )
        top = not indent
        if match.group(5) is not None:
            found += [(0, words[0], top) for part in plain.split(",") if (words := part.split())]
            continue
        level = len(dots)
        if module:
            found.append((level, module, top))
        for part in _COMMENT.sub("", names).replace("(", " ").replace(")", " ").split(","):
            words = part.split()
            if words and words[0] != "*" and words[0].isidentifier():
                found.append((level, f"{module}.{words[0]}" if module else words[0], top))
    return found
