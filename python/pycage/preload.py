"""Modules imported before a run's program: ``RuntimeConfig::preload``.

The zygote imports them before it forks (``pycage.zygote.main``), so every
child starts with them imported at fork cost; an exec'd child imports them
before its bootstrap serves the run (``main`` here is its entry point then),
so a program sees the same modules either way. The host's probe imports
them once at construction (``run``) to refuse a list that cannot work,
naming the module and why.

What makes importing before a fork hard, and what is done about it:

* thread pools: numeric libraries (OpenBLAS, OpenMP, MKL, BLIS, numexpr)
  start their worker threads when they load, and a process with threads
  must not fork. Their thread-count variables are set to 1 while the
  modules import, and put back as they were afterwards (a run's own
  environment, and what its subprocesses inherit, is unchanged). A run
  raises a preloaded pool with ``threadpoolctl``. ``os_threads`` counts
  the process's OS threads, native ones included, for the zygote's check;
* state a fork copies: ``random`` reseeds itself in a child; numpy's
  legacy global generator does not, so ``after_fork`` reseeds it from the
  OS (``numpy.random.seed()``), or every child would draw the same numbers.
"""

import importlib
import os
import sys
import traceback

#: The variable that carries the list (comma-separated module names).
ENV = "PYCAGE_PRELOAD"

#: Thread-count variables of numeric libraries, 1 while preloading.
THREAD_VARS = (
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def os_threads():
    """The process's OS threads (``threading`` sees only Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def run(modules):
    """Import ``modules`` in order with one-thread pools; ``None``, or
    ``(module, why)`` for the first that failed."""
    saved = {name: os.environ.get(name) for name in THREAD_VARS}
    for name in THREAD_VARS:
        os.environ[name] = "1"
    try:
        for module in modules:
            if not module:
                continue
            try:
                importlib.import_module(module)
            except BaseException as e:  # any failure names the module
                why = "".join(traceback.format_exception_only(type(e), e)).strip()
                return module, why or type(e).__name__
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return None


def from_environment():
    """Preload what ``PYCAGE_PRELOAD`` lists (and drop the variable, which
    is not the program's); ``None`` or ``(module, why)``."""
    listed = os.environ.pop(ENV, "")
    return run(listed.split(",")) if listed else None


def after_fork():
    """In a child forked from a zygote that preloaded: draw new seeds.
    (No import statement here: in a fresh child, one of a module already
    imported took about 15 copy-on-write faults, 0.05 ms.)"""
    numpy_random = sys.modules.get("numpy.random")
    seed = getattr(numpy_random, "seed", None)
    if seed is not None:
        seed()


def main():
    """An exec'd child's entry point when the runtime preloads: the
    modules, then the bootstrap's serve loop (never returns)."""
    from pycage import bootstrap  # first, as in the zygote

    failed = from_environment()
    if failed is not None:
        module, why = failed
        bootstrap.diag(f"could not preload {module}: {why}")
        os._exit(bootstrap._EXIT_INTERNAL)
    bootstrap.main()
