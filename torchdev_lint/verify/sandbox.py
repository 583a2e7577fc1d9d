"""Keep a fixture run from reaching the network or writing outside its own folder.

The guard is an audit hook (PEP 578), installed at interpreter start by a
`sitecustomize` module that the verifier puts first on the child's
`PYTHONPATH`, so Python processes the fixture starts (DataLoader workers under
"spawn") are guarded too. It refuses, with PermissionError:

- connecting, binding or sending on an internet socket, and name lookups
  (Unix sockets stay allowed: multiprocessing passes tensors through them);
- opening a file for writing, and creating, removing, renaming or changing
  files, anywhere but the run's folder and os.devnull;
- starting programs other than this Python interpreter.

Refusals are also appended to `blocked.txt` in the run's folder, so the report
can name them when the fixture swallows the exception. An audit hook is a
tripwire for honest mistakes, not a security boundary against hostile code.
"""

from __future__ import annotations

import os
import socket
import sys

ENV_ROOT = "TORCHDEV_VERIFY_SANDBOX"
BLOCKED_LOG = "blocked.txt"

SITECUSTOMIZE = """\
from torchdev_lint.verify.sandbox import install_from_environment

install_from_environment()
"""

_INTERNET = {socket.AF_INET, socket.AF_INET6}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 1,
    "os.rename": 2,
    "os.link": 2,
    "os.symlink": 2,
    "os.truncate": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.utime": 1,
    "shutil.rmtree": 1,
    "shutil.copyfile": 2,
    "shutil.move": 2,
}
_NAME_LOOKUPS = {
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyname_ex",
    "socket.gethostbyaddr",
}
_PROGRAM_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"}


def _writes(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


class Guard:
    """The audit hook: decides per event, records and refuses what is not allowed."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.allowed = (self.root, os.path.realpath(os.devnull))
        self.log = os.path.join(self.root, BLOCKED_LOG)
        self.busy = False

    def inside(self, path: object) -> bool:
        if isinstance(path, int):  # an already open file descriptor
            return True
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return True
        real = os.path.realpath(os.fspath(path))
        return any(real == root or real.startswith(root + os.sep) for root in self.allowed)

    def refuse(self, what: str) -> None:
        self.busy = True  # our own log write raises an "open" event
        try:
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(what + "\n")
        finally:
            self.busy = False
        raise PermissionError(f"torchdev-lint verify: blocked {what}")

    def __call__(self, event: str, args: tuple) -> None:
        if self.busy:
            return
        if event == "open":
            path, mode, flags = (args + (None, None, None))[:3]
            if _writes(mode, flags) and not self.inside(path):
                self.refuse(f"write to {path}")
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                if not self.inside(path):
                    self.refuse(f"{event} on {path}")
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            sock = args[0]
            if getattr(sock, "family", None) in _INTERNET:
                self.refuse(f"network {event.split('.')[1]} to {args[1]!r}")
        elif event in _NAME_LOOKUPS:
            self.refuse(f"network name lookup of {args[0]!r}")
        elif event in _PROGRAM_EVENTS:
            program = _program(event, args)
            if program is None or os.path.realpath(program) != os.path.realpath(sys.executable):
                self.refuse(f"starting program {program!r}")


def _program(event: str, args: tuple) -> str | None:
    """The executable an event starts; None for a shell command line."""
    if event == "os.system":
        return None
    if event == "os.spawn":
        args = args[1:]
    program = args[0] if args and args[0] else (args[1] if len(args) > 1 else None)
    if isinstance(program, (list, tuple)):
        program = program[0] if program else None
    if isinstance(program, (str, bytes, os.PathLike)):
        return os.fsdecode(program)
    return None


def install(root: str) -> Guard:
    guard = Guard(root)
    sys.addaudithook(guard)
    return guard


def install_from_environment() -> None:
    """Entry point of the child's `sitecustomize`: guard when the verifier asked for it."""
    root = os.environ.get(ENV_ROOT)
    if root:
        install(root)


def write_shim(folder: str) -> None:
    """Write the `sitecustomize.py` that installs the guard into `folder`."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as shim:
        shim.write(SITECUSTOMIZE)
