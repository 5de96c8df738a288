"""The process limits ``boot`` and each ``run`` set, and the run's budgets.

``boot`` sets ``RLIMIT_CPU`` (soft ``cpuSeconds``, hard one second above) and
``RLIMIT_AS``; 0 leaves a limit unset. A session's runs carry their own
budgets instead: its CPU budget is counted from each run's start (the soft
``RLIMIT_CPU`` moves to the CPU time used so far plus the run's
``cpuSeconds``), and each run starts a new log ledger and value budget.
"""

import resource

from pycage._private import BUILTINS, EXIT_INTERNAL, die
from pycage.logs import start_ledger

__builtins__ = BUILTINS

_getrlimit = resource.getrlimit
_setrlimit = resource.setrlimit
_getrusage = resource.getrusage


def _set_limit(which, soft, hard):
    _, current_hard = _getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    try:
        _setrlimit(which, (soft, hard))
    except (OSError, ValueError) as e:
        die(EXIT_INTERNAL, f"cannot set resource limit {which} to {(soft, hard)}: {e}")


def apply_boot_limits(boot):
    """``RLIMIT_CPU`` (not for a session: its runs count their own) and
    ``RLIMIT_AS`` from a checked ``boot`` frame."""
    cpu = boot["cpuSeconds"]
    if cpu and not boot.get("session", False):
        _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    address_space = boot["addressSpaceBytes"]
    if address_space:
        _set_limit(resource.RLIMIT_AS, address_space, address_space)


class Budgets:
    """One run's budgets: its own (a session run carries them) or boot's."""

    __slots__ = ("cpu_seconds", "max_log_bytes", "max_value_bytes")

    def __init__(self, run, boot):
        self.cpu_seconds = run.get("cpuSeconds", boot["cpuSeconds"])
        self.max_log_bytes = run.get("maxLogBytes", boot["maxLogBytes"])
        self.max_value_bytes = run.get("maxValueBytes", boot["maxValueBytes"])


def start_run(budgets, session):
    """Per-run state: the log ledger, and in a session the CPU budget counted
    from now (SIGXCPU ends the session's process when a run overspends, and
    each run's wall clock bounds one that handles SIGXCPU)."""
    start_ledger(budgets.max_log_bytes)
    cpu = budgets.cpu_seconds
    if session and cpu:
        usage = _getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime) + 1
        _, hard = _getrlimit(resource.RLIMIT_CPU)
        _set_limit(resource.RLIMIT_CPU, used + cpu, hard)
