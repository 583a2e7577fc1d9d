"""Pass 1: what one file tells the rest of the project, computed from its tree alone.

A summary is plain JSON, a function of the file's bytes only (import names are
kept as written; the project index resolves them later, see
`analysis/project/project_facts.py`), so it can be cached by content and hashed:

- `functions`: for each module-level function and method (`"init"`, `"Trainer.setup"`)
  that can stop its caller where CUDA is missing: `then` is `"gate"` when its body
  reaches a gate of its own (`requirements.CudaRequirements.stops_caller`) before it
  can return, else `"return"` or `"end"`; `calls` are the project callees its body
  calls unconditionally before that point: any of them gating makes it gate too.
- `sites`: every callee the file names in a call (`"utils.init_distributed_mode"`),
  with the reference it stands for; the facts a file's check receives are keyed by
  these texts. A text bound two ways in the file maps to None (unknown).
- `aliases`: module-level imports (`from .utils import init`), so that a package's
  `__init__.py` re-exporting a function leads to it; `stars`: its `import *` modules.
- `saved_files`, `dataset_classes`: the paths `torch.save` writes (from host memory or not)
  and `torch.load` reads, the classes that are or may be Datasets (for TDL101:
  `analysis/provenance/saved_files.py`, `analysis/data/dataset_bases.py`); `returns`: the functions whose
  return value is host data, or is when the callees listed are (`analysis/provenance/returned_values.py`).
- `counts`: how many calls name each site; `checkpoints`, `batches`, `loader_args`, `forwards`:
  what functions do with their parameters, which calls pass loaders and which pass a loader
  parameter on (`analysis/project/parameter_uses.py`).
- `classes`: each module-level class's bases and the names its body binds, so that `self.setup`
  finds a method of a base class in another module (`analysis/project/inheritance.py`);
  `module_classes`: its nn.Module subclasses, each with whether calls of an instance must get
  inputs on its weights' device (`flow_classes.placed_module_classes`; read by the device flow of
  the files that import them, `analysis/project/context_facts.py`);
  `method_calls`: the attribute names called on objects other than project references
  (`trainer.fit(...)`): a method so named may have calls its callers' meet does not see;
  `cuda_method_calls`: those whose every call in the file runs only where CUDA is;
  `cuda_sites`: the same for the callee texts of `sites`. `cuda_guards`: for the others (`"sites"`,
  `"methods"`) whose every call comes after project calls that would stop the program first if
  they gate (made earlier by its function whatever happens, or the class's `__init__` for a
  method), those calls, one list per call, as positions in `"calls"` (each reference once).
- `dataset_items`: `{"PredictDataset": [[0, "x"]]}`, the constructor parameters (call position,
  name) whose items a class's `__getitem__` returns unchanged (`analysis/data/dataset_items.py`);
  `dataset_calls`: the imported classes whose instances the file's `DataLoader`s iterate
  (`utils.PredictDataset`): pass 1 reads their modules.
- `cuda_reach`: the module-level functions and methods (`"Exp.resize"`) that name CUDA (`"cuda"`,
  `.cuda`) or use one of the file that does: only their callers in other files are read
  (`analysis/context/cuda_callers.py`).
- `group_starts`: for each process group the file starts, whether it uses NCCL; `group_helpers`:
  its module-level functions that say a group is initialised, each with whether it is a size
  (`analysis/context/project_groups.py`).
- `cuda_defaults`, `constructions`: classes whose `__init__` stores a CUDA default used as a
  device, and the slots each construction passes (TDL301: `analysis/project/constructor_defaults.py`).

A reference is `["module", level, "dotted.path.name"]` (an import: `level` leading
dots), `["here", "name"]` or `["here", "Class.method"]` (this file), or
`["star", "name"]` (a name bound by no statement but maybe by an `import *`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import libcst as cst

from torchdev_lint.analysis.context.requirements import CudaRequirements
from torchdev_lint.analysis.data.dataset_bases import DatasetClasses
from torchdev_lint.analysis.data.dataset_items import item_parameters
from torchdev_lint.analysis.data.loaders import built_from, dataset_argument, is_dataloader_call
from torchdev_lint.analysis.project.constructor_defaults import ConstructorUses
from torchdev_lint.analysis.project.parameter_uses import ParameterUses
from torchdev_lint.analysis.provenance.host_facts import PassOneFacts
from torchdev_lint.analysis.provenance.returned_values import ReturnedValues
from torchdev_lint.analysis.provenance.saved_files import SavedPaths
from torchdev_lint.analysis.syntax.scopes import (
    BUILTIN_NAMES,
    Scope,
    block_statements,
    collect_bindings,
    collect_comprehension_bindings,
    collect_function_bindings,
    dotted_name,
)
from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.analysis.values.flow_classes import placed_module_classes

Reference = list[Any]
Summary = dict[str, Any]

_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})
_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})  # a statement's nested definitions


def summarize(module: cst.Module, path: str) -> Summary:
    """The summary of one parsed file (`path` only tells a CUDA-only folder; see requirements)."""
    scope = Scope(module, "module", None)
    collect_bindings(scope, module.body)
    requirements = CudaRequirements(scope, path, walk_module=False)
    stars = _stars(module)
    functions = _functions(module)
    collector = _Collector(scope, bool(stars), requirements, functions)
    walk(module, collector.enter, collector.leave)  # one traversal for both analyses
    sites: dict[str, Reference | None] = {}
    counts: dict[str, int] = {}
    for text, reference in collector.sites:
        sites[text] = None if text in sites and sites[text] != reference else reference
        counts[text] = counts.get(text, 0) + 1
    summaries = {}
    for qualname, function in functions:
        summary = _function_summary(qualname, function, requirements, collector)
        if summary["then"] == "gate" or summary["calls"]:
            summaries[qualname] = summary
    unknown: tuple[list[str], dict[str, Any]] = ([], {})
    method_gates = unknown if requirements.module_only else collector.gated(collector.method_calls)
    site_gates = unknown if requirements.module_only else collector.gated(collector.site_calls)
    guards = {"calls": collector.guard_calls, "sites": site_gates[1], "methods": method_gates[1]}
    aliases = {}
    for name, bindings in scope.bindings.items():
        alias = _import_reference(name, bindings, ())
        if alias is not None:
            aliases[name] = alias
    return {
        "functions": summaries,
        "sites": sites,
        "aliases": aliases,
        "stars": stars,
        "counts": counts,
        **collector.parameters.fields(),
        "saved_files": collector.saved_files.summary(),
        "dataset_classes": collector.dataset_classes.classes,
        "dataset_items": collector.dataset_items,
        "dataset_calls": sorted(collector.dataset_calls),
        "returns": collector.returned.summary(functions, collector.generators),
        **collector.constructors.fields(requirements),
        "classes": collector.classes,
        "module_classes": placed_module_classes(module, scope),
        "method_calls": sorted(collector.method_calls),
        "cuda_method_calls": method_gates[0],
        "defined": sorted(qualname for qualname, _ in functions if "." not in qualname),
        "group_starts": requirements.group_starts(),
        "group_helpers": requirements.group_helpers(),
        "cuda_reach": collector.cuda_reach(),
        # Not in a CUDA-only module: its callees are asked about only where a gate decides.
        "cuda_sites": site_gates[0],
        "cuda_guards": guards,
    }


def module_classes(module: cst.Module) -> dict[str, bool]:
    """The summary's `module_classes` alone: all a file tells when other files only construct
    its classes (a scope of its module level, no walk of the whole file)."""
    scope = Scope(module, "module", None)
    collect_bindings(scope, module.body)
    return placed_module_classes(module, scope)


def digest(summary: Summary) -> str:
    """A stable hash of a summary (key order does not matter)."""
    return hashlib.sha256(json.dumps(summary, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _functions(module: cst.Module) -> list[tuple[str, cst.FunctionDef]]:
    """Module-level functions and the methods of module-level classes, by qualified name."""
    found = []
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            found.append((statement.name.value, statement))
        elif isinstance(statement, cst.ClassDef):
            for member in block_statements(statement.body):
                if isinstance(member, cst.FunctionDef):
                    found.append((f"{statement.name.value}.{member.name.value}", member))
    return found


def _function_summary(
    qualname: str, function: cst.FunctionDef, requirements: CudaRequirements, collector: _Collector
) -> Summary:
    """Where the body stops its caller without CUDA, and the project calls made before."""
    if function.asynchronous is not None or qualname in collector.generators:
        return {"then": "end", "calls": []}  # calling it runs none of its body
    calls: list[Reference] = []
    for index, statement in enumerate(block_statements(function.body)):
        if requirements.stops_caller(statement):
            return {"then": "gate", "calls": calls}
        calls += [c for c in collector.calls.get((qualname, index), ()) if c not in calls]
        if (qualname, index) in collector.returns:
            return {"then": "return", "calls": calls}
    return {"then": "end", "calls": calls}


class _Collector:
    """One walk of the module: the callee of every call (with the scopes name lookup needs),
    the index CudaRequirements keeps, and for each top-level statement of each summarized
    function the project calls of a simple statement and whether it can `return`."""

    def __init__(
        self,
        scope: Scope,
        stars: bool,
        requirements: CudaRequirements,
        functions: list[tuple[str, cst.FunctionDef]],
    ) -> None:
        self.scope = scope
        self.stars = stars  # the file has an `import *`: an unbound name may come from it
        self.requirements = requirements
        self.sites: list[tuple[str, Reference]] = []
        self.calls: dict[tuple[str, int], list[Reference]] = {}
        self.returns: set[tuple[str, int]] = set()
        self.generators: set[str] = set()
        self.parameters = ParameterUses(reference_of)  # what functions do with parameters (TDL105/204/205)
        host_facts = PassOneFacts(reference_of)  # conditions on the project (TDL101)
        self.saved_files = SavedPaths(reference_of, host_facts)  # torch.save/torch.load paths (TDL101)
        self.dataset_classes = DatasetClasses(reference_of)  # bases of classes (TDL101)
        self.returned = ReturnedValues(host_facts)  # functions returning host data (TDL101)
        self.constructors = ConstructorUses(reference_of, scope)  # CUDA defaults, constructions (TDL301)
        self.classes: dict[str, list[Any]] = {}  # module-level classes: bases, names (inheritance)
        self.dataset_items: dict[str, list[Any]] = {}  # classes handing out constructor arguments
        self.dataset_calls: set[str] = set()  # imported dataset classes the file's loaders iterate
        # `x.name(...)` not resolved, some object's method: its calls, by attribute name.
        self.method_calls: dict[str, list[cst.Call]] = {}
        self.site_calls: dict[str, list[cst.Call]] = {}  # the calls of each project callee text
        self._ancestors: list[cst.CSTNode] = []
        self._statements = {
            id(statement): (qualname, index)
            for qualname, function in functions
            for index, statement in enumerate(block_statements(function.body))
        }
        self._statement: tuple[str, int] | None = None
        self._functions = dict(functions)
        self._positions: dict[int, tuple[str, int]] = {}  # a call outside nested scopes: its statement
        self._before: dict[tuple[str, int], list[int]] = {}  # `_calls_before`, by statement
        self.guard_calls: list[Reference] = []  # the calls `_calls_before` lists, each once
        self._guard_positions: dict[tuple[Any, ...], int] = {}
        self._statement_node: cst.CSTNode | None = None
        self._nested = 0  # functions, classes and lambdas entered inside the statement
        # Per module-level function or method (`"Class.name"`): it names CUDA itself (`"cuda"`,
        # `.cuda`), and the names it uses.
        self._outer: cst.FunctionDef | None = None
        self._outer_name = ""
        self.cuda_text: set[str] = set()
        self.names_used: dict[str, set[str]] = {}

    def enter(self, node: cst.CSTNode) -> None:
        self.requirements.index_enter(node)
        self._ancestors.append(node)
        key = self._statements.get(id(node))
        if key is not None:
            self._statement, self._statement_node, self._nested = key, node, 0
        # Exact types (LibCST's node classes are final): isinstance on its ABCs is slow.
        kind = type(node)
        if kind is cst.FunctionDef and self._outer is None and self._outer_scope():
            self._outer = node  # type: ignore[assignment]
            name = node.name.value  # type: ignore[attr-defined]
            owner = self.scope.node
            self._outer_name = f"{owner.name.value}.{name}" if type(owner) is cst.ClassDef else name
        elif self._outer is not None:
            self._note_cuda(node, kind)
        if kind is cst.Call:
            self._call(node)  # type: ignore[arg-type]
            return
        if kind in _SCOPES and self._statement is not None:
            self._nested += 1
        if kind is cst.Return:
            self.returned.note(node, self.scope)  # type: ignore[arg-type]
        if kind is cst.Return and self._statement is not None and not self._nested:
            self.returns.add(self._statement)
        elif kind is cst.Yield and self._statement is not None and not self._nested:
            self.generators.add(self._statement[0])
        elif kind is cst.FunctionDef or kind is cst.Lambda:
            self.scope = Scope(node, "function" if kind is cst.FunctionDef else "lambda", self.scope)
            collect_function_bindings(self.scope, node)  # type: ignore[arg-type]
        elif kind is cst.ClassDef:
            module = self.scope if self.scope.parent is None else None
            if module is not None:
                self.dataset_classes.note(node, module)  # type: ignore[arg-type]
            self.scope = Scope(node, "class", self.scope)
            collect_bindings(self.scope, block_statements(node.body))  # type: ignore[attr-defined]
            if module is not None:
                name = node.name.value  # type: ignore[attr-defined]
                self.classes[name] = class_entry(node, module, self.scope)  # type: ignore[arg-type]
                handed_out = item_parameters(node)  # type: ignore[arg-type]
                if handed_out:
                    self.dataset_items[name] = [list(parameter) for parameter in handed_out]
        elif kind in _COMPREHENSIONS:
            self.scope = Scope(node, "comprehension", self.scope)
            collect_comprehension_bindings(self.scope, node)  # type: ignore[arg-type]
        elif kind is cst.Name or kind is cst.Attribute:
            self.constructors.value(node, self._ancestors, self.scope)  # type: ignore[arg-type]

    def _outer_scope(self) -> bool:
        """The module, or the body of a module-level class."""
        parent = self.scope.parent
        return parent is None or (self.scope.kind == "class" and parent.parent is None)

    def gated(self, calls: dict[str, list[cst.Call]]) -> tuple[list[str], dict[str, list[list[int]]]]:
        """The callee texts whose every call runs only where CUDA is in the file's own eyes; and, for the
        others whose every call comes after project calls that would stop the program first if they
        gate, those calls, one list per call (whether they gate is the project's fact: `cuda_callers`).
        A text some of whose calls are gated here and the others only by such calls counts as neither:
        judging every call here cost a cold check about 1 % more (`benchmarks.md`, session 24)."""
        gated, guarded = [], {}
        for text, nodes in calls.items():
            if all(map(self.requirements.requires_cuda, nodes)):
                gated.append(text)
                continue
            guards = []
            for node in nodes:
                guards.append(self._calls_before(node))
                if not guards[-1]:
                    break
            else:
                guarded[text] = guards
        return sorted(gated), guarded

    def _calls_before(self, call: cst.Call) -> list[int]:
        """The project calls made before `call` whatever happens: those of the simple statements its
        function runs before the statement holding it; in a method, also its class's `__init__` (an
        instance exists only once it ran), unless the method is static, a class method or named there."""
        position = self._positions.get(id(call))
        if position is None:
            return []
        if position not in self._before:
            self._before[position] = self._calls_before_statement(*position)
        return self._before[position]

    def _calls_before_statement(self, qualname: str, index: int) -> list[int]:
        earlier = [reference for at in range(index) for reference in self.calls.get((qualname, at), ())]
        owner, _, name = qualname.rpartition(".")
        function = self._functions[qualname]
        if (
            owner
            and name != "__init__"
            and name not in self.names_used.get(f"{owner}.__init__", ())
            and not any(
                dotted_name(d.decorator) in ("staticmethod", "classmethod") for d in function.decorators
            )
        ):
            earlier.append(["here", f"{owner}.__init__"])
        return sorted({self._guard_position(reference) for reference in earlier})

    def _guard_position(self, reference: Reference) -> int:
        key = tuple(reference)
        if key not in self._guard_positions:
            self._guard_positions[key] = len(self.guard_calls)
            self.guard_calls.append(reference)
        return self._guard_positions[key]

    def _note_cuda(self, node: cst.CSTNode, kind: type) -> None:
        name = self._outer_name
        if kind is cst.Name:
            self.names_used.setdefault(name, set()).add(node.value)  # type: ignore[attr-defined]
            if node.value == "cuda":  # type: ignore[attr-defined]
                self.cuda_text.add(name)
        elif (kind is cst.SimpleString or kind is cst.FormattedStringText) and "cuda" in node.value:  # type: ignore[attr-defined]
            self.cuda_text.add(name)

    def cuda_reach(self) -> list[str]:
        """The module-level functions and methods that name CUDA, or use a name of one that does
        (`self.helper` uses every `helper` of the file)."""
        reach = set(self.cuda_text)
        reached = {name.rsplit(".", 1)[-1] for name in reach}
        changed = True
        while changed:
            changed = False
            for name, used in self.names_used.items():
                if name not in reach and used & reached:
                    reach.add(name)
                    reached.add(name.rsplit(".", 1)[-1])
                    changed = True
        return sorted(reach)

    def leave(self, node: cst.CSTNode) -> None:
        if node is self._outer:
            self._outer = None
        self.requirements.index_leave(node)
        self._ancestors.pop()
        if type(node) in _SCOPES and self._statement is not None:
            self._nested -= 1
        if node is self._statement_node:
            self._statement = self._statement_node = None
        if node is self.scope.node and self.scope.parent is not None:
            self.scope = self.scope.parent

    def _call(self, node: cst.Call) -> None:
        self.saved_files.note(node, self.scope)
        if is_dataloader_call(node, self.scope):
            self._datasets_iterated(node)
        text = dotted_name(node.func)
        reference = reference_of(text, self.scope) if text is not None else None
        if reference is not None and reference[0] == "star" and not self.stars:
            reference = None
        self.constructors.call(node, self.scope, text, reference)
        if self._statement is not None and not self._nested:
            self._positions[id(node)] = self._statement
        if reference is None and type(node.func) is cst.Attribute:
            self.method_calls.setdefault(node.func.attr.value, []).append(node)
        if reference is None:
            self.parameters.call(node, self.scope, self._ancestors, None)
            return
        assert text is not None
        self.parameters.call(node, self.scope, self._ancestors, text)
        self.sites.append((text, reference))
        self.site_calls.setdefault(text, []).append(node)
        if self._statement is not None and isinstance(self._statement_node, cst.SimpleStatementLine):
            self.calls.setdefault(self._statement, []).append(reference)

    def _datasets_iterated(self, loader: cst.Call) -> None:
        dataset = dataset_argument(loader)
        for leaf in built_from(dataset, self.scope) if dataset is not None else ():
            text = dotted_name(leaf.func) if isinstance(leaf, cst.Call) else None
            reference = reference_of(text, self.scope) if text is not None else None
            if reference is not None and reference[0] == "module":
                self.dataset_calls.add(text)  # type: ignore[arg-type]


def reference_of(text: str, scope: Scope) -> Reference | None:
    """What the callee written `text` (`u.init`, `self._setup`) refers to from `scope`: an
    import, a function or method of this file, a name only an `import *` can bind; None for
    anything else (a local value, a parameter, a builtin)."""
    head, *rest = text.split(".")
    if head in ("self", "cls"):
        return _method_reference(scope, rest)
    found = scope.lookup(head)
    if found is None:
        if head in BUILTIN_NAMES or rest:
            return None
        return ["star", head]
    owner, bindings = found
    nodes = {id(binding.node) for binding in bindings}
    if len(nodes) != 1:
        return None
    node = bindings[0].node
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        return _import_reference(head, bindings, tuple(rest))
    if owner.kind == "module" and isinstance(node, cst.FunctionDef) and not rest:
        return ["here", head]
    if owner.kind == "module" and isinstance(node, cst.ClassDef) and len(rest) == 1:
        return ["here", f"{head}.{rest[0]}"]
    return None


def _method_reference(scope: Scope, rest: list[str]) -> Reference | None:
    """`self.setup` inside a method of class `C`: `C.setup` of this file (a base class defines it
    when `C` does not: `analysis/project/inheritance.py` finds which, once the project is read)."""
    function = scope
    while function.kind in ("comprehension", "lambda") and function.parent is not None:
        function = function.parent
    owner = function.parent
    if len(rest) != 1 or function.kind != "function" or owner is None or owner.kind != "class":
        return None
    if owner.parent is None or owner.parent.kind != "module":
        return None
    assert isinstance(owner.node, cst.ClassDef)
    return ["here", f"{owner.node.name.value}.{rest[0]}"]


def _import_reference(name: str, bindings: list[Any], rest: tuple[str, ...]) -> Reference | None:
    """The import path a name bound only by one import statement stands for, plus `rest`."""
    nodes = {id(binding.node) for binding in bindings}
    node = bindings[0].node if len(nodes) == 1 else None
    if isinstance(node, cst.Import):
        target = bindings[0].import_target
        return ["module", 0, ".".join((target, *rest))]
    if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return None
    module = dotted_name(node.module) if node.module is not None else ""
    for alias in node.names:
        local = alias.asname.name if alias.asname is not None else alias.name
        if isinstance(local, cst.Name) and local.value == name:
            imported = dotted_name(alias.name) or ""
            dotted = ".".join(part for part in (module, imported, *rest) if part)
            return ["module", len(node.relative), dotted]
    return None


def class_entry(node: cst.ClassDef, module: Scope, body: Scope) -> list[Any]:
    """A module-level class as `analysis/project/inheritance.py` reads it: `[bases, names]`, each base a
    reference (None when unknown; a class of the file is `["here", "Name"]`, `object` is left
    out), `names` what its body binds."""
    bases: list[Reference | None] = []
    for base in node.bases:
        if base.keyword is not None:
            continue  # metaclass=...
        value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
        text = None if base.star else dotted_name(value)
        if text == "object":
            continue
        found = module.lookup(text) if text is not None else None
        if (
            found is not None
            and found[0] is module
            and all(isinstance(b.node, cst.ClassDef) for b in found[1])
        ):
            bases.append(["here", text])
        else:
            bases.append(reference_of(text, module) if text is not None else None)
    return [bases, sorted(body.bindings)]


def _stars(module: cst.Module) -> list[list[Any]]:
    """`from x import *` at module level, as `[level, "x"]`."""
    found = []
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    name = dotted_name(small.module) if small.module is not None else ""
                    found.append([len(small.relative), name or ""])
    return found
