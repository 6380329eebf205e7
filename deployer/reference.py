"""Reference interpreters: LiteRT's reference kernels, TFLite Micro where LiteRT refuses a file, and
onnxruntime for ONNX graphs."""
from __future__ import annotations

import functools
import importlib
from pathlib import Path

import numpy as np

from network_parser.errors import UsageError
from network_parser.side_files import read_model_file

# the reference interpreters are the [reference] extra: module -> its package on the registry
PACKAGES = {"ai_edge_litert.interpreter": "ai-edge-litert", "tflite_micro": "tflite-micro",
            "onnxruntime": "onnxruntime"}


def reference_module(name: str):
    """A reference interpreter's module; not installed, a usage error that names the package and
    the extra that brings it (the deployer itself runs without them)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        package = PACKAGES[name]
        raise UsageError(f"verifying needs the reference interpreter {package}, which is not installed: "
                         f"pip install -e '.[reference]' (or pip install {package})") from None


def run_litert(model: Path, inputs: list[np.ndarray], preserve: bool = False):
    """Outputs of LiteRT's BUILTIN_REF kernels, one thread; with ``preserve`` also every tensor."""
    return _litert_stream(model, [inputs], frozenset(), preserve)[0]


class Runs(list):
    """(outputs, tensors or None) per sample of a stream, and the interpreter that ran it."""
    interpreter = "litert-builtin-ref"


def run_litert_stream(model: Path, samples: list[list[np.ndarray]], resets: frozenset[int] = frozenset(),
                      preserve: bool = False) -> Runs:
    """(outputs, tensors or None) per sample of a stream run by one LiteRT interpreter: a model's
    variable tensors (a recurrent layer's state) carry from one invocation to the next, and
    are reset (reset_all_variables) before the samples whose index is in ``resets``. A file LiteRT
    refuses (a quantized dimension it does not take) runs on TFLite Micro's interpreter the same
    way (its reset()), without per-tensor values (``Runs.interpreter`` says which)."""
    if not _tflm_only(Path(model)):
        try:
            return _litert_stream(model, samples, resets, preserve)
        except (ValueError, RuntimeError) as e:
            if "quantized_dimension" not in str(e):
                raise
    runs = Runs(_tflm_stream(model, samples, resets))
    runs.interpreter = "tflite-micro"
    return runs


def _tflm_only(model: Path) -> bool:
    """A file only TFLite Micro runs as written: an SVDF with int8 time weights and state, which
    LiteRT accepts and reads as int16 ones (wrong values, no error), or a QUANTIZE to or from
    int32, which LiteRT refuses."""
    st = Path(model).stat()
    return _tflm_only_file(str(model), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _tflm_only_file(model: str, mtime_ns: int, size: int) -> bool:
    """_tflm_only per file version (verify asks once per sample)."""
    import tflite

    m = tflite.Model.GetRootAsModel(read_model_file(Path(model)), 0)
    g = m.Subgraphs(0)
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        code = max(m.OperatorCodes(op.OpcodeIndex()).BuiltinCode(), m.OperatorCodes(op.OpcodeIndex()).DeprecatedBuiltinCode())
        if code == tflite.BuiltinOperator.SVDF and \
                op.InputsLength() > 2 and g.Tensors(op.Inputs(2)).Type() == tflite.TensorType.INT8:
            return True
        if code == tflite.BuiltinOperator.QUANTIZE and tflite.TensorType.INT32 in \
                [g.Tensors(t).Type() for t in (*op.InputsAsNumpy(), *op.OutputsAsNumpy()) if t >= 0]:
            return True
    return False


def _litert_stream(model: Path, samples, resets, preserve: bool) -> Runs:
    litert = reference_module("ai_edge_litert.interpreter")
    Interpreter, OpResolverType = litert.Interpreter, litert.OpResolverType

    try:
        it = Interpreter(model_content=read_model_file(model), num_threads=1,  # the bytes the readers checked
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         experimental_preserve_all_tensors=preserve)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        if "quantized_dimension" in str(e):  # TFLite Micro takes such a file (run_litert_stream)
            raise
        from network_parser.errors import UnsupportedOperator  # the model's to answer for, not ours: exit 1
        raise UnsupportedOperator(f"{Path(model).name}: LiteRT's reference kernels refuse the model "
                                  f"({' '.join(str(e).split())[:200]}); there is nothing to verify against") from None
    results = []
    for n, inputs in enumerate(samples):
        if n in resets:
            it.reset_all_variables()
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], np.asarray(x).reshape(d["shape"]).astype(d["dtype"]))
        it.invoke()
        outs = [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
        tensors = None
        if preserve:
            tensors = {}
            for d in it.get_tensor_details():
                try:
                    tensors[d["index"]] = it.get_tensor(d["index"]).copy()
                except ValueError:
                    pass
        results.append((outs, tensors))
    return Runs(results)


def run_tflm(model: Path, inputs: list[np.ndarray]):
    """Outputs of the TFLite Micro interpreter (its reference kernels)."""
    return _tflm_stream(model, [inputs])[0]


def _tflm_stream(model: Path, samples: list[list[np.ndarray]], resets: frozenset[int] = frozenset()) -> list[tuple]:
    """(outputs, None) per sample of a stream run by one TFLite Micro interpreter (reset() before
    the samples in ``resets``)."""
    import tflite
    runtime = reference_module("tflite_micro").runtime

    buf = read_model_file(model)
    n_outputs = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0).OutputsLength()
    # Its default arena (10x the file size) is too small for small files with large activations.
    it = runtime.Interpreter.from_bytes(buf, arena_size=max(10 * len(buf), 4 << 20))
    results = []
    for n, inputs in enumerate(samples):
        if n in resets:
            it.reset()
        for i, x in enumerate(inputs):
            d = it.get_input_details(i)
            it.set_input(np.asarray(x).reshape(d["shape"]).astype(d["dtype"]), i)
        it.invoke()
        results.append(([it.get_output(i).copy() for i in range(n_outputs)], None))
    return results


def onnxruntime_options():
    """The session options of the reference: onnxruntime's quantized kernels with exact int32
    products, the same on every CPU.

    Every graph optimization stays on: the quantized ONNX lowering repeats the kernels onnxruntime
    fuses QDQ groups into (QLinearConv, QGemm, QLinearAveragePool, ...), not the float ops of an
    unfused QDQ graph. On x86 without VNNI (AVX2, AVX-512 without VNNI) onnxruntime multiplies
    uint8 activations by int8 weights with VPMADDUBSW, which saturates the sum of each pair of
    products to int16 (a 255 * 127 + 255 * 127 pair gives 32767, not 64770): its outputs then
    depend on the CPU, and a layer whose inputs reach those values is off by tens of steps.
    ``session.x64quantprecision`` is onnxruntime's documented switch for this: on those CPUs
    only, an optimization pass stores the int8 weights as uint8 (w + 128, zero point + 128, the
    same values) so that the exact uint8 x uint8 kernels run. Elsewhere it changes nothing."""
    ort = reference_module("onnxruntime")

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.x64quantprecision", "1")
    return options


def run_onnxruntime(model: Path, inputs: list[np.ndarray], outputs: list[str] | None = None):
    """Outputs of onnxruntime's CPU provider with ``onnxruntime_options`` (inputs and outputs in
    the model's own layout); ``outputs`` names the values to return when they are not the graph's
    (the input of a float op the engine leaves to the application)."""
    import onnx
    ort = reference_module("onnxruntime")

    from network_parser.errors import UnsupportedOperator
    options = onnxruntime_options()
    source = read_model_file(model)  # parsed from bytes: never a file the model names
    proto = onnx.load_model_from_string(source)
    declared = [o.name for o in proto.graph.output]
    if outputs is not None and outputs != declared:
        inferred = onnx.shape_inference.infer_shapes(proto)
        types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.output)}
        del proto.graph.output[:]
        for name in outputs:
            proto.graph.output.append(onnx.helper.make_tensor_value_info(name, types.get(name, onnx.TensorProto.FLOAT), None))
        source = proto.SerializeToString()
    try:
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # custom ops (Deeploy's RequantShift) have no kernel there
        raise UnsupportedOperator(f"{model}: onnxruntime cannot run this graph ({str(e).splitlines()[0][:200]}); "
                                  f"verify it against its own test vectors (beside the model, or --input "
                                  f"with --expected)") from None
    types = {"tensor(float)": np.float32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32}
    feed = {d.name: np.asarray(x).reshape(d.shape).astype(types.get(d.type, np.float32))
            for d, x in zip(session.get_inputs(), inputs)}
    return session.run(None, feed)


def _onnx_cut_values(model: Path, inputs: list[np.ndarray], graph):
    """onnxruntime on the whole file (``inputs``: its own, as the engine lays them out), read at
    a cut graph's edges: (the file's outputs, {tensor: value} for the file's edges and the cut's),
    each in the IR's layout and stored type."""
    from .test_vectors import to_engine_outputs, to_model_input
    edges = graph.file_edges
    whole = graph.file_view()
    feed = [to_model_input(whole, i, x) for i, x in enumerate(inputs)]
    file_outs = to_engine_outputs(whole, run_onnxruntime(model, feed, [graph.tensors[o].name for o in edges.outputs]))
    values = dict(zip(edges.inputs, inputs)) | dict(zip(edges.outputs, file_outs))
    for t, name, rank in edges.named:
        y = _onnx_value(model, feed, name, graph.tensors[t].quant)
        if rank == 4:
            y = y.transpose(0, 2, 3, 1)
        elif rank == 3:
            y = y.transpose(0, 2, 1)
        values[t] = y.reshape(graph.tensors[t].shape)
    return file_outs, values


def _onnx_value(model: Path, feed: list[np.ndarray], name: str, quant) -> np.ndarray:
    """The quantized value ``name`` of an ONNX graph as onnxruntime computes it inside the whole
    graph, in the IR's int8 (a uint8 value less 128).

    Asking onnxruntime for an inner value as a graph output changes what it computes: a quantized
    op whose output is a graph output (or has a second reader) is not fused into its integer
    kernel, and runs in float. So the graph is pruned to what ``name`` depends on and ends as
    every quantized graph does, ``name`` read by one DequantizeLinear; its float output,
    quantized back with the same parameters, is the stored value (exactly: |q - zp| <= 255)."""
    stat = Path(model).stat()
    session, names, zp, shift = _value_probe(str(model), stat.st_mtime_ns, stat.st_size, name, quant.scale[0],
                                             quant.zero_point[0])
    y = session.run(None, dict(zip(names, feed)))[0]
    return (np.rint(y / np.float32(quant.scale[0])).astype(np.int64) + zp - shift).astype(np.int8)


@functools.lru_cache(maxsize=64)
def _value_probe(model: str, mtime_ns: int, size: int, name: str, scale: float, zero_point: int):
    """(session, its input names, the DequantizeLinear's zero point, 128 for a uint8 value) of the
    graph pruned to ``name`` and ending in a DequantizeLinear of it (per file version: a cut's
    edges are read for every sample)."""
    import onnx
    ort = reference_module("onnxruntime")
    from onnx import TensorProto, helper

    proto = onnx.load_model_from_string(read_model_file(Path(model)))
    writer = {o: n for n in proto.graph.node for o in n.output}
    kept, stack = set(), [name]
    while stack:
        node = writer.get(stack.pop())
        if node is not None and id(node) not in kept:
            kept.add(id(node))
            stack.extend(node.input)
    nodes = [n for n in proto.graph.node if id(n) in kept]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    del proto.graph.output[:]
    # its stored type, from an unoptimized run on zeros (the value itself is not used)
    names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    proto.graph.output.append(onnx.ValueInfoProto(name=name))
    plain = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {i.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
                             {"tensor(float)": np.float32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}.get(i.type, np.float32))
            for i in plain.get_inputs()}
    stored = plain.run(None, feed)[0].dtype
    if stored not in (np.int8, np.uint8):
        raise ValueError(f"'{name}' holds {stored} values, not quantized ones")
    shift = 128 if stored == np.uint8 else 0
    zp = zero_point + shift
    del proto.graph.output[:]
    probe = f"{name}/dequantized"
    proto.graph.initializer.extend([
        helper.make_tensor(f"{probe}/scale", TensorProto.FLOAT, [], [float(np.float32(scale))]),
        helper.make_tensor(f"{probe}/zero_point", TensorProto.UINT8 if shift else TensorProto.INT8, [], [zp])])
    proto.graph.node.append(helper.make_node("DequantizeLinear", [name, f"{probe}/scale", f"{probe}/zero_point"], [probe]))
    proto.graph.output.append(helper.make_tensor_value_info(probe, TensorProto.FLOAT, None))
    session = ort.InferenceSession(proto.SerializeToString(), onnxruntime_options(), providers=["CPUExecutionProvider"])
    return session, names, zp, shift


def run_reference(model: Path, inputs: list[np.ndarray], preserve: bool = False, graph=None):
    """(name, outputs, tensors-or-None): LiteRT, or TFLite Micro for files LiteRT refuses; for
    an ONNX model onnxruntime (``graph``, the deployed IR, maps the layouts; per-tensor values
    only at a cut graph's edges)."""
    if Path(model).suffix.lower() == ".onnx":
        from .test_vectors import to_engine_outputs, to_model_input
        if graph.file_edges is not None:  # a cut graph: ``inputs`` are its file's
            return "onnxruntime", *_onnx_cut_values(model, inputs, graph)
        outs = run_onnxruntime(model, [to_model_input(graph, i, x) for i, x in enumerate(inputs)],
                               [graph.tensors[o].name for o in graph.outputs])
        return "onnxruntime", to_engine_outputs(graph, outs), None
    try:
        if _tflm_only(Path(model)):  # LiteRT would give wrong values without an error
            raise ValueError("quantized_dimension: TFLite Micro's alone")
        outs, tensors = run_litert(model, inputs, preserve)
        return "litert-builtin-ref", outs, tensors
    except (ValueError, RuntimeError) as e:
        if "quantized_dimension" not in str(e):
            raise
    outs, tensors = run_tflm(model, inputs)
    return "tflite-micro", outs, tensors
