"""What the fuzzers found, and how each was fixed: the history bench/robustness_report.py prints.

Each entry names the hostile case (tests/hostile.py) that keeps it fixed; the suite checks
that every named case exists, and runs it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    reader: str
    found_by: str  # "atheris" | "hypothesis" | "--debug-guards"
    failure: str  # the exception and where, before the fix
    fix: str
    regression: str  # the name of the hostile case, or the test (path::name) that keeps it fixed


FIXED = [
    Finding("tflite", "atheris", "OverflowError in requant.round_away: a rescale whose float32 product overflowed",
            "a rescale factor that is not finite is refused, naming the op", "rescale overflowing float32"),
    Finding("tflite", "atheris", "AttributeError in tflite_reader._pool: no Pool2DOptions table",
            "ops whose options are required name the missing table", "options missing"),
    Finding("tflite", "atheris", "AttributeError in kernels._fc: int8 weights without quantization",
            "every int8 tensor an op reads must carry quantization", "weights without quantization"),
    Finding("tflite", "atheris", "AttributeError in ir.Tensor.scale: ADD reading an int32 constant",
            "constant operands of activation ops are type-checked like activations", "constant int32 operand of ADD"),
    Finding("tflite", "atheris", "IndexError in report_html.curve_figure: a model with no operators",
            "a graph needs operators, inputs and outputs", "no operators"),
    Finding("tflite", "atheris", "IndexError in tflite_reader._tensor: quantized dimension -3",
            "the quantized dimension must index the shape", "quantized dimension out of range"),
    Finding("tflite", "hypothesis", "KeyError in emit.render: a weight tensor listed as the graph output",
            "graph inputs and outputs must not be constants", "constant graph output"),
    Finding("tflite", "atheris", "ZeroDivisionError in kernels._concat: a scalar CONCATENATION output",
            "the axis must index the output, the inputs must concatenate to it", "concatenation of mismatched shapes"),
    Finding("tflite", "--debug-guards", "LOGISTIC wrote 96 bytes into its 1-byte output (canary after op 1)",
            "elementwise ops need one shape in and out; MEAN's output is checked", "elementwise output smaller than its input"),
    Finding("tflite", "hypothesis", "ValueError in golden.run: FULLY_CONNECTED declaring a scalar output",
            "FC and CONV outputs, batches and biases are checked against the weights", "fully connected output of the "
            "wrong size"),
    Finding("tflite", "hypothesis", "KeyError in pipeline.plan_level: -1 (an omitted input) as an op's data input",
            "required inputs may not be omitted", "omitted required input"),
    Finding("tflite", "hypothesis", "KeyError in pipeline.plan_level: an op writing a tensor another op writes",
            "ops have one output, and each tensor one writer", "tensor written twice"),
    Finding("safetensors", "review", "RecursionError in json.loads: a header nested 100,000 deep",
            "any JSON failure is the header's error", "tests/unit/test_gptneo.py::test_malformed_containers_are_named"),
    Finding("onnx", "atheris", "KeyError/TypeError/ValueError in numpy_helper.to_array on initializers",
            "tensor data is decoded by one checked helper naming the initializer", "onnx: initializer of undefined type"),
    Finding("onnx", "atheris", "ValueError in numpy_helper.to_array: raw data shorter than the dims",
            "(same helper)", "onnx: initializer shorter than its dims"),
    Finding("onnx", "atheris", "AttributeError/ValueError in onnx_reader._tensor_attr: a non-tensor attribute",
            "attributes must hold one number, named in the node's error",
            "onnx: RequantShift div that is not a number"),
    Finding("onnx", "atheris", "IndexError in onnx_common.where: a node without outputs",
            "the node's place is named without its output", "onnx: node without outputs"),
    Finding("onnx", "atheris", "IndexError in onnx_common._constant_value: a Constant without output",
            "Constant nodes need an output", "onnx: Constant without output"),
    Finding("onnx", "atheris", "hang (libFuzzer timeout) in onnx_common.input_with_pads: two Pads reading each other",
            "the walk back through zero Pads stops at a cycle", "onnx: cycle of Pad nodes"),
    Finding("onnx", "atheris", "TypeError in emit._short / plan_checker: tensor names that are not UTF-8",
            "names must be valid UTF-8", "onnx: name not UTF-8"),
]
