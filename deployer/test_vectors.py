"""A model's own test vectors, found beside it, and the conversions between a model's layout and
its engine's.

* DORY's example networks: ``input.txt`` and one ``out_layerN.txt`` per layer (a header line,
  then comma-separated values; activations in DORY's H, W, C order);
* Deeploy's test networks: ``inputs.npz`` and ``outputs.npz`` (arrays in the graph's order and
  layout; an ``inputs.npz`` may hold more arrays than the graph has inputs, e.g. weights).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from network_parser.errors import ModelFormatError
from network_parser.ir import Graph
from network_parser.side_files import VECTOR_BYTES, VECTOR_TEXT_BYTES, read_npz, read_text

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRAY = re.compile(r"[^\s,\\]")  # DORY writes commas and line continuations between the values
_DUMP = re.compile(r"out_layer(\d+)\.txt")


@dataclass(frozen=True)
class TestVectors:
    source: str  # "dory" | "deeploy"
    inputs: list[np.ndarray]  # in the model's own layout
    outputs: list[np.ndarray] | None  # in the model's own layout (None: the dumps do not hold them)
    layers: list[np.ndarray]  # DORY: every layer's output, flat, in the file's order
    note: str = ""  # what the vectors cover when it is not the graph's outputs

    @property
    def description(self) -> str:
        return {"dory": "the model's out_layerN.txt (DORY)", "deeploy": "the model's outputs.npz (Deeploy)"}[self.source]


_HEADER = re.compile(r"#?\s*(.*?)\s*\(shape \[([\d,\s]*)\]\)")


def dump_header(path: Path) -> tuple[str, tuple[int, ...]] | None:
    """(layer name, shape) a DORY dump's header line states (``# fc (shape [2])``), if it does."""
    head = read_text(path, what="a DORY test vector", max_bytes=VECTOR_TEXT_BYTES).partition("\n")[0]
    m = _HEADER.match(head)
    if m is None:
        return None
    return m.group(1), tuple(int(v) for v in m.group(2).replace(",", " ").split())


def read_dory_txt(path: Path) -> np.ndarray:
    """The values of a DORY dump (its header line names the tensor; numbers only follow)."""
    text = read_text(path, what="a DORY test vector", max_bytes=VECTOR_TEXT_BYTES)
    _, _, body = text.partition("\n")
    stray = _STRAY.search(_NUMBER.sub(lambda m: " " * len(m.group()), body))  # same length: same positions
    if stray:
        line = 2 + body.count("\n", 0, stray.start())
        raise ModelFormatError(f"{path}: line {line} holds something other than numbers")
    values = np.array([float(v) for v in _NUMBER.findall(body)], dtype=np.float64)
    if not np.isfinite(values).all():
        raise ModelFormatError(f"{path}: a value is out of the floating-point range")
    return values


def _dumps(folder: Path) -> list[Path]:
    """out_layerN.txt in the order of N (names that only look like one are not dumps)."""
    found = [(int(m.group(1)), p) for p in folder.glob("out_layer*.txt") if (m := _DUMP.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def find_vectors(model: Path, graph: Graph) -> TestVectors | None:
    """The test vectors that ship beside ``model`` (None when there are none)."""
    folder = Path(model).parent
    src = graph.source
    if src is None or not src.input_shapes:
        return None
    if (folder / "inputs.npz").exists() and (folder / "outputs.npz").exists():
        ins = list(read_npz(folder / "inputs.npz", what="the model's test inputs").values())
        outs = list(read_npz(folder / "outputs.npz", what="the model's expected outputs").values())
        if len(ins) < len(graph.inputs) or len(outs) < len(graph.outputs):
            raise ModelFormatError(f"{folder}: inputs.npz / outputs.npz hold {len(ins)} / {len(outs)} arrays for "
                                   f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
        shaped = []
        for x, shape in zip(ins, src.input_shapes):
            if x.size != int(np.prod(shape)):
                raise ModelFormatError(f"{folder / 'inputs.npz'}: {x.size} values for an input of shape {list(shape)}")
            shaped.append(x.reshape(shape))
        for y, shape in zip(outs, src.output_shapes):
            if y.size != int(np.prod(shape)):
                raise ModelFormatError(f"{folder / 'outputs.npz'}: {y.size} values for an output of shape "
                                       f"{list(shape)}")
        return TestVectors("deeploy", shaped, [o.reshape(s) for o, s in zip(outs, src.output_shapes)], [])
    dumps = _dumps(folder)
    if (folder / "input.txt").exists() and dumps and len(graph.inputs) == 1:
        shape = src.input_shapes[0]
        x = read_dory_txt(folder / "input.txt")
        if x.size != int(np.prod(shape)):
            raise ModelFormatError(f"{folder / 'input.txt'}: {x.size} values for an input of shape {list(shape)}")
        # DORY writes activations channels last: (H, W, C) of an (N, C, H, W) input
        x = np.moveaxis(x.reshape(*shape[2:], shape[1]), -1, 0).reshape(shape) if len(shape) > 2 else x.reshape(shape)
        layers, total = [], 0
        for p in dumps:  # each dump is capped; so are all of them together
            layers.append(read_dory_txt(p))
            total += layers[-1].nbytes
            if total > VECTOR_BYTES:
                raise ModelFormatError(f"{folder}: the out_layerN.txt dumps hold over {VECTOR_BYTES:,} bytes of values")
        last = layers[-1]
        out_shape = src.output_shapes[0]
        header = dump_header(dumps[-1])
        stated = header is not None and int(np.prod(header[1], dtype=np.int64)) == last.size
        if last.size != int(np.prod(out_shape)) and not stated:
            raise ModelFormatError(f"{dumps[-1]}: {last.size} values for the output of shape {list(out_shape)}")
        if last.size != int(np.prod(out_shape)) or len(graph.outputs) != 1:
            # the dumps hold DORY's layers (the header says which): ops after its last one (a Gather
            # of the scores) are not in them
            layer = f"'{header[0]}', " if header and header[0] else ""
            return TestVectors("dory", [x], None, layers,
                               f"{dumps[-1].name} holds DORY's last layer ({layer}{last.size} values), not the "
                               f"graph's output (shape {list(out_shape)}): the outputs are the reference's")
        y = np.moveaxis(last.reshape(*out_shape[2:], out_shape[1]), -1, 0).reshape(out_shape) \
            if len(out_shape) > 2 else last.reshape(out_shape)
        return TestVectors("dory", [x], [y], layers)
    return None


# ---- the model's layout <-> the engine's -----------------------------------------------

def _to_engine(x, perm, model_shape, engine_shape) -> np.ndarray:
    x = np.asarray(x)
    if perm is not None:
        x = np.transpose(x.reshape(model_shape), perm)
    return np.ascontiguousarray(x).reshape(engine_shape)


def to_engine_input(graph: Graph, i: int, x: np.ndarray) -> np.ndarray:
    """Input ``i`` as the model file lays it out -> as the engine takes it."""
    from .golden import NP_DTYPES
    t, src = graph.tensors[graph.inputs[i]], graph.source
    perm = src.input_perms[i] if src and src.input_perms else None
    dtype = np.dtype(NP_DTYPES[t.dtype])
    x = np.asarray(x)
    if dtype.kind in "iu" and x.size and (x.min() < np.iinfo(dtype).min or x.max() > np.iinfo(dtype).max):
        raise ModelFormatError(f"input '{t.name}' is {t.dtype} but the test values reach {x.min():g}..{x.max():g} "
                               f"(--input-type says which integers the input holds)")
    return _to_engine(x, perm, src.input_shapes[i] if perm else None, t.shape).astype(dtype)


def to_engine_output(graph: Graph, j: int, y: np.ndarray) -> np.ndarray:
    """Output ``j`` as the model file lays it out -> as the engine writes it."""
    t, src = graph.tensors[graph.outputs[j]], graph.source
    perm = src.output_perms[j] if src and src.output_perms else None
    return _to_engine(y, perm, src.output_shapes[j] if perm else None, t.shape)


def to_model_input(graph: Graph, i: int, x: np.ndarray) -> np.ndarray:
    """Input ``i`` as the engine takes it -> as the model file lays it out."""
    src = graph.source
    if src is None or not src.input_shapes:
        return x
    perm = src.input_perms[i]
    if perm is None:
        return np.asarray(x).reshape(src.input_shapes[i])
    shape = src.input_shapes[i]
    return np.transpose(np.asarray(x).reshape([shape[p] for p in perm]), np.argsort(perm))


def to_engine_outputs(graph: Graph, outputs: list[np.ndarray]) -> list[np.ndarray]:
    return [to_engine_output(graph, j, y) for j, y in enumerate(outputs)]


def model_input_type(model: Path, given: str | None) -> str | None:
    """An integer ONNX graph's input range: as given (--input-type), else from the test vectors
    beside it."""
    if given is not None or Path(model).suffix.lower() != ".onnx":
        return given
    return vector_input_range(Path(model))


def vector_input_range(model: Path) -> str | None:
    """"int8" or "uint8" when the first test input beside ``model`` tells (negative values, or
    values above 127), "int16" for values past 8 bits; None when there is none or either fits."""
    folder = Path(model).parent
    x = None
    if (folder / "inputs.npz").exists():
        arrays = list(read_npz(folder / "inputs.npz", what="the model's test inputs").values())
        x = arrays[0] if arrays else None
    elif (folder / "input.txt").exists():
        x = read_dory_txt(folder / "input.txt")
    if x is None or x.size == 0:
        return None
    if x.min() < -128 or x.max() > 255:  # past 8 bits: Deeploy's 16-bit data (its type follows the values' range)
        return "int16" if -32768 <= x.min() and x.max() <= 32767 else None
    if x.min() < 0:
        return "int8"
    return "uint8" if x.max() > 127 else None
