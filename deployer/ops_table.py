"""The operator support table (``deploy ops``), made from the tables the code itself runs by:
the readers' operator lists, each lowering's kernel records, the tiler's and the patch split's
kernels, the in-place rules and every target's kernel variants."""
from __future__ import annotations

import typing

from backends import BACKENDS
from layer_analyzer import kernels as K
from layer_analyzer.receptive_field import SPATIAL
from layer_analyzer.tiling import TILED
from network_parser.inplace import in_place_rules
from network_parser.onnx_qdq import ACTIVATION_OPS, FLOAT_OPS, GLUE_OPS, QLINEAR_OPS
from network_parser.onnx_reader import INTEGER_OPS
from network_parser.tflite_reader import REFUSED, supported_operators


def kernel_types(op: str) -> tuple[type, ...]:
    """The kernel records an IR op may lower to (its lowering's return annotation)."""
    hint = typing.get_type_hints(K.LOWERINGS[op])["return"]
    return typing.get_args(hint) or (hint,)


def _dsp(kinds: tuple[type, ...]) -> dict[str, list[str]]:
    """Per target with kernel variants of its own: the rules that may run these kernels."""
    result = {}
    for name, backend in sorted(BACKENDS.items()):
        rules = tuple(rule.name for rule in backend.variants if set(rule.kernels) & set(kinds))
        if rules:
            result[name] = list(rules)
    return result


def tflite_table() -> list[dict]:
    rows = []
    for op, (ins, outs, lowered) in sorted(supported_operators().items()):
        kinds = kernel_types(lowered)
        rows.append(dict(operator=op, inputs=list(ins), outputs=list(outs), read_as=lowered,
                         kernels=[k.__name__ for k in kinds], tiled=any(issubclass(k, TILED) for k in kinds),
                         patches=any(issubclass(k, SPATIAL) for k in kinds), in_place=list(in_place_rules(lowered)),
                         dsp=_dsp(kinds)))
    return rows


def onnx_table() -> dict[str, list[str]]:
    return {"integer graphs (NEMO, Quantlab, Deeploy)": sorted(INTEGER_OPS),
            "QDQ graphs": sorted({*FLOAT_OPS, *ACTIVATION_OPS, *GLUE_OPS, "QuantizeLinear", "DequantizeLinear"}),
            "QOperator graphs": sorted(QLINEAR_OPS)}


def ops_json() -> dict:
    return {"tflite": tflite_table(), "tflite_refused": dict(sorted(REFUSED.items())), "onnx": onnx_table(),
            "targets": sorted(BACKENDS)}


def ops_text() -> str:
    rows = tflite_table()
    table = []
    for r in rows:
        types = "int8" if r["inputs"] == r["outputs"] == ["int8"] else f"{'/'.join(r['inputs'])} -> {'/'.join(r['outputs'])}"
        dsp = "; ".join(f"{', '.join(rules)} ({', '.join(t for t, v in r['dsp'].items() if tuple(v) == rules)})"
                        for rules in {tuple(v): None for v in r["dsp"].values()})
        table.append((r["operator"], types, "yes" if r["tiled"] else "-", "yes" if r["patches"] else "-",
                      ", ".join(r["in_place"]) or "-", dsp or "-"))
    head = ("operator", "types", "tiled", "patches", "in place", "DSP kernels (targets)")
    widths = [max(len(row[i]) for row in (head, *table)) for i in range(len(head) - 1)]
    lines = [f"TFLite operators: {len(rows)} (every target runs every one with its portable C kernels; tiles and "
             f"patches take 16-bit convolutions, pooling, ADD/SUB/MUL and FC too, the DSP kernels 16-bit "
             f"convolutions and FC: whole, and on some targets tile by tile)", ""]
    for row in (head, *table):
        lines.append("  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + "  " + row[-1])
    lines += ["", "TFLite operators refused on purpose:"]
    lines += [f"  {op}: {why}" for op, why in sorted(REFUSED.items())]
    lines += ["", "ONNX operators:"]
    lines += [f"  {kind}: {', '.join(ops)}" for kind, ops in onnx_table().items()]
    return "\n".join(lines)
