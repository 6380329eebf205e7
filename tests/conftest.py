"""Test-wide settings: hypothesis runs the same examples every time (reproducible CI);
pass --hypothesis-seed=N to explore others."""
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, deadline=None)
settings.load_profile("deterministic")
