"""The file's statement index (`units`): where each definition sits and which modules its imports
name, found without walking expressions; and the TDL313 questions answered from it."""

from __future__ import annotations

import textwrap

import libcst as cst

from torchdev_lint.analysis.syntax.units import definition_owners, imported_roots
from torchdev_lint.analysis.values.module_classes import built_only_for_export
from torchdev_lint.config import Settings
from torchdev_lint.engine import FileContext


def _context(source: str) -> FileContext:
    return FileContext("example.py", cst.parse_module(textwrap.dedent(source)), Settings())


def test_imported_roots_at_any_depth_absolute_only() -> None:
    ctx = _context(
        """
        import torch.nn as nn, os.path
        from pyro.primitives import param
        from . import yaml
        from .pkg import json
        if flag:
            from numpy import zeros
        try:
            import scipy.sparse
        except ImportError:
            import cupy
        class Model:
            def forward(self):
                import einops; x = 1
        match value:
            case 1:
                import h5py
        """
    )
    assert imported_roots(ctx) == {"torch", "os", "pyro", "numpy", "scipy", "cupy", "einops", "h5py"}


def test_definition_owners() -> None:
    ctx = _context(
        """
        class Outer:
            def method(self):
                def helper():
                    pass
        with ctx:
            def inside_with():
                pass
        """
    )
    owners = {
        node.name.value: owner.name.value if isinstance(owner, (cst.ClassDef, cst.FunctionDef)) else None
        for node, owner in definition_owners(ctx).items()
        if isinstance(node, (cst.ClassDef, cst.FunctionDef))
    }
    assert owners == {
        "Outer": None,
        "method": "Outer",
        "helper": "method",
        "inside_with": None,
    }


def test_built_only_for_export_counts_calls_in_outermost_export_functions() -> None:
    source = """
        class Wrapper:
            pass

        class Used:
            pass

        def export_onnx(model):
            def export_inner():
                return Wrapper()
            return export_inner(), Used()

        def train():
            return Used()
    """
    ctx = _context(source)
    assert built_only_for_export("Wrapper", ctx)
    assert not built_only_for_export("Used", ctx)  # also built for training
    assert not built_only_for_export("Missing", ctx)
    assert not built_only_for_export("Wrapper", _context("class Wrapper:\n    pass\n"))
