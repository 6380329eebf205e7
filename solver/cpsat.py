"""The one way this project makes a CP-SAT solver: a time limit, a worker count and a seed
(deterministic answers), and Ctrl-C left to Python (CP-SAT would otherwise catch SIGINT, stop
its search and return as if the time were up, so an interrupted deploy would go on)."""
from __future__ import annotations

import threading

from ortools.sat.python import cp_model


def new_solver(time_limit_s: float, workers: int = 1, seed: int = 0) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.0, time_limit_s)
    p.num_workers = max(1, workers)
    p.random_seed = seed
    p.catch_sigint_signal = False
    return solver


# CP-SAT checks its time limit between steps; a step that runs long (presolve of a large
# model) can overrun it. The watchdog stops the search at the limit plus this margin.
WATCHDOG_MARGIN_S = 1.0


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, deadline_s: float | None = None) -> int:
    """``solver.solve(model)``, stopped by a watchdog thread once ``deadline_s`` (default: the
    solver's time limit plus a margin) has passed: a solve never outlives its budget by much."""
    if deadline_s is None:
        deadline_s = solver.parameters.max_time_in_seconds + WATCHDOG_MARGIN_S
    timer = threading.Timer(max(0.0, deadline_s), solver.stop_search)
    timer.daemon = True
    timer.start()
    try:
        return solver.solve(model)
    finally:
        timer.cancel()
