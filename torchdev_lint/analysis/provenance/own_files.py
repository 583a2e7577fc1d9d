"""Files a module writes itself, known by an identity that names one file (TDL102).

A `torch.load(..., weights_only=False)` of a file that the same module writes with `torch.save`
(a whole module, a config object: what needs full unpickling) reads the program's own output,
not a stranger's upload, where the path names the same file at both places. It does when it is:

- literal text, a constant of the file, or a path with a distinctive literal word, constant or
  configuration key (`saved_files.path_shape`, `saved_files.distinctive`): `"runs/whole_net.pt"`,
  `os.path.join(out, "ema_full.pt")`, `EMBED_CACHE`, `cfg.vocab_cache`;
- built from attributes of `self` only (`self.ckpt_file`, `self.root / "state.th"`), read and
  written by methods of one class: the object's own file.

A generic name never is: the `path` (`f`, `ckpt_path`, `filename`...) parameter of one function
and the `path` of another are two files, and `args.output` or `WEIGHTS_NAME` may name a download.
A file object opened on a path (`with open(p, "wb") as f: torch.save(x, f)`, an atomic-write helper
`with write_and_rename(p) as tmp:`) stands for that path at both ends. `OwnFiles` also knows the
in-memory round trips (`io.BytesIO`) of a class, or function, that serializes into such buffers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.provenance.checkpoint_loads import path_key
from torchdev_lint.analysis.provenance.checkpoint_saves import in_memory_buffer
from torchdev_lint.analysis.provenance.load_facts import local_key
from torchdev_lint.analysis.provenance.saved_files import distinctive, path_shape
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.syntax.walk import children

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# An identity: ("shape", local key) for a path naming one file anywhere in the module,
# ("self", id of the class, text) for a path of the object's own attributes.
Identity = tuple[str, int, str]


class OwnFiles:
    """The identities of the paths a module saves to, and its in-memory serializers, noted as the
    traversal passes; complete once the whole module has been traversed."""

    def __init__(self) -> None:
        self._saved: set[Identity] = set()
        self._buffer_users: set[int] = set()

    def note_save(self, path: cst.BaseExpression, ctx: FileContext) -> None:
        """A save to `path` at the node being visited."""
        if in_memory_buffer(path, ctx.scope):
            self._buffer_users.add(id(_serializer(ctx.scope)))
        found = identity(path, ctx.scope, ctx.ancestors)
        if found is not None:
            self._saved.add(found)

    def reads_own_file(self, path: cst.BaseExpression, scope: Scope, found: Identity | None) -> bool:
        """Does a load of `path` in `scope`, whose `identity` is `found`, read a file the module
        saves to, or an in-memory buffer of a class (function) that serializes into buffers?"""
        if id(_serializer(scope)) in self._buffer_users and in_memory_buffer(path, scope):
            return True
        return found is not None and found in self._saved


def identity(path: cst.BaseExpression, scope: Scope, ancestors: Sequence[cst.CSTNode]) -> Identity | None:
    """What names the file at `path` (see the module doc), or None where it is no particular file."""
    path = _opened_path(path, ancestors) or path
    klass = scope.enclosing_class
    if klass is not None and _of_self(path):
        return ("self", id(klass.node), path_key(path))
    shape = path_shape(path, scope)
    literal = bool(shape) and all(isinstance(part, str) or _own_constant(part) for part in shape)
    return ("shape", 0, local_key(shape)) if literal or distinctive(shape) else None


def _own_constant(part: object) -> bool:
    """A reference to a name the file itself binds at module level (`["ref", text, ["here", text]]`)."""
    return isinstance(part, list) and part[0] == "ref" and isinstance(part[2], list) and part[2][0] == "here"


def _of_self(path: cst.BaseExpression) -> bool:
    """Built from attributes of `self` (and literals, calls of names): no other local name is read."""
    found = False
    stack: list[cst.CSTNode] = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute):
            root: cst.BaseExpression = node
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name) and root.value == "self":
                found = True
                continue
        elif isinstance(node, cst.Name):
            return False
        elif isinstance(node, cst.Call):
            stack.extend(arg.value for arg in node.args)
            continue
        stack.extend(children(node))
    return found


def _opened_path(path: cst.BaseExpression, ancestors: Sequence[cst.CSTNode]) -> cst.BaseExpression | None:
    """The path a `with opener(p, ...) as f:` around the call opened, where `path` is `f`."""
    if not isinstance(path, cst.Name):
        return None
    for node in reversed(ancestors):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        if not isinstance(node, cst.With):
            continue
        for item in node.items:
            target = item.asname.name if item.asname is not None else None
            if isinstance(target, cst.Name) and target.value == path.value:
                opener = item.item
                if not isinstance(opener, cst.Call):
                    return None
                given = [arg for arg in opener.args if arg.keyword is None]
                return given[0].value if given and not given[0].star else None
    return None


def _serializer(scope: Scope) -> cst.CSTNode:
    """The innermost class around `scope`, else its function (or module)."""
    klass = scope.enclosing_class
    return klass.node if klass is not None else scope.owner.node
