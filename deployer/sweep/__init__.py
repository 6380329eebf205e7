"""deploy sweep: many deployments of models over targets, budgets and solvers, one table.

    spec = read_spec(models, flags, sweep_file)     # axes: lists and ranges (axes.py)
    points = spec.points()                          # their product, each keyed by a digest (point.py)
    rows = execute(points, runner)                  # serial, a process pool or Ray (execute.py)
    journal, tables                                 # rows as they arrive; Parquet and CSV (journal.py)
    report.html                                     # Pareto fronts, the smallest part (report.py)

A point is one deployment through the same plan ``deploy`` makes, in-process; only builds and
QEMU runs are subprocesses. Its row depends on the model, its axes and the deployer's sources,
never on the machine's load: only the columns ending in ``_s`` (wall times) differ run to run.
"""
