"""TDL102 unsafe-load-weights-only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.provenance.checkpoint_loads import (
    falls_back_after_safe_load,
    is_test_code,
    pickling_format,
)
from torchdev_lint.analysis.provenance.checkpoint_saves import SAVED_OBJECT, SavedFiles
from torchdev_lint.analysis.provenance.host_loads import temporary_of_object
from torchdev_lint.analysis.provenance.own_files import Identity, OwnFiles, identity
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, keyword, with_keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# The release in which `torch.load` started defaulting to `weights_only=True`.
SAFE_DEFAULT_SINCE = (2, 6)
# What may change where the fix is applied (the docs' "Fix safety").
_RISK = (
    "loading fails (`UnpicklingError`) if the file pickles objects other than tensors, plain values "
    "and containers of them (a whole module, a custom class), until it is re-saved as a state dict"
)


class UnsafeLoadWeightsOnly(Rule):
    code = "TDL102"
    name = "unsafe-load-weights-only"
    message = (
        "`torch.load` with `weights_only=False` unpickles arbitrary objects and can run code from the "
        "file; pass `weights_only=True` and load a state dict"
    )
    fix_availability = "sometimes"
    triggers = ("load",)
    docs = """
        ## What it does
        Flags `torch.load(..., weights_only=False)`. When the configured `target-torch-version`
        is below 2.6 it also flags `torch.load` calls that pass no `weights_only` at all, since
        before 2.6 the default was `False`. (Calls passing `**kwargs` are left alone, and so are
        loads in tests (`test_*.py`, `*_test.py`, `conftest.py`, or `test_*` functions of a
        module that imports pytest or unittest), which read back files they have just written,
        and loads of what the program itself has serialized: a path the same function
        has saved to, an in-memory `io.BytesIO` buffer read by the class (or function) that
        saves into such buffers, a `self.<attr>` file that the class's `__del__` removes and
        that the file writes for it (a method saves to `self.<attr>`, or a function saves to a
        path and passes that path to the class's constructor), or a file that the module saves
        to elsewhere under the same identity: the same literal path or constant of the file
        (`"runs/whole_net.pt"`, `GRAPH_SNAPSHOT`), a path with the same distinctive literal
        word, constant or configuration key (`os.path.join(out, "ema_full.pt")`,
        `cfg.vocab_cache`), or the same path of `self` attributes in one class (`self.resume_file`,
        written by one method and read by another); a file opened on a path
        (`with open(p, "wb") as f:`, `with atomic_write(p) as tmp:`) stands for the path.)
        A generic name is never the identity of a file: a save to the `path` (`f`, `filename`,
        `ckpt_path`, `checkpoint_path`, `fname`...) parameter of one function says nothing of a
        load of another function's `path`, nor does a generic file name
        (`os.path.join(d, "model.pt")`, `args.output`), which any other program may have written.
        A load in an `except` handler
        of a `try` whose body loads the same path expression with `weights_only=True` is left
        alone: the program tried the safe load first and falls back only when it failed (a
        fallback reading another path, or after a try that was not a safe load, is flagged).
        Files a DeepSpeed helper located (`get_optim_files(dir)`,
        `get_model_state_file(...)`) are left alone too: DeepSpeed pickles the client state and
        optimizer objects into them, so reading them needs `weights_only=False`.

        ## Why it matters
        `torch.load` reads a pickle. With `weights_only=False` the unpickler may import any
        module and call any function named in the file, so loading a checkpoint from an
        untrusted source (a downloaded model, a shared bucket, a user upload) executes
        arbitrary code on your machine with your permissions. `weights_only=True` restricts
        unpickling to tensors, primitive types and dicts/lists of them, which is all a state
        dict needs. PyTorch made it the default in 2.6; code that must also run on older
        releases has to say so explicitly. A file that the same module writes, named the same
        way where it is read, is the program's own output; one whole-module save to some
        `path` does not make every load of a `path` in the file one of those.

        ## Example
        ```python
        state = torch.load("model.pt", weights_only=False)
        ```

        ```python
        def export(net, path):
            torch.save(net, path)  # a whole module

        def restore(path):  # another `path`: any file at all
            return torch.load(path, weights_only=False)
        ```

        ## Use instead
        ```python
        state = torch.load("model.pt", map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        ```

        ```python
        def export(net, path):
            torch.save(net.state_dict(), path)

        def restore(net, path):
            net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        ```

        ## Fix safety
        Never safe: sets or adds `weights_only=True`. A checkpoint that contains whole modules,
        optimizers of custom classes, or other arbitrary objects then fails to load with an
        `UnpicklingError` until it is re-saved as a state dict (or its types are allow-listed
        with `torch.serialization.add_safe_globals`). No fix is offered when the call passes
        a `pickle_module` (with `weights_only=False` or without `weights_only`), which
        `weights_only=True` does not accept. The fix writes only `True`, valid wherever it lands.
        """
    invalid = (
        Invalid(
            """
            import torch
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
            """,
            lines=(2,),
            fixed="""
            import torch
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            """,
        ),
        # A file format written and read by module-level functions: the bytes read may come
        # from anyone's file.
        Invalid(
            """
            import io
            import torch

            def serialize_artifact(obj):
                buffer = io.BytesIO()
                torch.save(obj, buffer)
                return buffer.getvalue()

            def deserialize_artifact(data):
                return torch.load(io.BytesIO(data), weights_only=False)
            """,
            lines=(10,),
            fixed="""
            import io
            import torch

            def serialize_artifact(obj):
                buffer = io.BytesIO()
                torch.save(obj, buffer)
                return buffer.getvalue()

            def deserialize_artifact(data):
                return torch.load(io.BytesIO(data), weights_only=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import load
            a = torch.load(path, map_location="cpu")
            b = load(path, "cpu", weights_only=True)
            """,
            lines=(3,),
            fixed="""
            import torch
            from torch import load
            a = torch.load(path, map_location="cpu", weights_only=True)
            b = load(path, "cpu", weights_only=True)
            """,
            settings={"target_torch_version": "2.4"},
        ),
        Invalid(
            """
            import dill
            import torch
            obj = torch.load(path, "cpu", dill)
            """,
            lines=(3,),
            settings={"target_torch_version": "2.4"},
        ),
        Invalid(
            """
            import dill
            import torch
            obj = torch.load(path, map_location="cpu", pickle_module=dill, weights_only=False)
            """,
            lines=(3,),
        ),
        # Fallbacks that are no retry of a failed safe load: another file, or no safe load first.
        Invalid(
            """
            import pickle
            import torch

            def load_any(path, backup_path):
                try:
                    return torch.load(path, weights_only=True)
                except pickle.UnpicklingError:
                    return torch.load(backup_path, weights_only=False)

            def load_state(path):
                try:
                    return torch.load(path, weights_only=False)
                except RuntimeError:
                    return torch.load(path, map_location="cpu", weights_only=False)
            """,
            lines=(8, 12, 14),
            fixed="""
            import pickle
            import torch

            def load_any(path, backup_path):
                try:
                    return torch.load(path, weights_only=True)
                except pickle.UnpicklingError:
                    return torch.load(backup_path, weights_only=True)

            def load_state(path):
                try:
                    return torch.load(path, weights_only=True)
                except RuntimeError:
                    return torch.load(path, map_location="cpu", weights_only=True)
            """,
        ),
        # An object deleting a file that this file never writes: it came from elsewhere (here a
        # download), and so may a path merely stored on an object.
        Invalid(
            """
            import os
            import torch

            class Downloaded:
                def __init__(self, url):
                    self.path = download(url)

                def load(self):
                    return torch.load(self.path, weights_only=False)

                def __del__(self):
                    os.remove(self.path)

            class Reader:
                def __init__(self, path):
                    self.path = path

                def load(self):
                    return torch.load(self.path, weights_only=False)

            def write_graph(graph, path):
                torch.save(graph, path)
                return Reader(path)
            """,
            lines=(9, 19),
            fixed="""
            import os
            import torch

            class Downloaded:
                def __init__(self, url):
                    self.path = download(url)

                def load(self):
                    return torch.load(self.path, weights_only=True)

                def __del__(self):
                    os.remove(self.path)

            class Reader:
                def __init__(self, path):
                    self.path = path

                def load(self):
                    return torch.load(self.path, weights_only=True)

            def write_graph(graph, path):
                torch.save(graph, path)
                return Reader(path)
            """,
        ),
        # A generic name is no file's identity: one function's `path` or `f` (saved whole, from host
        # memory) is not another's; a generic file name may be anyone's; another class's attribute.
        Invalid(
            """
            import os
            import torch

            def export_whole(net, path, f):
                torch.save(net.cpu(), path)
                torch.save(net.cpu(), f)

            def import_whole(path, f):
                first = torch.load(path, map_location="cpu", weights_only=False)
                return first, torch.load(f, weights_only=False)

            def stash_encoder(encoder, out_dir):
                with open(os.path.join(out_dir, "net.pth"), "wb") as fh:
                    torch.save(encoder, fh)

            def fetch_encoder(src_dir):
                return torch.load(os.path.join(src_dir, "net.pth"), weights_only=False)

            class Publisher:
                def persist(self, package):
                    torch.save(package, self.ckpt_file)

            class Subscriber:
                def restore(self):
                    return torch.load(self.ckpt_file, weights_only=False)
            """,
            lines=(9, 10, 17, 25),
            fixed="""
            import os
            import torch

            def export_whole(net, path, f):
                torch.save(net.cpu(), path)
                torch.save(net.cpu(), f)

            def import_whole(path, f):
                first = torch.load(path, map_location="cpu", weights_only=True)
                return first, torch.load(f, weights_only=True)

            def stash_encoder(encoder, out_dir):
                with open(os.path.join(out_dir, "net.pth"), "wb") as fh:
                    torch.save(encoder, fh)

            def fetch_encoder(src_dir):
                return torch.load(os.path.join(src_dir, "net.pth"), weights_only=True)

            class Publisher:
                def persist(self, package):
                    torch.save(package, self.ckpt_file)

            class Subscriber:
                def restore(self):
                    return torch.load(self.ckpt_file, weights_only=True)
            """,
        ),
    )
    valid = (
        Valid(
            """
            import torch
            a = torch.load(path, map_location="cpu", weights_only=True)
            b = torch.load(path, map_location="cpu")
            """
        ),
        Valid(
            """
            import torch
            a = torch.load(path, map_location="cpu", weights_only=True)
            b = torch.load(path, **load_options)
            """,
            settings={"target_torch_version": "2.4"},
        ),
        Valid(
            """
            import pickle
            obj = pickle.load(f)
            """,
            settings={"target_torch_version": "2.4"},
        ),
        # The program reads back bytes it has just serialized itself: nothing untrusted.
        Valid(
            """
            import io
            import torch

            def roundtrip(model):
                b = io.BytesIO()
                torch.save(model, b)
                b.seek(0)
                return torch.load(b, weights_only=False)

            class Pickler:
                def reduce(self, obj):
                    buffer = io.BytesIO()
                    torch.save(obj, buffer)
                    return buffer.getvalue()

                def rebuild(self, data):
                    return torch.load(io.BytesIO(data), weights_only=False)
            """
        ),
        # The safe load of the same file was tried first; the fallback warns and unpickles fully.
        Valid(
            """
            import pickle
            import warnings
            import torch

            def torch_load(path, map_location=None):
                try:
                    with open(path, "rb") as f:
                        return torch.load(f, map_location, weights_only=True)
                except pickle.UnpicklingError as e:
                    if "add_safe_globals" not in str(e):
                        raise
                    warnings.warn("weights-only load failed: allow-list the types with add_safe_globals")
                    with open(path, "rb") as f:
                        return torch.load(f, map_location, weights_only=False)
            """
        ),
        # A temporary file of an object: the file writes it for the object, whose `__del__` removes it.
        Valid(
            """
            import os
            from dataclasses import dataclass

            import torch

            @dataclass
            class GraphBackendLoader:
                path: str

                def load(self):
                    return torch.load(self.path, weights_only=False)

                def __del__(self):
                    if os.path.exists(self.path):
                        os.remove(self.path)

            def create_backend(graph, path=""):
                torch.save(graph, path)
                return GraphBackendLoader(path)

            class Spill:
                def __init__(self, path):
                    self.path = path

                def spill(self, obj):
                    torch.save(obj, self.path)

                def restore(self):
                    return torch.load(self.path, weights_only=False)

                def __del__(self):
                    os.remove(self.path)
            """
        ),
        # DeepSpeed's own checkpoint files hold pickled client state: full unpickling is required.
        Valid(
            """
            import torch

            def to_fp32(checkpoint_dir, output_file):
                from deepspeed.utils.zero_to_fp32 import get_model_state_file, get_optim_files

                optim_files = get_optim_files(checkpoint_dir)
                optim_state = torch.load(optim_files[0], map_location="cpu", weights_only=False)
                stage = optim_state["optimizer_state_dict"]["zero_stage"]
                client_state = torch.load(
                    get_model_state_file(checkpoint_dir, stage), map_location="cpu", weights_only=False
                )
                torch.save(client_state, output_file)
            """
        ),
        # A unit test reads back the file it has just written: nothing untrusted is unpickled.
        Valid(
            """
            import pytest
            import torch

            def test_resume(tmp_path, trainer):
                trainer.save(tmp_path / "last.ckpt")
                ckpt = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)
                assert ckpt["epoch"] == 1
            """
        ),
        # Files the module itself writes, named the same way at both ends: a literal path, a
        # constant of the file, a distinctive file name or configuration key, the same `self`
        # attribute in one class (written through an atomic-write helper).
        Valid(
            """
            import os
            import torch

            GRAPH_SNAPSHOT = "snapshots/latest.pkl"

            def keep_full(net):
                torch.save(net, "exp/whole_net.pt")

            def reopen_full():
                return torch.load("exp/whole_net.pt", weights_only=False)

            def dump_graph(graph):
                torch.save(graph, GRAPH_SNAPSHOT)

            def undump_graph():
                return torch.load(GRAPH_SNAPSHOT, weights_only=False)

            def write_vocab(vocab, cfg):
                with open(cfg.vocab_cache, "wb") as fh:
                    torch.save(vocab, fh)

            def read_vocab(cfg):
                return torch.load(cfg.vocab_cache, weights_only=False)

            def stash_teacher(teacher, out):
                torch.save(teacher, os.path.join(out, "ema_teacher_full.pt"))

            def fetch_teacher(src):
                return torch.load(os.path.join(src, "ema_teacher_full.pt"), weights_only=False)

            class Experiment:
                def __init__(self, folder):
                    self.resume_file = folder / "resume.th"

                def _serialize(self, package):
                    with replace_atomically(self.resume_file) as tmp:
                        torch.save(package, tmp)

                def _restore(self):
                    return torch.load(self.resume_file, "cpu", weights_only=False)
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.saved = SavedFiles()
        self.own = OwnFiles()
        # Findings judged once the file is known: it may save the file later, serialize into
        # buffers after the load, or save the temporary file of an object that loads it. Each
        # with the identity of the file read (`own_files.identity`) and whether it is such a
        # temporary file.
        self.pending: list[tuple[cst.Call, Scope, str | None, Fix | None, Identity | None, bool]] = []

    def _pend(self, node: cst.Call, message: str | None = None, fix: Fix | None = None) -> None:
        path = argument(node, 0, "f")
        temporary = path is not None and temporary_of_object(path.value, self.ctx.ancestors)
        found = None if path is None else identity(path.value, self.ctx.scope, self.ctx.ancestors)
        self.pending.append((node, self.ctx.scope, message, fix, found, temporary))

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind != "module":
            return
        for call, load_scope, message, fix, found, temporary in self.pending:
            path = argument(call, 0, "f")
            if path is None or not (
                self.own.reads_own_file(path.value, load_scope, found)
                or (temporary and self.saved.written_for_object(path.value, load_scope))
            ):
                self.report(call, message, fix)
        self.pending = []

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        if name in SAVED_OBJECT:
            self.saved.note(node, name, self.ctx)
            path = argument(node, 1, "f")
            if path is not None:
                self.own.note_save(path.value, self.ctx)
            return
        if name != "torch.load":
            return
        path = argument(node, 0, "f")
        if is_test_code(self.ctx.path, self.ctx.ancestors, self.ctx.scope) or (
            path is not None and self.saved.written_here(path.value, self.ctx.scope)
        ):
            return  # the file just written by this test or function: nothing untrusted
        if path is not None and pickling_format(path.value, self.ctx.scope):
            return  # DeepSpeed's files pickle client state: `weights_only=False` is required there
        if falls_back_after_safe_load(node, self.ctx.ancestors, self.ctx.scope):
            return  # the safe load of the same file was tried first and failed
        given = keyword(node, "weights_only")
        # `weights_only=True` refuses an explicit `pickle_module`: no fix there.
        custom_pickle = argument(node, 2, "pickle_module") is not None
        if given is not None:
            if isinstance(given.value, cst.Name) and given.value.value == "False":
                fixed = node.with_changes(
                    args=[
                        arg.with_changes(value=cst.Name("True")) if arg is given else arg for arg in node.args
                    ]
                )
                fix = (
                    None if custom_pickle else Fix("unsafe", "Set `weights_only=True`", {node: fixed}, _RISK)
                )
                self._pend(node, fix=fix)
            return
        if self.ctx.settings.target_torch_version >= SAFE_DEFAULT_SINCE or has_star(node, "**"):
            return
        message = (
            "`torch.load` without `weights_only` unpickles arbitrary objects before PyTorch 2.6 and can run "
            "code from the file; pass `weights_only=True`"
        )
        if custom_pickle:
            self._pend(node, message=message)
            return
        fixed = with_keyword(node, "weights_only", cst.Name("True"))
        self._pend(node, message=message, fix=Fix("unsafe", "Add `weights_only=True`", {node: fixed}, _RISK))
