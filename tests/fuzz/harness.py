"""One fuzz input through the deployer's front half: read -> rewrites -> lower -> plan -> emit
(and deploy suggest's operator inventory).

Every input must either make an engine or raise one of our documented errors (a
``DeployError``); anything else is a finding. ``exercise`` returns the outcome's name;
``signature`` names a finding by exception type and the innermost frame of our own code,
so one bug found by a thousand inputs counts once.
"""
from __future__ import annotations

import json
import os
import tempfile
import traceback
from pathlib import Path

from deployer.pipeline import Options, finish, plan_deployment
from network_parser.errors import DeployError
from network_parser.inventory import inventory

ROOT = Path(__file__).resolve().parents[2]
READERS = {"tflite": ".tflite", "onnx": ".onnx", "safetensors": ".safetensors"}

# Fast, deterministic planning: the greedy planner and tiler, no patch search. The solvers'
# own faults are exercised by tests/unit/test_solver_faults.py.
FAST = Options(planner="first-fit", tiler="greedy", patch="off", time_limit_s=1.0)

_SCRATCH = Path(tempfile.mkdtemp(prefix="deploy-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))


def exercise(reader: str, data: bytes, options: Options = FAST, golden: bool = False) -> str:
    """'ok', or the DeployError kind the input raised; any other exception propagates.
    ``golden``: a model the deployer accepts must also run through the numpy golden executor
    on a random input (it reshapes every layer's result to the declared output shape, so a
    graph whose shapes do not add up fails there instead of in the generated C)."""
    if reader == "safetensors":
        return _exercise_gptneo(data)
    path = _SCRATCH / f"input{READERS[reader]}"
    path.write_bytes(data)
    try:  # deploy suggest's lenient operator inventory reads what the readers reject
        inventory(path)
    except DeployError:
        pass
    try:
        dep = finish(plan_deployment(path, options))
    except DeployError as e:
        return e.kind
    if golden:
        from deployer import golden as executor
        from deployer.verify import random_inputs
        executor.run(dep.graph, random_inputs(dep.graph, 0), dep.kernels)
    return "ok"


def _exercise_gptneo(data: bytes) -> str:
    """A .safetensors input beside the seeds' config.json: read, checked, and one token run
    through the reference (float and Q4_0 weights with an int4 KV cache)."""
    from deployer.decoder_executor import Session
    from network_parser.gptneo import read_gptneo
    from tests.gptneo_builder import config

    folder = _SCRATCH / "gptneo"
    if not (folder / "config.json").exists():
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config()))
    path = folder / "model.safetensors"
    path.write_bytes(data)
    try:
        model = read_gptneo(path)
    except DeployError as e:
        return e.kind
    for kw in ({}, {"weights": "q4_0", "kv": "int4"}):
        Session(model, context=4, **kw).step(1)
    return "ok"


def signature(error: BaseException) -> str:
    """'TypeError at network_parser/onnx_reader.py:123 in _conv': where our code failed."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(ROOT)) and "/tests/" not in f.filename]
    at = ours[-1] if ours else (frames[-1] if frames else None)
    where = f" at {Path(at.filename).resolve().relative_to(ROOT) if ours else at.filename}:{at.lineno} in {at.name}" if at else ""
    return f"{type(error).__name__}{where}"
