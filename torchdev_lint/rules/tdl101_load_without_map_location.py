"""TDL101 load-without-map-location."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.provenance.host_loads import PendingLoads
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.rule import Fix, Invalid, ProjectExample, Rule, Valid
from torchdev_lint.syntax import with_keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


class LoadWithoutMapLocation(Rule):
    code = "TDL101"
    name = "load-without-map-location"
    message = (
        "`torch.load` without `map_location` restores tensors to the device they were saved on; "
        'pass `map_location="cpu"` (or your device)'
    )
    fix_availability = "sometimes"
    docs = """
        ## What it does
        Flags `torch.load(f)`, `torch.jit.load(f)` and `torch.hub.load_state_dict_from_url(url)` (or
        `torch.utils.model_zoo.load_url`) without `map_location`, by keyword or position (second argument of
        `torch.load`/`torch.jit.load`, third of `load_state_dict_from_url`); calls unpacking
        `*args`/`**kwargs` may carry one. Left alone where the premise (tensors restored onto a device this
        machine may lack) cannot hold:
        - files the program wrote itself: a path the same function has just written (same run, same machine;
          not a cache written only when missing, `if not os.path.exists(p): torch.save(...)`, which another run
          may have written);
          a `torch.load` of a path the file writes from host memory (`torch.save(feats.cpu(), path)`, the same
          expression naming the same file: in one function, or a constant, a `self` attribute or a parameter of
          the methods of one class; another function's `path` parameter is another file; NumPy, `torch.from_numpy`, factories without `device=`, k2 FSAs built from text, what
          project functions return from those, dicts the function fills item by item with those, a `self`
          dict its class fills with those only) or that other project files write only from host memory (the
          same string, f-string shape such as `f"{prefix}.f0_stat.pt"`, constant through imports, or
          distinctive config key; with the project's facts, also through `from . import k2` where the package
          does `import k2`, and from what loads of such files yield); an `io.BytesIO` round trip by the class
          (or function) that serializes into such buffers; a `self.path` that the object's `__del__` removes;
        - host data by construction: generator states and metadata (`rng_file`, `path / _METADATA_FILENAME`, a
          file saved from `g.get_state()`), values whose every use is a generator setter or
          `torch.from_numpy`/`np.asarray`, scheduler or scaler state (`lr_scheduler.load_state_dict`,
          `class WarmupScheduler`), loads in a `Dataset` class (bases followed through the project), in a
          function importing `torch_xla` or deleting its `device`/`map_location` parameter;
        - tests (`test_*.py`, `conftest.py`, `test_*` functions of a pytest/unittest module) and files shipped
          with the code (a path built from `__file__`);
        - weights at a URL fixed in the code (a literal, a constant, a class attribute,
          `model_urls["resnet18"]`), loaded from it or fetched with `download_url_to_file`: their authors
          publish and load them everywhere they support;
        - a `torch.jit.load` in code that cannot run without CUDA (a TensorRT engine).

        Weights a class saves and loads itself are still flagged: the file may come from a GPU machine.

        ## Why it matters
        Without `map_location`, every tensor is restored onto the device it was saved from. A checkpoint
        written on `cuda:3` fails to load on a laptop (`RuntimeError: Attempting to deserialize object on a
        CUDA device but torch.cuda.is_available() is False`), and on a multi-GPU box every process loads onto
        the GPU that saved it, piling memory onto one card.

        ## Example
        ```python
        state = torch.load("checkpoint.pt")
        model.load_state_dict(state)
        ```

        ## Use instead
        ```python
        state = torch.load("checkpoint.pt", map_location="cpu")
        model.load_state_dict(state)
        model.to(device)
        ```

        ## Fix safety
        The fix adds `map_location="cpu"` (the keyword only, no `torch` name; inside an f-string with the
        quote legal there, and no fix where none is). It is safe only where every use of the loaded value ends
        in `x.load_state_dict(value)` (without `assign=True`), directly or through items (`ckpt["model"]`,
        `.get`, `.pop`), names assigned in the same function (`sd = sd["state_dict"]`), a key-renaming dict
        comprehension or a loop over its `.items()`/`.values()` (`for name, sd in ckpt.items():`); uses that only test it (`"model" in ckpt`, `isinstance`, `len`, `.keys()`) and a
        dropped value do not count. `load_state_dict` copies the values into tensors that already live where
        the model was placed, so nothing the program sees changes; when the file or a class of its project
        defines its own `load_state_dict` (or `set_extra_state`, `_load_from_state_dict`, or registers a
        `load_state_dict` hook: which may keep the tensors as given), or the call may pass
        `assign=True` (third positional argument, `*args`, `**options`), the fix is unsafe.

        Everywhere else the fix is unsafe: a pickled module, optimizer or tensor that is used, returned or
        handed on stays on the CPU where the code may expect the saving device (`model = torch.load(p,
        weights_only=False); model(x_gpu)` then fails). `torch.jit.load`'s fix is always unsafe: the scripted
        module stays on the CPU. An unsafe fix's message says which of these applies at its site.
        """
    invalid = (
        Invalid(
            """
            import torch
            import torch as T
            from torch import load as L
            state = torch.load("ckpt.pt")
            a = T.load(path)
            b = L(
                path,
                weights_only=True,
            )
            scripted = torch.jit.load("model.ts")
            print(f"{torch.load(path)}")  # the quote legal in an f-string on Python 3.10

            def from_url(net, url):
                sd = torch.hub.load_state_dict_from_url(url, "/tmp/hub")
                net.load_state_dict(sd)
            """,
            lines=(4, 5, 6, 10, 11, 14),
            fixed="""
            import torch
            import torch as T
            from torch import load as L
            state = torch.load("ckpt.pt", map_location="cpu")
            a = T.load(path, map_location="cpu")
            b = L(
                path,
                weights_only=True,
                map_location="cpu",
            )
            scripted = torch.jit.load("model.ts", map_location="cpu")
            print(f"{torch.load(path, map_location='cpu')}")  # the quote legal in an f-string on Python 3.10

            def from_url(net, url):
                sd = torch.hub.load_state_dict_from_url(url, "/tmp/hub", map_location="cpu")
                net.load_state_dict(sd)
            """,
        ),
        Invalid(
            """
            from torch import load

            def restore(model, optimizer, path):
                model.load_state_dict(load(path))  # weights
                sd = load(path)
                if "state_dict" in sd:
                    sd = sd["state_dict"]
                model.load_state_dict({k.replace("module.", ""): v for k, v in sd.items()}, strict=False)
                optimizer.load_state_dict(load(path).get("optimizer"))
            """,
            lines=(4, 5, 9),
            fixed="""
            from torch import load

            def restore(model, optimizer, path):
                model.load_state_dict(load(path, map_location="cpu"))  # weights
                sd = load(path, map_location="cpu")
                if "state_dict" in sd:
                    sd = sd["state_dict"]
                model.load_state_dict({k.replace("module.", ""): v for k, v in sd.items()}, strict=False)
                optimizer.load_state_dict(load(path, map_location="cpu").get("optimizer"))
            """,
        ),
        # Unsafe fixes: a pickled model or optimizer would stay on the CPU.
        Invalid(
            """
            import torch

            def predict(path, x_gpu):
                model = torch.load(path, weights_only=False)
                model.eval()
                return model(x_gpu)

            def resume(model, path):
                ckpt = torch.load(path, weights_only=False)
                model.load_state_dict(ckpt["model"])
                optimizer = ckpt["optimizer"]
                return optimizer
            """,
            lines=(4, 9),
            fixed="""
            import torch

            def predict(path, x_gpu):
                model = torch.load(path, weights_only=False, map_location="cpu")
                model.eval()
                return model(x_gpu)

            def resume(model, path):
                ckpt = torch.load(path, weights_only=False, map_location="cpu")
                model.load_state_dict(ckpt["model"])
                optimizer = ckpt["optimizer"]
                return optimizer
            """,
        ),
        # Another function's `target` is another file: a host-memory save names no file by a
        # parameter. Each loaded value goes to a `load_state_dict`, so the fix is safe.
        Invalid(
            """
            import torch

            def export_norms(stats, target):
                torch.save({k: v.cpu() for k, v in stats.items()}, target)

            def restore_heads(heads, target):
                for name, weights in torch.load(target).items():
                    heads[name].load_state_dict(weights)
            """,
            lines=(7,),
            fixed="""
            import torch

            def export_norms(stats, target):
                torch.save({k: v.cpu() for k, v in stats.items()}, target)

            def restore_heads(heads, target):
                for name, weights in torch.load(target, map_location="cpu").items():
                    heads[name].load_state_dict(weights)
            """,
        ),
        # Where no quote character is legal inside an f-string, the finding has no fix.
        Invalid(
            """
            import torch
            print(f"{f'{torch.load(path)}'}")
            """,
            lines=(2,),
        ),
        # A file format written and read by module-level functions, weights a class writes and
        # reads itself: the bytes may come from a file saved on another machine. A script's
        # evaluation function named `test` is no unit test; a cache read before it is written, or
        # written only when missing, may come from another run (`embed` returns CUDA tensors); a scheduler's state next to a
        # model's is still a load of tensors; a download from a URL the caller chooses may hold
        # anything; without the project's facts, `from . import k2` may be any module.
        Invalid(
            """
            import io
            import os
            import torch
            from . import k2

            def serialize_weights(state):
                buffer = io.BytesIO()
                torch.save(state, buffer)
                return buffer.getvalue()

            def deserialize_weights(model, data):
                model.load_state_dict(torch.load(io.BytesIO(data)))

            class Checkpointer:
                def save(self, model, path):
                    torch.save(model.state_dict(), path)

                def restore(self, model, path):
                    model.load_state_dict(torch.load(path))

            def test(args, model, device, loader):
                model.load_state_dict(torch.load(args.ckpt))

            def embed(model, x):
                return model(x).cuda()

            def features(model, x, cache):
                if os.path.exists(cache):
                    return torch.load(cache)
                out = embed(model, x)
                torch.save(out, cache)
                return out

            def resume(model, scheduler, path):
                ckpt = torch.load(path)
                model.load_state_dict(ckpt["model"])
                scheduler.load_state_dict(ckpt["scheduler"])

            def fetch(model, url, cached):
                torch.hub.download_url_to_file(url, cached)
                model.load_state_dict(torch.load(cached))

            def lexicon(lang_dir):
                return k2.Fsa.from_dict(torch.load(lang_dir / "L.pt"))

            def codes(model, x, cache):
                if not os.path.isfile(cache):
                    torch.save(embed(model, x), cache)
                return torch.load(cache)
            """,
            lines=(12, 19, 22, 29, 35, 41, 44, 49),
            fixed="""
            import io
            import os
            import torch
            from . import k2

            def serialize_weights(state):
                buffer = io.BytesIO()
                torch.save(state, buffer)
                return buffer.getvalue()

            def deserialize_weights(model, data):
                model.load_state_dict(torch.load(io.BytesIO(data), map_location="cpu"))

            class Checkpointer:
                def save(self, model, path):
                    torch.save(model.state_dict(), path)

                def restore(self, model, path):
                    model.load_state_dict(torch.load(path, map_location="cpu"))

            def test(args, model, device, loader):
                model.load_state_dict(torch.load(args.ckpt, map_location="cpu"))

            def embed(model, x):
                return model(x).cuda()

            def features(model, x, cache):
                if os.path.exists(cache):
                    return torch.load(cache, map_location="cpu")
                out = embed(model, x)
                torch.save(out, cache)
                return out

            def resume(model, scheduler, path):
                ckpt = torch.load(path, map_location="cpu")
                model.load_state_dict(ckpt["model"])
                scheduler.load_state_dict(ckpt["scheduler"])

            def fetch(model, url, cached):
                torch.hub.download_url_to_file(url, cached)
                model.load_state_dict(torch.load(cached, map_location="cpu"))

            def lexicon(lang_dir):
                return k2.Fsa.from_dict(torch.load(lang_dir / "L.pt", map_location="cpu"))

            def codes(model, x, cache):
                if not os.path.isfile(cache):
                    torch.save(embed(model, x), cache)
                return torch.load(cache, map_location="cpu")
            """,
        ),
    )
    valid = (
        # `map_location` given (unpacked arguments may give it); other functions named `load`, and
        # a local `torch` that is not the module.
        Valid(
            """
            import pickle

            import torch
            a = torch.load(path, map_location="cpu")
            b = torch.load(path, "cpu")
            c = torch.load(path, **load_kwargs)
            d = torch.load(*args)
            e = torch.load(path, *rest)
            f = torch.jit.load(path, "cpu")
            g = torch.hub.load_state_dict_from_url(url, None, "cpu")
            h = torch.hub.load_state_dict_from_url(url, map_location=device)
            def load(path):
                return open(path).read()
            def restore(path, f):
                torch = FakeTorch()
                return torch.load(path), pickle.load(f)
            data = load("notes.txt")
            """
        ),
        # The file writes this file itself from host memory (a module built on the host and never
        # moved, under another folder argument); read back in the same function, or through
        # in-memory buffers: the same run, the same machine, so the devices exist.
        Valid(
            """
            import io
            import os
            import tempfile
            from pathlib import Path

            import torch

            def features(model, loader, cache_file):
                if os.path.exists(cache_file):
                    return torch.load(cache_file)
                feats = torch.cat([model(x) for x in loader])
                torch.save({"feats": feats.cpu(), "n": len(feats)}, cache_file)
                return feats
            def embed(self, batch):
                out = self.encoder(batch).detach().cpu()
                torch.save(out, self.out_path)
                return torch.load(self.out_path)
            def calibrate(run_dir):
                norm = torch.nn.LayerNorm(16)
                norm.eval()
                torch.save(norm.state_dict(), f"{run_dir}/norm_calibration.pt")
            def serve(export_dir):
                return torch.load(os.path.join(export_dir, "norm_calibration.pt"))
            def simulate(model, optimizer, steps):
                with tempfile.TemporaryDirectory() as tmp:
                    cache = Path(tmp) / "cache.pt"
                    torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, cache.as_posix())
                    run(model, optimizer, steps)
                    objs = torch.load(cache.as_posix())
                    model.load_state_dict(objs["model"])
                    optimizer.load_state_dict(objs["opt"])
            def broadcast(obj, src_rank):
                if rank() == src_rank:
                    buffer = io.BytesIO()
                    torch.save(obj, buffer)
                    data = torch.tensor(bytearray(buffer.getbuffer()))
                else:
                    data = torch.empty(size())
                for buffer in all_gather(data):
                    buffer = io.BytesIO(buffer.cpu().numpy())
                    yield torch.load(buffer)
            def export(model, example, path):
                scripted = torch.jit.script(model)
                torch.jit.save(m=scripted, f=path)
                reloaded = torch.jit.load(path)
                assert torch.allclose(reloaded(example), model(example))
            class Launcher:
                def send(self, metrics, extra):
                    buffer = io.BytesIO()
                    torch.save(metrics, buffer)
                    extra["metrics_bytes"] = buffer.getvalue()
                def receive(self, extra):
                    return torch.load(io.BytesIO(extra["metrics_bytes"]))
            class ScriptModulePickler:
                def reduce(self, module):
                    f = io.BytesIO()
                    torch.jit.save(module, f)
                    return f.getvalue()
                def rebuild(self, serialized):
                    return torch.jit.load(io.BytesIO(serialized))
            """
        ),
        # Host data by construction: generator states (fed to setters, named so, or saved from
        # `get_state()`), bookkeeping metadata, NumPy tables, XLA checkpoints, a dataset's cache,
        # what the file's functions return from host memory (NumPy, k2 FSAs built from text); a
        # temporary file its object deletes; weights shipped next to the code; unit tests; a loader
        # deleting its `device` parameter says the data has none; schedulers and scalers: numbers.
        Valid(
            """
            import os
            import random
            from pathlib import Path

            import k2
            import numpy as np
            import pytest
            import torch
            from torch.utils.data import Dataset

            from .utils import set_rng_state_for_device

            _META_FILE = "meta.pt"
            WEIGHTS = Path(__file__).resolve().parent / "weights" / "dists.pt"
            class PNet(torch.nn.Module):
                def __init__(self, pretrained=True):
                    super().__init__()
                    if pretrained:
                        weights = torch.load(str(WEIGHTS))
                        self.alpha = weights["alpha"]
            def test_roundtrip(tmp_path, model):
                save_checkpoint(model, tmp_path / "m.pt")
                model.load_state_dict(torch.load(tmp_path / "m.pt"))
            class Checkpointable:
                def load(self, path, device=None):
                    del device
                    data = torch.load(path)
                    self.current_step = data["current_step"]
            class WarmupScheduler:
                def load(self, path):
                    self.lr0 = torch.load(path)["initial_value"]
            class ReduceLROnPlateau:
                def load(self, path):
                    self.__dict__.update(torch.load(path))
            def restore(trainer, checkpoint):
                trainer.lr_scheduler.load_state_dict(torch.load(checkpoint + "/scheduler.pt"))
                trainer.scaler.load_state_dict(torch.load(checkpoint + "/scaler.pt"))
            def restore_rng(path):
                state = torch.load(path, weights_only=True)
                random.setstate(state["python"])
                np.random.set_state(state["numpy"])
                torch.random.set_rng_state(state["cpu"])
                if torch.cuda.is_available():
                    torch.cuda.random.set_rng_state_all(state["cuda"])
            def restore_generators(checkpoint, rank, distributed):
                rng_file = os.path.join(checkpoint, f"rng_state_{rank}.pth")
                state = torch.load(rng_file, weights_only=True)
                random.setstate(state["python"])
                set_rng_state_for_device("CUDA", torch.cuda, state, distributed)
            class SeedKeeper:
                def save(self, path):
                    torch.save({name: g.get_state() for name, g in self.generators.items()}, path)
                def load(self, path):
                    for name, state in torch.load(path).items():
                        self.generators[name].set_state(state)
            class ShardedStrategy:
                def load_checkpoint(self, path, state, weights_only=None):
                    metadata = torch.load(path / _META_FILE, weights_only=weights_only)
                    state.update(metadata)
                def load_xla_shard(self, module, file):
                    import torch_xla.core.xla_model as xm

                    shard = torch.load(file)
                    module.load_state_dict(shard["model"])
                    xm.rendezvous("loaded")
            def load_meta_file(root, file=None):
                if file is None:
                    file = _META_FILE
                file = os.path.join(root, file)
                return torch.load(file, weights_only=True)
            class GraphFile:
                def read(self):
                    return torch.load(self.path, weights_only=False)
                def __del__(self):
                    os.remove(self.path)
            def pitch_codebook(tables_path, n_units):
                tables = torch.load(tables_path)
                tables = torch.from_numpy(tables[n_units])
                return tables.cuda()
            class CachedItems(Dataset):
                def __getitem__(self, index):
                    hashfile = self.cache_dir / f"{index}.pt"
                    if hashfile.is_file():
                        return torch.load(hashfile, weights_only=True)
                    item = self.transform(self.data[index])
                    torch.save(item, hashfile)
                    return item
            def extract_pitch(path):
                pitch = yaapt(np.load(path))
                pitch = torch.from_numpy(pitch.astype(np.float32))
                return pitch
            def pitch_of(path):
                try:
                    return extract_pitch(path)
                except ValueError:
                    return None
            def dump_pitch(paths, out_dir, rank):
                table = {}
                for path in paths:
                    table[path] = pitch_of(path)
                torch.save(table, f"{out_dir}/pitch_{rank}.pt")
            def load_pitch(out_dir, rank):
                return torch.load(f"{out_dir}/pitch_{rank}.pt")
            def prepare_lang(lang_dir, arcs):
                torch.save(k2.arc_sort(k2.Fsa.from_str(arcs).invert()).as_dict(), lang_dir / "L.pt")
            def load_lexicon(lang_dir):
                return k2.Fsa.from_dict(torch.load(lang_dir / "L.pt"))
            """
        ),
        # Weights at a URL the authors fixed in the code (they publish and test them on the CPU),
        # loaded from it or downloaded first; a scripted TensorRT engine in CUDA-only code.
        Valid(
            """
            import os

            import torch
            import torch.utils.model_zoo as model_zoo
            from torch.hub import load_state_dict_from_url

            from .download import download_url_to_file

            FID_WEIGHTS_URL = "https://example.com/pt_inception.pth"
            model_urls = {"resnet18": "https://example.com/resnet18.pth"}
            def resnet18(model):
                model.load_state_dict(model_zoo.load_url(model_urls["resnet18"]), strict=False)
            def fid_inception(model):
                model.load_state_dict(load_state_dict_from_url(FID_WEIGHTS_URL, progress=True))
            def densenet(model, arch):
                urls = {"densenet121": "https://example.com/densenet121.pth"}
                url = lookup(arch, urls, None)
                if url is None:
                    raise ValueError(arch)
                model.load_state_dict(load_state_dict_from_url(url, progress=False))
            class PerceptualLoss(torch.nn.Module):
                _weights_url = "https://example.com/releases/" + "perceptual.pt"
                def __init__(self):
                    super().__init__()
                    self.load_state_dict(torch.hub.load_state_dict_from_url(self._weights_url))
            def load_pretrained(model, name):
                if name != "faces":
                    raise ValueError(name)
                url = "https://example.com/faces.pt"
                cached = os.path.join(torch.hub.get_dir(), os.path.basename(url))
                if not os.path.exists(cached):
                    download_url_to_file(url, cached)
                model.load_state_dict(torch.load(cached))
            def load_engine(path):
                if not torch.cuda.is_available():
                    raise RuntimeError("TensorRT engines need a CUDA device")
                return torch.jit.load(path)
            """
        ),
    )
    projects = (
        # Another script wrote the files: a state dict of a module built on the CPU and never moved, a
        # dict of a `.to("cpu")` tensor (host data everywhere) or a module moved to the GPU (flagged).
        ProjectExample(
            {
                "distill.py": """
                    import torch
                    from torch import nn

                    def export_student(codebook, teacher):
                        student = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
                        torch.save(student.state_dict(), "student_head.pt")
                        torch.save({"codes": codebook.to("cpu"), "step": 3}, "codebook.pt")
                        torch.save(teacher.cuda().state_dict(), "teacher_head.pt")
                """,
                "serve.py": """
                    import torch

                    def restore(student, teacher):
                        student.load_state_dict(torch.load("student_head.pt"))
                        teacher.load_state_dict(torch.load("teacher_head.pt"))
                        return torch.load("codebook.pt")["codes"]
                """,
            },
            findings=("serve.py:5",),
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Judged once the whole file is known: a load may come before the save of its file,
        # and the fix's safety depends on every later use of the loaded value.
        self.loads = PendingLoads()

    def visit_Call(self, node: cst.Call) -> None:
        self.loads.note(node, self.ctx)

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind != "module":
            return
        for call, loader, why in self.loads.flagged(self.ctx):
            cpu = self.ctx.string("cpu", at=call)  # None in an f-string leaving no quote legal: no fix
            edit = with_keyword(call, "map_location", cpu) if cpu is not None else None
            risk = None if why is None else why.value  # what may change: the load's own reason
            fix = Fix.judged('Add `map_location="cpu"`', {call: edit}, risk) if edit else None
            self.report(call, message=self.message.replace("torch.load", loader.qualname, 1), fix=fix)
