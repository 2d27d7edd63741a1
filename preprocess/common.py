"""Helpers of the corpus scripts: one-line user errors, worker pools and a bounded ordered parallel
map, text normalisation.

Atomic outputs and directory replacement are the plugin's (``fairseq_bio.files``), used here as
everywhere.
"""

import collections
import multiprocessing
import os
from typing import Callable, Iterable, Iterator

from fairseq_bio.files import InputError

# The scripts' name for the plugin's input error: one class, so every command prints it in one line.
PreprocessError = InputError


def worker_pool(workers: int, initializer: Callable, initargs: tuple):
    """A ``multiprocessing.Pool`` of ``workers`` processes started fresh ("spawn"), never forked
    from the caller.

    Forking copies the caller's locks but not the threads that hold them: a caller that has threads
    (torch's OpenMP and compile workers, a notebook, the test suite's workers) can fork a pool
    worker that waits forever on a lock nobody will release, and the pool then hangs. Spawned
    workers import the module and take ``initargs`` pickled.
    """
    return multiprocessing.get_context("spawn").Pool(
        workers, initializer=initializer, initargs=initargs
    )


def ordered_map(pool, func: Callable, items: Iterable, max_in_flight: int) -> Iterator:
    """``pool.imap(func, items)`` that reads ``items`` lazily: at most ``max_in_flight`` tasks
    queued.

    ``Pool.imap`` consumes its whole input up front, which would load an entire corpus into memory.
    """
    pending = collections.deque()
    for item in items:
        pending.append(pool.apply_async(func, (item,)))
        if len(pending) >= max_in_flight:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def normalize_space(line: str) -> str:
    """``line`` with every run of whitespace one space, none at the ends: fastBPE splits words at "
    " only."""
    return " ".join(line.split())


def has_text(path) -> bool:
    """Whether ``path`` has a line with more than whitespace (and a byte-order mark); read up to
    that line only."""
    with open(path, "rb") as f:
        for line in f:
            if line.replace(b"\xef\xbb\xbf", b"").strip():
                return True
    return False


def default_workers() -> int:
    """The number of CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
