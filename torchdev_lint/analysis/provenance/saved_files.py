"""Files the project writes with `torch.save` and reads with `torch.load`, across files (issue 13).

A `torch.load(f"{manifest}.f0_stat.pt")` in `data/dataset.py` reads what
`prepare.py` wrote with `torch.save(stats, f"{prefix}.f0_stat.pt")`: when every
`torch.save` of the project to that path writes host data (`.cpu()`, NumPy,
numbers, dicts of those, what project functions return from host memory:
`host_values.host_condition`, `returned_values`), the load cannot meet a device this
machine lacks.

A path is compared by its **shape**: literal text, `None` for what is not known
(a parameter, a call), `["key", "f0_stats"]` for a configuration key
(`cfg.f0_stats`, `cfg["f0_stats"]`) and `["ref", "consts.L_FILE", reference]` for a
module-level name (a constant of the file or an import; the reference is the
summaries' one, resolved by the project index to the defining file). Only
distinctive shapes count: a word of the literal text, constant or key that is
not a generic path word (`model.pt`, `args.output` and `WEIGHTS_NAME` match too much).

- `SavedPaths`: what one file's summary says (pass 1, `summaries._Collector`): each save's
  path shape and host fact (`returned_values.summary_fact`: True, False, or the callees whose
  return values must be host data).
- `path_shape`: the shape of a path expression, in pass 1 and at the load a rule judges
  (`load_facts.local_key` of it is what `project_facts.FileFacts.host_saved` holds).
- `load_facts.host_loads`: the propagation over the project's summaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import libcst as cst

from torchdev_lint.analysis.provenance.returned_values import summary_fact
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name, resolve
from torchdev_lint.analysis.values.host_values import HostFacts, host_condition
from torchdev_lint.syntax import argument, positional

Shape = list[Any]
Reference = list[Any]
References = Callable[[str, Scope], Reference | None]

_JOINS = frozenset({"os.path.join", "posixpath.join"})
_SAME_PATH = frozenset({"builtins.str", "pathlib.Path", "os.fspath", "os.path.abspath", "os.path.expanduser"})
# Words that say "a file of tensors", not which one: a path made only of these (`model.pt`,
# `f"{out}/checkpoint_{epoch}.pth"`, `args.output`, `WEIGHTS_NAME`) may be written elsewhere
# by code the analysis does not see (another `torch.save` to a path from the command line).
_GENERIC_WORDS = frozenset(
    "path file filename fname dir folder root out output outdir prefix name save load ckpt "
    "checkpoint model state dict fn f p pt pth bin th tar pkl npy safetensors tmp temp cache "
    "data args cfg config best last latest final weights weight params net network epoch step "
    "iter pretrained optimizer optim scheduler result results".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_MAX_DEPTH = 3


class SavedPaths:
    """The `torch.save` paths (with whether the object is host data) and `torch.load` paths of
    one file, noted call by call during the summaries' traversal."""

    def __init__(self, references: References, facts: HostFacts) -> None:
        self._references = references
        self._facts = facts  # pass 1's: `host_facts.PassOneFacts`
        self.saves: list[list[Any]] = []
        self.loads: list[Shape] = []

    def note(self, call: cst.Call, scope: Scope) -> None:
        name = resolve(call.func, scope)
        if name == "torch.save":
            obj, path = argument(call, 0, "obj"), argument(call, 1, "f")
            if obj is not None and path is not None:
                shape = path_shape(path.value, scope, self._references)
                entry = [shape, summary_fact(host_condition(obj.value, scope, self._facts))]
                if distinctive(shape) and entry not in self.saves:
                    self.saves.append(entry)
        elif name == "torch.load":
            path = argument(call, 0, "f")
            if path is not None:
                shape = path_shape(path.value, scope, self._references)
                if distinctive(shape) and shape not in self.loads:
                    self.loads.append(shape)

    def summary(self) -> dict[str, Any]:
        return {"saves": self.saves, "loads": self.loads}


def path_shape(
    path: cst.BaseExpression, scope: Scope, references: References | None = None, depth: int = 0
) -> Shape:
    """The shape of a path expression (see the module doc); `references` given in pass 1 only."""
    parts = _parts(path, scope, references, depth)
    merged: Shape = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif not (part is None and merged and merged[-1] is None):
            merged.append(part)
    return merged


def _parts(node: cst.BaseExpression, scope: Scope, references: References | None, depth: int) -> Shape:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return [value] if isinstance(value, str) else [None]
    if isinstance(node, cst.ConcatenatedString):
        return _parts(node.left, scope, references, depth) + _parts(node.right, scope, references, depth)
    if isinstance(node, cst.FormattedString):
        parts: Shape = []
        for piece in node.parts:
            if isinstance(piece, cst.FormattedStringText):
                parts.append(piece.value)
            elif isinstance(piece, cst.FormattedStringExpression):
                parts += _parts(piece.expression, scope, references, depth)
        return parts
    if isinstance(node, cst.BinaryOperation):
        left, right = (
            _parts(node.left, scope, references, depth),
            _parts(node.right, scope, references, depth),
        )
        if isinstance(node.operator, cst.Divide):
            return [*left, "/", *right]
        return [*left, *right] if isinstance(node.operator, cst.Add) else [None]
    if isinstance(node, cst.Call):
        name = resolve(node.func, scope)
        given = positional(node)
        if name in _JOINS and given and not any(arg.star for arg in node.args):
            joined: Shape = []
            for index, arg in enumerate(given):
                joined += ["/"] * bool(index) + _parts(arg.value, scope, references, depth)
            return joined
        if name in _SAME_PATH and len(node.args) == 1 and not node.args[0].star:
            return _parts(node.args[0].value, scope, references, depth)
        return [None]
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        element = node.slice[0].slice
        if isinstance(element, cst.Index) and isinstance(element.value, cst.SimpleString):
            key = element.value.evaluated_value
            return [["key", key]] if isinstance(key, str) else [None]
        return [None]
    if isinstance(node, (cst.Name, cst.Attribute)):
        return _name_parts(node, scope, references, depth)
    return [None]


def _name_parts(
    node: cst.Name | cst.Attribute, scope: Scope, references: References | None, depth: int
) -> Shape:
    """A name bound once at module level (an import, a constant, a class) is a reference; a
    local name stands for its one assigned value; `cfg.key` is a configuration key; anything
    else is unknown."""
    text = dotted_name(node)
    if text is None:
        return [None]
    found = scope.lookup(text.split(".", 1)[0])
    if found is not None and found[0].kind == "module" and len(found[1]) == 1:
        binding = found[1][0]
        if binding.import_target is not None:
            return [["ref", text, references(text, scope) if references is not None else None]]
        if binding.value is not None or isinstance(binding.node, cst.ClassDef):
            return [["ref", text, ["here", text]]]
    if isinstance(node, cst.Name):
        assigned = assigned_values(node, scope) if depth < _MAX_DEPTH else None
        if assigned is not None and len(assigned[0]) == 1 and assigned[1].kind != "module":
            return _parts(assigned[0][0], assigned[1], references, depth + 1)
        return [None]
    return [["key", node.attr.value]]


def distinctive(shape: Shape) -> bool:
    """Does the shape name a particular file: a word of its literal text, constant or key
    that is not a generic path word (`f0_stat`, `L.pt`, `LEXICON_FILE`, not `model.pt`)?"""
    text = " ".join(part if isinstance(part, str) else part[1].rsplit(".", 1)[-1] for part in shape if part)
    return bool(set(_WORD.findall(text.lower())) - _GENERIC_WORDS)
