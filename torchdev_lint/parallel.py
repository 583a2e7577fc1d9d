"""Checking files in worker processes, in chunks, with results in input order.

Files are independent and a report is plain data, so workers only need the
paths and the options. The entry point is a module-level function, so it
works with the `spawn` start method too; on Linux workers are forked, which
saves each one re-importing LibCST and the rules. Nothing here imports torch.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from itertools import repeat

from torchdev_lint.runner import FileReport, Options, process_file

# Fewer files than this per worker are not worth a process.
MIN_FILES_PER_JOB = 4
# Up to this many files per task: large enough to amortise sending a task,
# small enough to balance files of very different sizes between workers.
MAX_CHUNK = 16


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


def _check_chunk(paths: Sequence[str], options: Options) -> list[FileReport]:
    """Worker entry point: the cache was already consulted by the parent."""
    return [process_file(path, options, use_cached=False) for path in paths]


def run_parallel(paths: Sequence[str], options: Options, jobs: int) -> list[FileReport]:
    """Check `paths` with up to `jobs` processes; serially when that is not worth it or not possible."""
    jobs = min(jobs, len(paths) // MIN_FILES_PER_JOB)
    if jobs <= 1:
        return _check_chunk(paths, options)
    # Imported here: a run answered from the cache starts no process and need not pay for them.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    chunks = _chunks(paths, jobs)
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    try:
        with ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_die_with_parent, initargs=(os.getpid(),)
        ) as pool:
            results = list(pool.map(_check_chunk, chunks, repeat(options)))
    except (OSError, BrokenProcessPool, NotImplementedError, ImportError):
        # No process support here (e.g. a sandbox without semaphores): check serially.
        return _check_chunk(paths, options)
    by_path = {report.path: report for chunk in results for report in chunk}
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
