"""The one way this project makes a CP-SAT solver: a time limit, a worker count and a seed
(deterministic answers), and Ctrl-C left to Python (CP-SAT would otherwise catch SIGINT, stop
its search and return as if the time were up, so an interrupted deploy would go on)."""
from __future__ import annotations

from ortools.sat.python import cp_model


def new_solver(time_limit_s: float, workers: int = 1, seed: int = 0) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.0, time_limit_s)
    p.num_workers = max(1, workers)
    p.random_seed = seed
    p.catch_sigint_signal = False
    return solver
