"""Running one function over many files in worker processes, with results in input order.

The work is any picklable function of a path (the runner hands a
`functools.partial` of its per-file function), so this module knows nothing
of checking: it only chunks, distributes and collects. Workers are forked on
Linux, which saves each one re-importing LibCST and the rules; elsewhere they
are spawned, so the work must be a module-level function. Nothing here
imports torch.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

Result = TypeVar("Result")

# Fewer files than this per worker are not worth a process.
MIN_FILES_PER_JOB = 4
# Up to this many files per task: large enough to amortise sending a task,
# small enough to balance files of very different sizes between workers.
MAX_CHUNK = 16


def collect_less_often() -> None:
    """For a process of ours that checks many files (the CLI, the language server), not for a
    host such as flake8: a parse builds some 10^5 objects, and with the default threshold
    the collector traverses the long-lived ones (the rules, LibCST, the trees kept for pass 2)
    again and again, a fifth of a cold check's CPU. Cycles are still collected; peak memory
    stays the same (`docs/benchmarks.md`, "Session 15"). Workers forked later inherit it."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def default_jobs() -> int:
    """The number of cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _die_with_parent(parent: int) -> None:
    """Worker initializer: a worker must not outlive a run that was killed (it would wait for
    work forever). Linux ends the worker when its parent dies; elsewhere nothing is done."""
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def _run_chunk(work: Callable[[str], Result], paths: Sequence[str]) -> list[Result]:
    """Worker entry point: one chunk's results, in the chunk's order."""
    return [work(path) for path in paths]


def map_files(work: Callable[[str], Result], paths: Sequence[str], jobs: int) -> list[Result]:
    """`[work(path) for path in paths]`, computed by up to `jobs` processes.

    Serially when that is not worth it or processes are not available. When a
    worker dies (the pool breaks), the chunks whose results were received are
    kept and only the others are run again, here in this process, with a warning
    on stderr.
    """
    jobs = min(jobs, len(paths) // MIN_FILES_PER_JOB)
    if jobs <= 1:
        return _run_chunk(work, paths)
    # Imported here: a run answered from the cache starts no process and need not pay for them.
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    chunks = _chunks(paths, jobs)
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    by_path: dict[str, Result] = {}
    broken = False
    try:
        with ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_die_with_parent, initargs=(os.getpid(),)
        ) as pool:
            futures: list[tuple[list[str], Future[list[Result]]]] = [
                (chunk, pool.submit(_run_chunk, work, chunk)) for chunk in chunks
            ]
            for chunk, future in futures:
                try:
                    by_path.update(zip(chunk, future.result(), strict=True))
                except BrokenProcessPool:
                    broken = True  # a worker died: this chunk is run again below
    except BrokenProcessPool:
        broken = True
    except (OSError, NotImplementedError, ImportError):
        pass  # no process support here (e.g. a sandbox without semaphores): run serially below
    missing = [path for path in dict.fromkeys(paths) if path not in by_path]
    if broken:
        # Said, not silent: the run goes on serially, and a file that kills a process (a crash in
        # LibCST's native parser, the memory limit) is about to be run in this one.
        print(
            f"torchdev-lint: warning: a worker process ended unexpectedly; running the "
            f"{len(missing)} of {len(by_path) + len(missing)} files whose results were lost in the main process",
            file=sys.stderr,
        )
    by_path.update(zip(missing, _run_chunk(work, missing), strict=True))
    return [by_path[path] for path in paths]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _chunks(paths: Sequence[str], jobs: int) -> list[list[str]]:
    """Largest files first, in chunks of similar size, so that no worker is left with a
    big file at the end while the others idle (one generated file can take as long as
    hundreds of ordinary ones)."""
    sized = sorted(((_size(path), path) for path in set(paths)), reverse=True)
    budget = max(1, sum(size for size, _ in sized) // (jobs * 8))
    limit = max(1, min(MAX_CHUNK, math.ceil(len(sized) / (jobs * 8))))
    chunks: list[list[str]] = []
    total = 0
    for size, path in sized:
        if not chunks or total + size > budget or len(chunks[-1]) >= limit:
            chunks.append([])
            total = 0
        chunks[-1].append(path)
        total += size
    return chunks
