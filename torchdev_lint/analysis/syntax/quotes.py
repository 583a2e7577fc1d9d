"""Which quote character a string literal written by a fix may use at a given place.

Before Python 3.12 an f-string's replacement field may not contain the
f-string's own quote character: `f"{torch.load('x', map_location="cpu")}"` is a
SyntaxError on 3.10 and 3.11. Elsewhere a fix follows the file's prevailing
quote style, so that `ruff format`/black-formatted files stay as they were.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.syntax.walk import children

_QUOTES = ('"', "'")


class QuoteStyle:
    """Computed lazily for one module, and only when a fix writes a string."""

    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._preferred: str | None = None
        # id of each node inside an f-string's replacement field -> quote characters it may not use.
        self._forbidden: dict[int, frozenset[str]] | None = None

    def literal(self, value: str, at: cst.CSTNode) -> cst.SimpleString | None:
        """A literal for `value` legal where `at` stands, or None when no quote character is."""
        if self._forbidden is None:
            self._scan()
        assert self._forbidden is not None and self._preferred is not None
        forbidden = self._forbidden.get(id(at), frozenset())
        choices = [self._preferred, *(q for q in _QUOTES if q != self._preferred)]
        for quote in choices:
            if quote not in forbidden and quote not in value and "\\" not in value:
                return cst.SimpleString(f"{quote}{value}{quote}")
        return None

    def _scan(self) -> None:
        # One pass of the walker's child lists, no callbacks: this runs on a whole module.
        # Outside f-strings (nearly every node) a node is pushed alone; an f-string's
        # subtree is scanned with the quote characters around it, in `_scan_inside`.
        counts = dict.fromkeys(_QUOTES, 0)
        forbidden: dict[int, frozenset[str]] = {}
        stack: list[cst.CSTNode] = [self._module]
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            if type(node) is cst.SimpleString:
                counts[node.quote[0]] += 1
            elif type(node) is cst.FormattedString:
                _scan_inside(node, counts, forbidden)
            else:
                extend(children(node))
        self._preferred = "'" if counts["'"] > counts['"'] else '"'
        self._forbidden = forbidden


def _scan_inside(
    fstring: cst.FormattedString, counts: dict[str, int], forbidden: dict[int, frozenset[str]]
) -> None:
    """Count the literals of an f-string's subtree and record, for each of its nodes, the quote
    characters of the f-strings around it (its own included)."""
    stack: list[tuple[cst.CSTNode, frozenset[str]]] = [(fstring, frozenset())]
    while stack:
        node, enclosing = stack.pop()
        if type(node) is cst.SimpleString:
            counts[node.quote[0]] += 1
        elif type(node) is cst.FormattedString:
            enclosing = enclosing | {node.start[-1]}
        forbidden[id(node)] = enclosing
        stack.extend((child, enclosing) for child in children(node))
