"""The one way this project makes and runs a CP-SAT solver.

Reproducible answers: the same model and flags give the same plan on any machine, however
busy. So a search stops on CP-SAT's deterministic time (a count of work done, not seconds),
``DTIME_PER_S`` of it per second of --time-limit, in one worker (or CP-SAT's deterministic
parallel mode, ``interleave_search``) with a fixed seed. Wall time is only a watchdog, a few
times the limit plus a margin: when it is what stopped a search, the answer may differ run to
run, and ``solve`` says so in a warning.

Ctrl-C is left to Python (CP-SAT would otherwise catch SIGINT, stop its search and return as
if the time were up, so an interrupted deploy would go on).
"""
from __future__ import annotations

import threading
import time
import warnings

from ortools.sat.python import cp_model

# CP-SAT's deterministic time per second of time limit. Measured on one core on MiniMalloc's
# arena instances (the hardest this project solves): a minimisation, or a decision search
# following a bottom-up strategy, does 0.015-0.06 deterministic units a second; small models
# do more. So a budget rarely outlasts the watchdog, and on most models the search stops at
# the same point on every machine.
DTIME_PER_S = 0.02
WATCHDOG_FACTOR = 2.0  # the watchdog fires at this many times the limit ...
WATCHDOG_MARGIN_S = 1.0  # ... plus this margin (a step that runs long: presolve of a large model)
WATCHDOG_WARNING = "stopped by the wall-clock watchdog; the plan may differ run to run"


def dtime(limit_s: float, per_s: float = DTIME_PER_S) -> float:
    """The deterministic time a limit of ``limit_s`` seconds grants."""
    return max(0.0, limit_s) * per_s


def watchdog_s(limit_s: float) -> float:
    """Wall seconds after which a search with a limit of ``limit_s`` is stopped regardless."""
    return WATCHDOG_FACTOR * max(0.0, limit_s) + WATCHDOG_MARGIN_S


def new_solver(time_limit_s: float, workers: int = 1, seed: int = 0, deadline: float | None = None,
               dtime_per_s: float = DTIME_PER_S) -> cp_model.CpSolver:
    """A solver granted ``dtime(time_limit_s, dtime_per_s)``; its wall-clock watchdog is
    ``watchdog_s`` of the limit, or less when the caller's whole search must end by
    ``deadline`` (time.monotonic)."""
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_deterministic_time = dtime(time_limit_s, dtime_per_s)
    wall = watchdog_s(time_limit_s)
    if deadline is not None:
        wall = min(wall, deadline - time.monotonic())
    p.max_time_in_seconds = max(0.0, wall)
    p.num_workers = max(1, workers)
    p.interleave_search = workers > 1  # several workers, but deterministically interleaved
    p.random_seed = seed
    p.catch_sigint_signal = False
    return solver


def spent_s(solver: cp_model.CpSolver, time_limit_s: float) -> float:
    """The share of ``time_limit_s`` the last solve used, by its deterministic time: what a
    caller sharing one budget between several searches charges for it (the same on every
    machine, when the search ended on its own)."""
    granted = solver.parameters.max_deterministic_time
    used = solver.response_proto.deterministic_time
    return max(0.0, time_limit_s) * (min(1.0, used / granted) if granted > 0 else 1.0)


_DECIDED = (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID)


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, deadline_s: float | None = None,
          what: str = "CP-SAT", warn: bool = True) -> int:
    """``solver.solve(model)``, stopped by a watchdog thread once ``deadline_s`` (default: the
    solver's wall-clock limit plus a margin, for steps that overrun it) has passed. A search
    that the wall clock, not its deterministic time, cut short is reported by a warning naming
    ``what`` (unless ``warn`` is False: a complete search settles the answer anyway): its
    answer depends on the machine's speed."""
    p = solver.parameters
    if deadline_s is None:
        deadline_s = p.max_time_in_seconds + WATCHDOG_MARGIN_S
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        solver.stop_search()

    timer = threading.Timer(max(0.0, deadline_s), stop)
    timer.daemon = True
    timer.start()
    try:
        status = solver.solve(model)
    finally:
        timer.cancel()
    r = solver.response_proto
    # CP-SAT's own wall-clock limit stops it at about max_time_in_seconds (it may report a
    # hair less); a search stopped early by its caller (a portfolio's loser) is no concern
    if warn and status not in _DECIDED and r.deterministic_time < p.max_deterministic_time and \
            (fired.is_set() or r.wall_time >= 0.95 * p.max_time_in_seconds):
        warnings.warn(f"{what}: {WATCHDOG_WARNING}", RuntimeWarning, stacklevel=2)
    return status
