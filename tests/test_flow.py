"""The device-flow analysis (`analysis/values/flow.py`): each source of facts, each control-flow rule,
and the four rules built on it, with must-flag and must-not-flag cases."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdev_lint.analysis.knowledge.devices import CPU, Device, conflicting
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.flow_values import Kind, Value, join
from torchdev_lint.config import Settings
from torchdev_lint.engine import check_module, check_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import Rule, rules_by_code


class _Probe(Rule):
    """Collects, per analysed unit, the value of every expression by its source text."""

    code = "TDL999"
    name = "probe"
    message = "probe"
    docs = ""
    seen: list[tuple[str, Value | None]] = []

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._collect(node)

    def leave_Module(self, node: cst.Module) -> None:
        self._collect(node)

    def _collect(self, unit: flow.Unit) -> None:
        for expr, value in flow.analyse(unit, self.ctx).values.items():
            _Probe.seen.append((self.ctx.code_for(expr).strip(), value))


def value(code: str, expr: str) -> Value | None:
    """The value of the last evaluation of the expression spelled `expr` in `code`."""
    _Probe.seen = []
    check_module("t.py", cst.parse_module(textwrap.dedent(code)), [_Probe], Settings())
    found = [v for text, v in _Probe.seen if text == expr]
    assert found, f"{expr!r} was not evaluated"
    return found[-1]


def device(code: str, expr: str) -> str | None:
    """The device of `expr` as text: "cpu", "cuda", "cuda:1", "runtime", or None (unknown)."""
    found = value(code, expr)
    if found is None or found.device is None:
        return None
    if found.device.type is None:
        return "runtime"
    return found.device.literal()


def kind(code: str, expr: str) -> str | None:
    found = value(code, expr)
    return None if found is None else found.kind.value


def codes(code: str, *select: str) -> list[tuple[str, int]]:
    rules = [rules_by_code()[c] for c in select or ("TDL302", "TDL303", "TDL306", "TDL310")]
    result = check_source("t.py", textwrap.dedent(code).encode(), rules, Settings(), skip_filter=False)
    return [(d.code, d.line) for d in result.diagnostics]


# ---------------------------------------------------------------------------
# Values and joins


def test_device_conflicts() -> None:
    runtime = Device(None, origin=cst.Name("x"))
    assert conflicting(CPU, Device("cuda"))
    assert conflicting(Device("cuda", 0), Device("cuda", 1))
    assert not conflicting(Device("cuda"), Device("cuda", 1))
    assert conflicting(runtime, CPU)
    assert not conflicting(runtime, Device("cuda"))
    assert not conflicting(runtime, Device(None, origin=cst.Name("y")))
    assert not conflicting(CPU, Device("meta"))


def test_join_keeps_agreeing_fields_only() -> None:
    cuda = Value(Kind.TENSOR, Device("cuda"), nonscalar=True)
    cpu = Value(Kind.TENSOR, CPU, nonscalar=True)
    assert join(cuda, cuda) == cuda
    assert join(cuda, cpu) == Value(Kind.TENSOR, None, nonscalar=True)
    assert join(cuda, Value(Kind.MODULE)) is None
    assert join(cuda, None) is None


# ---------------------------------------------------------------------------
# Sources


def test_factories_with_and_without_device() -> None:
    code = """
    import torch
    def f(dev):
        a = torch.randn(3, 4)
        b = torch.zeros(3, device="cuda")
        c = torch.ones(3, device="cuda:1")
        d = torch.empty(3, device=dev)
        e = torch.zeros_like(b)
        g = torch.from_numpy(arr)
        h = b.new_zeros(5)
        return a, b, c, d, e, g, h
    """
    assert [device(code, n) for n in "abcdegh"] == ["cpu", "cuda", "cuda:1", None, "cuda", "cpu", "cuda"]
    assert kind(code, "a") == "tensor" and value(code, "a").nonscalar  # type: ignore[union-attr]


def test_default_device_set_elsewhere_makes_factories_unknown() -> None:
    code = """
    import torch
    def f():
        with torch.device("cuda"):
            a = torch.randn(3)
        return a
    def g():
        return torch.randn(3)
    if __name__ == "__main__":
        torch.set_default_device("cuda")
    """
    assert device(code, "a") is None
    assert device(code, "torch.randn(3)") is None


def test_scalar_factories_are_not_proven_nonscalar() -> None:
    code = """
    import torch
    a = torch.tensor(1.5)
    b = torch.tensor([1.0, 2.0])
    c = torch.zeros(n)
    a, b, c
    """
    assert [value(code, n).nonscalar for n in "abc"] == [False, True, False]  # type: ignore[union-attr]


def test_moves() -> None:
    code = """
    import torch
    x = torch.randn(3, 3)
    a = x.to("cuda")
    b = x.cuda()
    c = a.cpu()
    d = x.to(torch.device("cuda", 1))
    e = a.to(torch.float16)
    f = x.to(a)
    g = x.cuda(2)
    h = x.to(0)
    i = a.to(a.device)
    a, b, c, d, e, f, g, h, i
    """
    assert [device(code, n) for n in "abcdefghi"] == [
        "cuda",
        "cuda",
        "cpu",
        "cuda:1",
        "cuda",
        "cuda",
        "cuda:2",
        "cuda:0",
        "cuda",
    ]


@pytest.mark.parametrize(
    "choice",
    [
        'torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        '"cuda" if torch.cuda.is_available() else "cpu"',
        'torch.device("cuda:0" if use_cuda else "cpu")',
    ],
)
def test_device_variable_chosen_by_availability(choice: str) -> None:
    code = f"""
    import torch
    def f(args):
        use_cuda = not args.no_cuda and torch.cuda.is_available()
        device = {choice}
        x = torch.randn(3).to(device)
        return x
    """
    assert device(code, "x") == "runtime"
    assert value(code, "x").device.name == "device"  # type: ignore[union-attr]


def test_device_chosen_by_a_flag_is_unknown() -> None:
    code = """
    import torch
    def f(args):
        device = torch.device("cuda" if args.cuda else "cpu")
        x = torch.randn(3).to(device)
        y = torch.randn(3).to(args.device)
        return x, y
    """
    assert device(code, "x") is None and device(code, "y") is None


def test_module_level_device_variable() -> None:
    code = """
    import torch
    DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    def f():
        x = torch.randn(3).to(DEVICE)
        return x
    """
    assert device(code, "x") == "runtime"


def test_module_construction_and_in_place_moves() -> None:
    code = """
    import torch
    import torchvision
    from torch import nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
    a = nn.Linear(3, 3)
    b = nn.CrossEntropyLoss()
    c = Net()
    d = torchvision.models.resnet18()
    e = nn.Linear(3, 3, device="cuda")
    c.cuda()
    t = torch.randn(3)
    t.cuda()
    a, b, c, d, e, t
    """
    assert [kind(code, n) for n in "abcdet"] == ["module"] * 5 + ["tensor"]
    assert [device(code, n) for n in "abcdet"] == ["cpu", "cpu", "cuda", "cpu", "cuda", "cpu"]
    assert [value(code, n).stateful for n in "abcde"] == [True, False, True, True, True]  # type: ignore[union-attr]


def test_module_evidence_from_module_only_methods() -> None:
    code = """
    import torch
    def f(path):
        model = torch.load(path)
        model.to("cuda")
        model.eval()
        return model
    """
    assert kind(code, "model") == "module" and device(code, "model") == "cuda"


def test_module_output_and_operations() -> None:
    code = """
    import torch
    from torch import nn
    model = nn.Linear(4, 2).cuda()
    criterion = nn.MSELoss().cuda()
    x = torch.randn(8, 4)
    out = model(x.cuda())
    loss = criterion(torch.randn(2), torch.randn(2))
    y = torch.relu(out) * 2 + 1
    z = out @ torch.randn(2, 2).cuda()
    w = torch.cat([out, out])
    s = out.sum().item()
    out, loss, y, z, w, s
    """
    assert device(code, "out") == "cuda" and value(code, "out").grad  # type: ignore[union-attr]
    assert device(code, "loss") == "cpu"  # a loss has no weights: its output follows the inputs
    assert [device(code, n) for n in "yzw"] == ["cuda", "cuda", "cuda"]
    assert kind(code, "s") == "other"


def test_buffers_parameters_and_submodules() -> None:
    code = """
    import torch
    from torch import nn
    class Scaler(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weight", torch.ones(3))
            self.bias = nn.Parameter(torch.zeros(3))
            self.plain = torch.zeros(3)
            self.head = nn.Linear(3, 3)

        def forward(self, x):
            self.weight, self.bias, self.plain, self.head
            self.to("cuda")
            return self.weight

    m = Scaler()
    m.to("cuda")
    m.weight, m.bias, m.plain, m.head
    """
    assert [kind(code, f"m.{a}") for a in ("weight", "bias", "plain", "head")] == [
        "tensor",
        "tensor",
        "tensor",
        "module",
    ]
    assert [device(code, f"m.{a}") for a in ("weight", "bias", "plain", "head")] == [
        "cuda",
        "cuda",
        None,
        "cuda",
    ]
    assert kind(code, "self.head") == "module"
    assert device(code, "self.weight") == "cuda"  # moved by `self.to("cuda")` before the return


def test_annotated_parameters() -> None:
    code = """
    import torch
    from torch import nn
    def f(x: torch.Tensor, m: nn.Module, other):
        x, m, other
    """
    assert (kind(code, "x"), kind(code, "m"), kind(code, "other")) == ("tensor", "module", None)


def test_batches_from_a_loader() -> None:
    code = """
    from torch.utils.data import DataLoader
    def f(ds):
        loader = DataLoader(ds)
        for i, (x, y) in enumerate(loader):
            x, y
        for batch in loader:
            batch
    """
    assert (kind(code, "x"), kind(code, "y"), kind(code, "batch")) == ("tensor", "tensor", None)


# ---------------------------------------------------------------------------
# Control flow


def test_branches_that_agree_keep_facts_and_disagreeing_ones_lose_them() -> None:
    code = """
    import torch
    def f(flag):
        if flag:
            a = torch.randn(3).cuda()
            b = torch.randn(3).cuda()
        else:
            a = torch.randn(3).cuda()
            b = torch.randn(3)
        a, b
    """
    assert device(code, "a") == "cuda"
    assert device(code, "b") is None and kind(code, "b") == "tensor"


def test_move_in_one_branch_only() -> None:
    code = """
    import torch
    def f(flag, d):
        x = torch.randn(3)
        if flag:
            x = x.to("cuda")
        x
    """
    assert device(code, "x") is None
    assert codes(code.replace("        x\n", "        x + torch.randn(3)\n"), "TDL302") == []


def test_loop_rebinding_makes_a_name_unknown_at_the_head() -> None:
    code = """
    import torch
    def f(n):
        x = torch.randn(3).cuda()
        y = torch.randn(3).cuda()
        for _ in range(n):
            x + y
            x = torch.randn(3)
            y = y.cuda()
        x, y
    """
    found = [(text, v) for text, v in _values(code) if text == "x + y"]
    assert found[-1][1] is not None and found[-1][1].device is None
    assert device(code, "y") == "cuda"  # every binding in the loop agrees
    assert codes(code, "TDL302") == []


def test_loops_reach_a_fixed_point_through_several_names() -> None:
    code = """
    import torch
    def f(n):
        a = torch.randn(3).cuda()
        b = a
        c = b
        while n:
            c = b
            b = a
            a = torch.randn(3)
        c
    """
    assert device(code, "c") is None


def test_break_and_endless_loops() -> None:
    code = """
    import torch
    def f(items):
        while True:
            x = torch.randn(3).cuda()
            break
        x
    """
    assert device(code, "x") == "cuda"


def test_code_after_return_or_raise_is_ignored() -> None:
    code = """
    import torch
    def f(flag):
        x = torch.randn(3)
        if flag:
            x = x.cuda()
        else:
            raise ValueError
        x
        return x
        x + torch.randn(3)
    """
    assert device(code, "x") == "cuda"
    assert codes(code, "TDL302") == []


def test_try_handlers_see_facts_from_before_and_after_the_body() -> None:
    code = """
    import torch
    def f():
        x = torch.randn(3).cuda()
        try:
            x = load()
        except OSError:
            x
        x
    """
    assert device(code, "x") is None


def test_helper_return_is_unknown_and_silent() -> None:
    code = """
    import torch
    def make():
        return torch.randn(3)
    def f():
        x = make()
        y = torch.randn(3).cuda()
        return x + y, x.numpy()
    """
    assert kind(code, "x") is None
    assert codes(code) == []


def test_nested_functions_are_analysed_separately() -> None:
    code = """
    import torch
    def outer():
        x = torch.randn(3).cuda()
        def inner(x):
            return x + torch.randn(3)
        return inner
    """
    assert codes(code, "TDL302") == []


def test_deeply_nested_expressions_do_not_fail_the_file() -> None:
    chain = " + ".join(["x"] * 600)  # parses, but nests deeper than the analysis can recurse
    code = f"import torch\nx = torch.randn(3).cuda()\ny = {chain}\n"
    check_source("t.py", code.encode(), [rules_by_code()["TDL302"]], Settings(), skip_filter=False)


# ---------------------------------------------------------------------------
# TDL302 acceptance


CLASSIC = """
import torch
import torchvision

model = torchvision.models.resnet18()
model = model.cuda()
image = torch.randn(3, 224, 224)
output = model(image)
"""

EVERYDAY = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x)

def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    x = torch.randn(8, 3, 224, 224)
    return model(x)
"""


def test_classic_mismatch_is_reported_at_the_call_naming_both_devices() -> None:
    result = check_source(
        "t.py", CLASSIC.encode(), [rules_by_code()["TDL302"]], Settings(), skip_filter=False
    )
    [diagnostic] = result.diagnostics
    assert (diagnostic.line, diagnostic.column) == (8, 10)
    assert "CUDA" in diagnostic.message and "the CPU" in diagnostic.message


def test_loaded_model_moved_to_cuda() -> None:
    code = """
    import torch
    model = torch.load("model.pt", map_location="cpu", weights_only=False)
    model.cuda()
    model.eval()
    print(model(torch.randn(3, 224, 224)))
    """
    assert codes(code, "TDL302") == [("TDL302", 6)]


def test_everyday_mismatch_and_its_fix() -> None:
    result = check_source(
        "t.py", EVERYDAY.encode(), [rules_by_code()["TDL302"]], Settings(), skip_filter=False
    )
    [diagnostic] = result.diagnostics
    assert diagnostic.line == 17 and "`device`" in diagnostic.message
    assert diagnostic.fix is not None
    fixed = fix_source("t.py", EVERYDAY.encode(), [rules_by_code()["TDL302"]], Settings(), unsafe=True)
    assert b"    return model(x.to(device))\n" in fixed.source


def test_same_programs_with_the_input_moved_are_silent() -> None:
    assert codes(CLASSIC.replace("model(image)", "model(image.cuda())"), "TDL302") == []
    assert codes(EVERYDAY.replace("model(x)", "model(x.to(device))"), "TDL302") == []
    moved_first = EVERYDAY.replace("    return model(x)", "    x = x.to(device)\n    return model(x)")
    assert codes(moved_first, "TDL302") == []


def test_two_values_on_the_same_device_variable_are_silent() -> None:
    code = """
    import torch
    def f():
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        a = torch.randn(4, 4).to(device)
        b = torch.randn(4, 4, device=device)
        return a @ b + torch.stack([a, b]).sum(0)
    """
    assert codes(code, "TDL302") == []


def test_operations_mixing_devices() -> None:
    code = """
    import torch
    a = torch.randn(4, 4).cuda()
    b = torch.randn(4, 4)
    a + b
    a @ b
    torch.stack([a, b])
    torch.matmul(b, a)
    a.add(b)
    b[torch.arange(2).cuda()]
    a.index_select(0, torch.arange(2))
    a += b
    """
    assert [line for _, line in codes(code, "TDL302")] == [5, 6, 7, 8, 9, 10, 11, 12]


def test_device_parameter_is_unknown() -> None:
    code = """
    import torch
    def f(model, device):
        model.to(device)
        return model(torch.randn(3, 4)), torch.randn(3).to(device) + torch.randn(3)
    """
    assert codes(code, "TDL302") == []


def test_module_moving_its_inputs_itself_is_trusted() -> None:
    code = """
    import torch
    from torch import nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)
        def forward(self, x):
            return self.fc(x.to(self.fc.weight.device))
    model = Net().cuda()
    model(torch.randn(3, 4))
    """
    assert codes(code, "TDL302") == []


# ---------------------------------------------------------------------------
# TDL303, TDL306, TDL310 through the analysis


def test_numpy_after_module_output_gets_detach() -> None:
    code = """
    import torch
    from torch import nn
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Linear(3, 1).to(device)
    preds = model(torch.randn(2, 3).to(device)).numpy()
    """
    result = check_source(
        "t.py", textwrap.dedent(code).encode(), [rules_by_code()["TDL303"]], Settings(), skip_filter=False
    )
    assert len(result.diagnostics) == 1
    fixed = fix_source("t.py", textwrap.dedent(code).encode(), [rules_by_code()["TDL303"]], Settings())
    assert b".to(device)).detach().cpu().numpy()" in fixed.source


def test_discarded_move_needs_tensor_evidence() -> None:
    code = """
    import torch
    from torch import nn
    def f(x: torch.Tensor, y, crit=nn.BCELoss()):
        loss = nn.BCELoss()
        loss.cuda()
        x.cuda()
        y.cuda()
        (x + 1).float()
    """
    assert codes(code, "TDL306") == [("TDL306", 7), ("TDL306", 9)]


def test_async_copy_read_before_sync() -> None:
    code = """
    import torch
    def f(x):
        host = x.to("cpu", non_blocking=True)
        for v in host:
            print(v)
    def g(x):
        host = x.to("cpu", non_blocking=True)
        helper()
        return host.numpy()
    def h(x):
        host = x.to("cpu", non_blocking=True)
        copy = host
        torch.cuda.synchronize()
        return copy.numpy()
    """
    assert codes(code, "TDL310") == [("TDL310", 4)]


# ---------------------------------------------------------------------------
# Query API and cost


def test_query_api_from_a_visit_handler() -> None:
    seen: dict[str, tuple[object, ...]] = {}

    class Asker(Rule):
        code = "TDL998"
        name = "asker"
        message = "m"
        docs = ""

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Name) and node.func.value == "use":
                arg = node.args[0].value
                seen[self.ctx.code_for(arg)] = (
                    flow.kind_of(arg, self.ctx),
                    flow.device_of(arg, self.ctx),
                    flow.is_tensor(arg, self.ctx),
                    flow.is_module(arg, self.ctx),
                )

    code = """
    import torch
    from torch import nn
    def f():
        m = nn.Linear(2, 2).cuda()
        t = torch.zeros(2)
        use(m)
        use(t)
        use(other)
    """
    check_module("t.py", cst.parse_module(textwrap.dedent(code)), [Asker], Settings())
    assert seen["m"] == (Kind.MODULE, Device("cuda"), False, True)
    assert seen["t"] == (Kind.TENSOR, CPU, True, False)
    assert seen["other"] == (None, None, False, False)


def test_analysis_is_shared_between_rules() -> None:
    calls = []
    original = flow._analyse

    def counting(unit: flow.Unit, ctx: object) -> flow.Flow:
        calls.append(unit)
        return original(unit, ctx)  # type: ignore[arg-type]

    code = """
    import torch
    def f():
        x = torch.randn(3).cuda()
        x.cuda()
        y = x.to("cpu", non_blocking=True)
        return x.numpy(), x + torch.randn(3), y.tolist()
    """
    flow._analyse = counting  # type: ignore[assignment]
    try:
        assert sorted(code for code, _ in codes(code)) == ["TDL302", "TDL303", "TDL306", "TDL310"]
    finally:
        flow._analyse = original  # type: ignore[assignment]
    assert len(calls) == 1


def test_large_function_is_analysed() -> None:
    """A 400-statement loop body reaches a fixed point (cost is measured in benchmarks/, not here)."""
    body = "\n".join(f"    x{i} = torch.randn(3).cuda() + x{i - 1 if i else 0}" for i in range(400))
    code = (
        f"import torch\ndef f(x0):\n    for _ in range(3):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    )
    result = check_source("t.py", code.encode(), [rules_by_code()["TDL302"]], Settings(), skip_filter=False)
    assert result.module is not None


def _values(code: str) -> list[tuple[str, Value | None]]:
    _Probe.seen = []
    check_module("t.py", cst.parse_module(textwrap.dedent(code)), [_Probe], Settings())
    return _Probe.seen


_ASKED_EARLY = """
import torch
from torch import nn

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        cpu = torch.randn(4, 2)
        return self.fc(x) + self.scale, cpu.cuda() + cpu


def train(batch):
    model = Net().to(DEVICE)
    data = torch.randn(8, 2)

    def inner():
        return model(data)

    y = model(data).to("cpu", non_blocking=True)
    print(y)
    return model(data), inner()
"""


class _AskEarly(Rule):
    """Asks for every function's analysis while the traversal is still at the module's start."""

    code = "TDL998"
    name = "ask-early"
    message = "ask early"
    docs = ""
    digests: dict[str, list[str]] = {}

    def visit_Module(self, node: cst.Module) -> None:
        for unit in _units(node):
            _AskEarly.digests[unit.name.value] = _digest(flow.analyse(unit, self.ctx), self.ctx)


class _AskInside(_AskEarly):
    """Asks for each function's analysis from inside it, as rules do."""

    def visit_Module(self, node: cst.Module) -> None:
        pass

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        _AskEarly.digests[node.name.value] = _digest(flow.analyse(node, self.ctx), self.ctx)


def _units(module: cst.Module) -> list[cst.FunctionDef]:
    found: list[cst.FunctionDef] = []

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def _digest(result: flow.Flow, ctx: object) -> list[str]:
    code = ctx.code_for  # type: ignore[attr-defined]
    return [f"{code(e).strip()}={v}" for e, v in result.values.items()] + [
        f"conflict {code(c.node)}" for c in result.conflicts
    ]


def test_facts_asked_from_outside_a_function_equal_its_own() -> None:
    """A function's analysis asked before the traversal reaches it is the one it gets inside it,
    and asking early changes none of the function's own findings."""
    module = cst.parse_module(_ASKED_EARLY)
    rules = [rules_by_code()[c] for c in ("TDL302", "TDL303", "TDL306", "TDL310")]
    _AskEarly.digests = {}
    early = check_module("t.py", module, [_AskEarly, *rules], Settings())
    asked_early = dict(_AskEarly.digests)
    _AskEarly.digests = {}
    inside = check_module("t.py", module, [_AskInside, *rules], Settings())
    assert set(asked_early) == {"__init__", "forward", "train", "inner"}
    assert asked_early == _AskEarly.digests
    # Facts, not an empty result: the class's buffer, and the CPU tensor added to a CUDA one.
    assert any(line.startswith("self.scale=Value(kind=<Kind.TENSOR") for line in asked_early["forward"])
    assert any(line.startswith("conflict") for line in asked_early["forward"])
    assert [(d.code, d.line) for d in early.diagnostics] == [(d.code, d.line) for d in inside.diagnostics]
    assert {d.code for d in inside.diagnostics} >= {"TDL302", "TDL310"}
