"""Context facts pass 1 gives whole files, read from the checked files' texts and imports and
from the summaries: every process group the project starts is NCCL's (`process_groups`), with
the group tests of the project modules a file imports (`group_helpers`;
`analysis/context/project_groups.py`), and other files import this module (`roles`;
`analysis/context/entry_points.py`). Each goes only to the files whose text could ask it, so a
change elsewhere re-checks those alone. No LibCST here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torchdev_lint.analysis.context.project_groups import nccl_program
from torchdev_lint.analysis.project.file_facts import IMPORTED, NCCL, FileFacts
from torchdev_lint.analysis.project.pass_one_text import may_test_group

_NCCL_ONLY = frozenset({NCCL})
_IMPORTED = frozenset({IMPORTED})
# Read a module's text and summarize it (pass 1's own reader), if it has not been.
Summarize = Callable[[str], None]


class ContextFacts:
    """What pass 1 noted of the checked files' texts and imports."""

    def __init__(self, checked: set[str]) -> None:
        self.checked = checked
        self.group_tests: set[str] = set()  # checked files whose text may test for a process group
        self.main_blocks: set[str] = set()  # checked files whose text may hold `if __name__ == "__main__":`
        self.imported: set[str] = set()  # files another file of the project imports
        self.group_imports: dict[str, set[str]] = {}  # of `group_tests`: the project modules each imports

    def note_text(self, path: str, source: bytes) -> None:
        if path in self.checked and may_test_group(source):
            self.group_tests.add(path)
        if path in self.checked and b"__main__" in source:
            self.main_blocks.add(path)

    def note_import(self, path: str, module: str) -> None:
        """`path` imports the project module `module` (another file)."""
        self.imported.add(module)
        if path in self.group_tests:
            self.group_imports.setdefault(path, set()).add(module)

    def with_facts(
        self,
        facts: dict[str, FileFacts],
        summaries: Mapping[str, dict[str, Any]],
        unreadable: list[bytes],
        summarize: Summarize,
        only: str | None = None,
    ) -> dict[str, FileFacts]:
        """`facts` (of every checked file, or of `only`) with the context facts added."""
        found = dict(facts)
        paths = self.checked if only is None else {only}
        if nccl_program(summaries.values(), unreadable):
            for path in paths & self.group_tests:
                helpers = self._group_helpers(path, summaries, summarize)
                found[path] = found.get(path, FileFacts())._replace(
                    process_groups=_NCCL_ONLY, group_helpers=helpers
                )
        for path in paths & self.main_blocks & self.imported:
            found[path] = found.get(path, FileFacts())._replace(roles=_IMPORTED)
        return found

    def _group_helpers(
        self, path: str, summaries: Mapping[str, dict[str, Any]], summarize: Summarize
    ) -> frozenset[tuple[str, bool]]:
        """(name, is a size) of the group tests defined by the project modules `path` imports."""
        found: set[tuple[str, bool]] = set()
        for module in sorted(self.group_imports.get(path, ())):
            summarize(module)
            found.update((name, sizes) for name, sizes in summaries.get(module, {}).get("group_helpers", ()))
        return frozenset(found)
