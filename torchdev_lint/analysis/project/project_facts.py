"""Project facts: pass 1 over the checked files, to a fixed point, and what each check receives.

Facts that cross files: which functions stop the program where CUDA is missing
(`utils.init_distributed_mode()` exits, raises or asserts without CUDA, or joins
an NCCL process group), so that TDL301/TDL311 stay silent after a call of one;
and what functions do with their parameters (`analysis/project/parameter_facts.py`:
store them in a checkpoint, move a loader's batches, receive pinned loaders).
Pass 1 parses only the files that can matter: those whose text could hold a gate
of their own, build a loader or save a checkpoint, then, round by round, those
naming a function already known to gate or to use a parameter so (a caller, or a
package `__init__` re-exporting it) and the modules loaders are passed to.
Summaries are cached on disk by content (`analysis/project/summary_cache.py`), so a warm run
parses nothing, and this module imports LibCST only on a miss.

A file's check receives `FileFacts`: the callees it names that gate or use their
parameters so, and its own loader parameters every call passes pinned. Their
digest is what the file's cache key adds, so an edit elsewhere that leaves those
facts alone re-checks nothing, and one that changes them re-checks exactly the
files they concern. Unknown (third-party, unparsable, ambiguous) never gates nor
yields a finding: without facts a file is checked as it is on its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple

from torchdev_lint.analysis.context.cuda_callers import (
    Gated,
    MethodDefiners,
    cuda_callee,
    cuda_callers,
    file_callers,
    gated_calls,
)
from torchdev_lint.analysis.project import constructor_facts, summary_cache
from torchdev_lint.analysis.project.context_facts import ContextFacts
from torchdev_lint.analysis.project.file_facts import FileFacts, ProjectFacts
from torchdev_lint.analysis.project.index import ProjectIndex
from torchdev_lint.analysis.project.inheritance import Inheritance
from torchdev_lint.analysis.project.parameter_facts import (
    Handed,
    Moving,
    Pinned,
    handed,
    moving_parameters,
    pinned_parameters,
)
from torchdev_lint.analysis.project.pass_one_text import imports, may_place, may_test_group, wants_summary
from torchdev_lint.analysis.project.references import MAX_ALIASES, References, Target
from torchdev_lint.analysis.provenance import load_facts
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.files import read_source

Summary = summary_cache.Summary
Parse = Callable[[str, bytes], Any]


def project_facts(
    paths: Iterable[str],
    parse: Parse,
    cache_directory: str | None = None,
    summaries: Mapping[str, Summary] | None = None,
    texts: Mapping[str, bytes] | None = None,
    keep_tree: Callable[[str], None] | None = None,
    inputs: PassInputs | None = None,
) -> ProjectFacts:
    """Pass 1 over `paths` (and the project files they lead to): the facts of each path.

    `parse(path, source)` returns a LibCST module or raises SourceError (the engine's parse,
    which refuses what would crash the parser). `summaries` (by absolute path) are files'
    summaries already made from a parse of their current text (the runner's checks make them
    from their own trees, see `needs_parse`): they are used instead of parsing again. `texts`
    (by absolute path) are files' texts to read instead of what the disk holds (fixes not
    written: `--diff`, the language server's buffers). `keep_tree(path)` is told, before `parse`
    is asked for it, of each checked file whose facts will say which imported classes are modules
    (known only at the end of the pass: a caller checking files from pass 1's trees keeps it).
    `inputs`, when given (empty), receives what the pass read (`analysis/project/facts_memo.py`).
    """
    given = {os.path.abspath(path): path for path in paths if path.endswith(".py")}
    analysis = _Pass(parse, cache_directory, set(given), summaries or {}, texts or {})
    analysis.keep_tree = keep_tree
    analysis.inputs = inputs
    for path in given:
        analysis.add(path)
    facts = analysis.run()
    if inputs is not None:
        inputs.probes.update(analysis.index.probes)
    return ProjectFacts({given[path]: found for path, found in facts.items() if path in given})


def project_pass(paths: Iterable[str], parse: Parse, cache_directory: str | None = None) -> ProjectPass:
    """Pass 1 over `paths`, kept so that a file's facts can be asked again with another summary
    of its own (the language server: an unsaved buffer's text), without reading the project."""
    analysis = _Pass(parse, cache_directory, {os.path.abspath(p) for p in paths if p.endswith(".py")}, {}, {})
    for path in sorted(analysis.checked):
        analysis.add(path)
    facts = analysis.run()
    analysis.unparsed.clear()  # the texts are not searched again
    return ProjectPass(analysis, facts)


class ProjectPass:
    """The outcome of pass 1 over a project, by absolute path."""

    def __init__(self, analysis: _Pass, facts: dict[str, FileFacts]) -> None:
        self._analysis = analysis
        self._facts = facts

    def of(self, path: str) -> FileFacts | None:
        """The facts of a checked file as saved."""
        return self._facts.get(os.path.abspath(path))

    def facts_with(self, path: str, summary: Summary) -> FileFacts | None:
        """The facts of checked file `path` if its summary were `summary`: the fixed point again
        over the summaries read (a file only the new text would lead to is not read)."""
        return self._analysis.facts_with(os.path.abspath(path), summary)


class PassInputs(NamedTuple):
    """What a pass read: the bytes of each file (None: it could not be read), whether each file
    pass 1 summarized got a summary (False: unreadable), the same of each file it read for its
    module classes alone (`classified`), and what the project index found at each path it asked
    about (`ProjectIndex.probes`). The answer depends on nothing else."""

    sources: dict[str, bytes | None]
    summarized: dict[str, bool]
    classified: dict[str, bool]
    probes: dict[str, int]

    @classmethod
    def empty(cls) -> PassInputs:
        return cls({}, {}, {}, {})


class _Pass:
    """Summaries of the files read so far, and the fixed point over them."""

    def __init__(
        self,
        parse: Parse,
        cache_directory: str | None,
        checked: set[str],
        known: Mapping[str, Summary],
        texts: Mapping[str, bytes],
    ) -> None:
        self.inputs: PassInputs | None = None  # kept only when asked for (`project_facts`)
        self.keep_tree: Callable[[str], None] | None = None  # see `project_facts`
        self.checked = checked
        self.known = known
        self.texts = texts  # read instead of the disk (`project_facts`)
        self.index = ProjectIndex()
        self.parse = parse
        self.cache_directory = cache_directory
        self.summaries: dict[str, Summary] = {}
        self.classified: dict[str, dict[str, bool]] = {}  # module classes of files not summarized
        self.unparsed: dict[str, bytes] = {}  # checked, no summary yet (no gate text of its own)
        self.seen: set[str] = set()
        self.wanted: set[str] = set()  # unsummarized modules a reference to a gating name led to
        self.inheritance = Inheritance(self.summaries, self.index.locate, self.wanted)
        self.names: set[str] = set()  # the names callers of gating (or parameter-fact) functions write
        # Those, and the names of the callees loaders are passed to: a module defining or
        # re-exporting one is wanted (`References`), but a file that merely names a callee is not.
        self.followed: set[str] = set()
        self.needles: set[bytes] = set()  # text of host-saved paths (load_facts.needles)
        self.unreadable: list[bytes] = []  # files that could not be parsed: who knows what they call
        self._method_definers = MethodDefiners()
        self.context = ContextFacts(checked)
        self.references = References(self.summaries, self.index, self.inheritance, self.followed, self.wanted)
        self._target = self.references.target
        # Other files are read only inside the checked files' projects (see ProjectIndex.scope):
        # checking part of an installed package must not read the rest of it.
        self.scopes = {self.index.scope(path) for path in checked}

    def add(self, path: str) -> None:
        """A file: parsed now when its text could hold a gate, else kept for later rounds; the
        project modules it imports that are not checked are added too (`check train.py` alone
        must still see the gate in `utils.py`; a whole checked project adds none)."""
        work = [path]
        while work:
            current = work.pop()
            source = self._read(current)
            if source is None:
                continue
            named = imports(source)
            self.context.note_text(current, source, named)
            # Files that may place a module (the device flow) or save one (TDL103/TDL105) learn
            # which classes they import from project modules are modules.
            places = current in self.checked and (may_place(source) or b"torch.save" in source)
            for level, dotted, top in named:
                located = self.index.locate(current, level, dotted)
                if located is not None and located.file is not None and located.file != current:
                    self.context.note_import(current, located.file, top, located.attributes)
                    if places:
                        self.context.note_class_import(current, source, level, dotted, located)
                if located is not None and located.file is not None and located.file not in self.checked:
                    work.append(located.file)
            if current in self.context.class_imports and self.keep_tree is not None:
                self.keep_tree(current)  # known before it is parsed
            if wants_summary(source):
                self._summarize(current, source)
            else:
                self.unparsed[current] = source

    def run(self) -> dict[str, FileFacts]:
        """Rounds until no file is left that could name a gating function: the files whose
        text names one, and the modules a reference to one leads to (a re-exporting package)."""
        while True:
            gating = self._fixed_point()
            moving = moving_parameters(self.summaries, self._target)
            known = gating | self._parameter_functions(moving)
            known |= constructor_facts.classes(self.summaries)  # read the files naming them
            # A caller in another file names the function, or the class of a method (or a subclass).
            names = {qualname.split(".", 1)[0] for _, qualname in known} | self._aliases(known)
            names |= self.inheritance.subclass_names({(p, q.split(".")[0]) for p, q in known if "." in q})
            names |= load_facts.wanted_names(self.summaries, self.references.canonical)
            gated = self._gated_calls(gating)
            callers = cuda_callers(self.summaries, self.checked, self._target, self.unreadable, gated)
            names |= {
                name.rsplit(".", 1)[-1] for (_, name), all_gated in callers.items() if all_gated
            }  # others?
            names |= {  # callees of checked files that reach CUDA: `check_version` would read every file
                text.rsplit(".", 1)[-1]
                for path, summary in list(self.summaries.items())
                for text in gated[path][0]
                if cuda_callee(
                    path, summary["sites"].get(text), self.summaries, self.checked, self.index, self.wanted
                )
            }
            fresh = names - self.names
            self.names |= names
            self.followed |= names | self._loader_callees()
            self._forget()
            pinned, collated = self._pinned(moving)
            facts = {
                path: self._facts(
                    path, gating, moving, pinned.get(path, frozenset()), collated.get(path, frozenset())
                )._replace(cuda_callers=file_callers(callers, path))
                for path in self.summaries
                if path in self.checked
            }
            facts = self._with_load_facts(facts)
            facts = constructor_facts.with_defaults(
                facts, self.summaries, self._target, self.unreadable, self.index
            )
            facts = self.context.with_facts(facts, self.summaries, self.unreadable, self._summarize_module)
            new = [path for path in self.wanted if path not in self.summaries]
            new += self._loading(load_facts.needles(self.summaries))
            new += self._method_definers(self.summaries, self.unparsed)
            if fresh:
                needles = [name.encode() for name in sorted(fresh)]
                named = re.compile(rb"\b(?:%s)\b" % b"|".join(map(re.escape, needles)))
                # `in` first: a fast scan where the alternation is a slow one, and few files match.
                new += [
                    path
                    for path, source in self.unparsed.items()
                    if any(needle in source for needle in needles) and named.search(source)
                ]
            self.wanted.clear()
            progressed = False
            for path in dict.fromkeys(new):
                source = self.unparsed.pop(path, None)
                if source is None:
                    source = self._read(path)
                if source is not None:
                    self._summarize(path, source)
                    progressed = progressed or path in self.summaries
            if not progressed:
                facts = self.context.with_module_classes(facts, self._module_classes)
                return {path: found for path, found in facts.items() if any(found)}

    def facts_with(self, path: str, summary: Summary) -> FileFacts | None:
        """`ProjectPass.facts_with`: one more evaluation, the file's summary replaced meanwhile."""
        if path not in self.checked:
            return None
        saved = self.summaries.get(path)
        self.summaries[path] = summary
        try:
            self._forget()
            gating = self._fixed_point()
            moving = moving_parameters(self.summaries, self._target)
            pinned_all, collated_all = self._pinned(moving)
            gated = self._gated_calls(gating)
            callers = cuda_callers(self.summaries, self.checked, self._target, self.unreadable, gated)
            found = self._facts(
                path,
                gating,
                moving,
                pinned_all.get(path, frozenset()),
                collated_all.get(path, frozenset()),
            )._replace(cuda_callers=file_callers(callers, path))
            found = self._with_load_facts({path: found})[path]
            found = constructor_facts.with_defaults(
                {path: found}, self.summaries, self._target, self.unreadable, self.index
            )[path]
            with_context = self.context.with_facts(
                {path: found}, self.summaries, self.unreadable, self._summarize_module, only=path
            )
            found = self.context.with_module_classes(with_context, self._module_classes, only=path)[path]
        finally:
            if saved is None:
                del self.summaries[path]
            else:
                self.summaries[path] = saved
            self._forget()
        return found if any(found) else None

    def _module_classes(self, path: str) -> Mapping[str, bool]:
        """The nn.Module classes project module `path` defines: from its summary, else read for
        them alone (a file other files only construct classes of needs no summary's walk)."""
        summary = self.summaries.get(path)
        if summary is not None:
            return summary["module_classes"]
        if path not in self.classified:
            source = self.unparsed.get(path) or self._read(path)
            found = None
            if source is not None:
                folder, load = summary_cache.CLASSES_FOLDER, summary_cache.load_classes
                found = summary_cache.cached(source, self.cache_directory, folder, load, self._classes, path)
                if self.inputs is not None:
                    self.inputs.classified[path] = found is not None
            self.classified[path] = found or {}
        return self.classified[path]

    def _summarize_module(self, path: str) -> None:
        """Summarize a project module now if it has not been and its text may say something."""
        if path not in self.summaries:
            source = self.unparsed.get(path) or self._read(path)
            if source is not None and may_test_group(source):
                self.unparsed.pop(path, None)
                self._summarize(path, source)

    def _read(self, path: str) -> bytes | None:
        """The bytes of a file not read before (None when seen already, unreadable or outside
        the checked files' projects)."""
        if path in self.seen:
            return None
        self.seen.add(path)
        if path not in self.checked and not self._in_scope(path):
            return None
        source: bytes | None = self.texts.get(path)
        if source is None:
            try:
                source = read_source(path)
            except SourceError:
                source = None
        if self.inputs is not None:
            self.inputs.sources[path] = source
        return source

    def _in_scope(self, path: str) -> bool:
        folder = os.path.dirname(path)
        while folder not in self.scopes:
            parent = os.path.dirname(folder)
            if parent == folder:
                return False
            folder = parent
        return True

    def _fixed_point(self) -> set[Target]:
        """Every function known to gate: its own gate, or a gating callee called before it returns.
        Starts from none, so recursion alone proves nothing."""
        self._forget()
        gating: set[Target] = set()
        changed = True
        while changed:
            changed = False
            for path, summary in self.summaries.items():
                for qualname, function in summary["functions"].items():
                    if (path, qualname) in gating:
                        continue
                    if function["then"] == "gate" or any(
                        self.references.gates(path, reference, gating) for reference in function["calls"]
                    ):
                        gating.add((path, qualname))
                        changed = True
        return gating

    def _gated_calls(self, gating: set[Target]) -> dict[str, Gated]:
        gates = partial(self.references.gates, gating=gating)
        return {path: gated_calls(path, summary, gates) for path, summary in self.summaries.items()}

    def _forget(self) -> None:
        """The summaries changed (or may have): resolutions made from them are stale."""
        self.references.forget()
        self.inheritance.forget()

    def _aliases(self, known: set[Target]) -> set[str]:
        """Names a module re-exports a known function under (`from .dist import init as setup`)."""
        return {
            name
            for path, summary in self.summaries.items()
            for name, reference in summary["aliases"].items()
            if self._target(path, reference) in known
        }

    def _parameter_functions(self, moving: Moving) -> set[Target]:
        """Functions that store a parameter in a checkpoint or move a loader parameter's batches."""
        stored = {
            (path, qualname)
            for path, summary in self.summaries.items()
            for qualname in summary["checkpoints"]
        }
        return stored | moving.keys()

    def _pinned(self, moving: Moving) -> tuple[Pinned, Pinned]:
        """The loader parameters every call passes a pinned loader for, and a pinned loader
        collating by default for (`parameter_facts.pinned_parameters`)."""
        unseen = lambda target: self.inheritance.calls_unseen(target, self.unparsed.values())  # noqa: E731
        return pinned_parameters(self.summaries, self._target, self.unreadable, moving, unseen)

    def _loader_callees(self) -> set[str]:
        """The names of the project functions loaders are passed to, and of the dataset classes
        they iterate: their modules are wanted (where the batches go is in the callee, what the
        items are in the class). Their callers are not: a callee that moves the batches is a
        parameter function, whose callers are read as such."""
        names = set()
        for path, summary in self.summaries.items():
            passed = [entry[0] for entry in summary["loader_args"]]
            passed += [entry[0] for entries in summary["forwards"].values() for entry in entries]
            passed += summary["dataset_calls"]
            passed += summary["batch_calls"]  # helpers that may move the batches handed to them
            for text in passed:
                reference = summary["sites"].get(text)
                if reference is not None and reference[0] == "here":
                    self.inheritance.method(path, reference[1], want=True)  # a base class's module
                if reference is None or reference[0] != "module":
                    continue
                located = self.index.locate(path, reference[1], reference[2])
                if located is not None and located.file is not None and located.attributes:
                    names.add(located.attributes[0])
                    if located.file not in self.summaries:
                        self.wanted.add(located.file)
        return names

    def _facts(
        self,
        path: str,
        gating: set[Target],
        moving: Moving,
        pinned: frozenset[tuple[str, str]],
        collated: frozenset[tuple[str, str]],
    ) -> FileFacts:
        summary = self.summaries[path]
        checkpointing, batch_moving = handed(summary, lambda r: self._target(path, r), self.summaries, moving)
        gates = frozenset(
            text
            for text, reference in summary["sites"].items()
            if reference is not None and self.references.gates(path, reference, gating)
        )
        return FileFacts(
            gates,
            checkpointing,
            batch_moving,
            pinned,
            collated,
            item_passing=self._items(path),
            argument_moves=self._argument_moves(path),
        )

    def _items(self, path: str) -> frozenset[Handed]:
        """The dataset classes of other files this file constructs that hand out their
        constructor arguments' items (`FileFacts.item_passing`)."""
        found = set()
        for text, reference in self.summaries[path]["sites"].items():
            target = self._target(path, reference) if reference is not None else None
            callee = self.summaries.get(target[0]) if target is not None else None
            if target is not None and callee is not None and target[0] != path:
                for position, name in callee.get("dataset_items", {}).get(target[1], ()):
                    found.add((text, -1 if position is None else position, name))
        return frozenset(found)

    def _argument_moves(self, path: str) -> frozenset[tuple[str, int, str, int, str, str]]:
        """The module-level functions of other files this file hands a batch to that move (part of)
        the argument (`FileFacts.argument_moves`)."""
        found = set()
        summary = self.summaries[path]
        for text in summary["batch_calls"]:
            reference = summary["sites"].get(text)
            target = self._target(path, reference) if reference is not None else None
            callee = self.summaries.get(target[0]) if target is not None else None
            if target is not None and callee is not None and target[0] != path:
                for entry in callee["moved_arguments"].get(target[1], ()):
                    found.add((text, *entry))
        return frozenset(found)

    def _with_load_facts(self, facts: dict[str, FileFacts]) -> dict[str, FileFacts]:
        """TDL101's facts: loads of paths saved from host memory, bases that are Datasets,
        callees returning host data."""
        proof = load_facts.HostProof(self.summaries, self._target, self.references.canonical, self._library)
        host = load_facts.host_loads(self.summaries, self.checked, proof)
        datasets = load_facts.dataset_bases(self.summaries, self.checked, self._class)
        sites = load_facts.host_sites(self.summaries, self.checked, proof.returns_host)
        return {
            path: found._replace(
                host_saved=host.get(path, frozenset()),
                dataset_bases=datasets.get(path, frozenset()),
                host_returns=sites.get(path, frozenset()),
                external_modules=self._external_modules(path),
            )
            for path, found in facts.items()
        }

    def _external_modules(self, path: str) -> frozenset[tuple[str, str]]:
        """The names `path` imports at module level from a project package that re-exports a
        third-party module under them, among those its host conditions ask about (others
        would cost a parse of their package for nothing)."""
        summary = self.summaries[path]
        asked = load_facts.libraries_asked(summary)
        return frozenset(
            (name, library)
            for name, reference in summary["aliases"].items()
            if reference[0] == "module"
            and (library := asked.get((reference[1], reference[2]))) is not None
            and self._library(path, reference[1], reference[2]) == library
        )

    def _library(self, path: str, level: int, dotted: str, depth: int = 0) -> str | None:
        """The third-party module an import of `path` names (`import k2`: `k2`), also through a
        project package binding it at module level by `import k2` (`from . import k2`), whose
        module is summarized when it has not been; None for anything else."""
        located = self.index.locate(path, level, dotted)
        if located is None:
            return dotted if level == 0 else None
        if located.file is None or len(located.attributes) != 1 or depth > MAX_ALIASES:
            return None
        if located.file not in self.summaries:
            source = self.unparsed.pop(located.file, None) or self._read(located.file)
            if source is not None:
                self._summarize(located.file, source)
        alias = self.summaries.get(located.file, {}).get("aliases", {}).get(located.attributes[0])
        if alias is None or alias[0] != "module":
            return None
        return self._library(located.file, alias[1], alias[2], depth + 1)

    def _loading(self, needles: set[bytes]) -> list[str]:
        """Checked files not parsed yet whose text may load a path saved from host memory."""
        fresh, self.needles = needles - self.needles, self.needles | needles
        if not fresh:
            return []
        named = re.compile(b"|".join(re.escape(needle) for needle in sorted(fresh)))
        return [
            path
            for path, source in self.unparsed.items()
            if path in self.checked and b"load" in source and named.search(source)
        ]

    def _class(self, path: str, reference: list[Any], depth: int = 0) -> Target | None:
        """The project class a base reference names, through re-exports; the module holding it
        is summarized when it has not been."""
        if reference[0] == "here":
            return path, reference[1]
        located = self.index.locate(path, reference[1], reference[2])
        if located is None or located.file is None or len(located.attributes) != 1 or depth > MAX_ALIASES:
            return None
        if located.file not in self.summaries:
            source = self.unparsed.pop(located.file, None) or self._read(located.file)
            if source is not None:
                self._summarize(located.file, source)
        summary = self.summaries.get(located.file)
        name = located.attributes[0]
        if summary is None or name in summary["dataset_classes"]:
            return located.file, name
        alias = summary["aliases"].get(name)
        if alias is not None:
            return self._class(located.file, alias, depth + 1)
        for level, module in reversed(summary["stars"]):  # a package's `from .base import *`
            found = self._class(located.file, ["module", level, f"{module}.{name}".lstrip(".")], depth + 1)
            if found is not None and name in self.summaries.get(found[0], {}).get("dataset_classes", {}):
                return found
        return located.file, name

    # Summaries, parsed or cached -------------------------------------------

    def _summarize(self, path: str, source: bytes) -> None:
        folder, load = summary_cache.FOLDER, summary_cache.load
        summary = summary_cache.cached(source, self.cache_directory, folder, load, self._summary, path)
        if self.inputs is not None:
            self.inputs.summarized[path] = summary is not None
        if summary is None:
            self.unreadable.append(source)
        else:
            self.summaries[path] = summary

    def _summary(self, path: str, source: bytes) -> Summary:
        from torchdev_lint.analysis.project.summaries import summarize  # LibCST: only on a miss

        return self.known.get(path) or summarize(self.parse(path, source), path)

    def _classes(self, path: str, source: bytes) -> dict[str, bool]:
        from torchdev_lint.analysis.project.summaries import module_classes  # LibCST: only on a miss

        return module_classes(self.parse(path, source))
