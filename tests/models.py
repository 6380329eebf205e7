"""Where the reference models live, and which of them the deployer supports: the repository's
copies (tests/model_files, with their sources and licences) first, then a ``shared`` folder
beside the checkout; a test whose model is in neither skips and says where it looked."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_MODELS = Path(__file__).resolve().parent / "model_files"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PLACES = (REPO_MODELS, SHARED / "models", SHARED)  # alloc-bench sits beside models in ``shared``


def find_model(rel: str) -> Path | None:
    """``rel`` (tflite/..., onnx/..., safetensors/..., alloc-bench/...) in the first place that has it."""
    return next((root / rel for root in PLACES if (root / rel).exists()), None)


def _folder(name: str) -> Path:
    return find_model(name) or REPO_MODELS / name


TFLITE, ONNX, SAFETENSORS, ALLOC_BENCH = (_folder(name) for name in ("tflite", "onnx", "safetensors", "alloc-bench"))


def model_file(rel: str) -> Path:
    """``rel``'s path, or a skip naming where it was looked for."""
    path = find_model(rel)
    if path is None:
        pytest.skip(f"model {rel} is in neither {REPO_MODELS} nor {SHARED}")
    return path

# Every int8 model in shared/models/tflite except the two LSTM models.
INT8_MODELS = [
    "mlperf_tiny/kws_ref_model.tflite",
    "mlperf_tiny/vww_96_int8.tflite",
    "mlperf_tiny/pretrainedResnet_quant.tflite",
    "mlperf_tiny/ad01_int8.tflite",
    "mlperf_tiny/str_ww_ref_model.tflite",
    "tflm/hello_world_int8.tflite",
    "tflm/micro_speech_quantized.tflite",
    "tflm/person_detect.tflite",
    "tflm/simple_add_model.tflite",
    "tflm/mobilenet_v2_quantized_1x3x224x224.tflite",
    "mcunet/mcunet_vww.tflite",
    "synthetic/mobilenetv2_035_96_random.tflite",
]
LSTM_MODELS = ["tflm/trained_lstm_int8.tflite", "tflm/micro_speech_lstm.tflite"]


def shared_model(rel: str) -> Path:
    """A TFLite model by its path under tflite/."""
    return model_file(f"tflite/{rel}")


# DORY's example networks: (folder, model file, layout of its out_layerN.txt dumps). DORY dumps
# activations channels last, except dscnn_test, whose dumps are channel-major (checked: only that
# order matches, whatever the header line says).
DORY_NETS = [
    ("Residual_connection_test_1", "model_int.onnx", "hwc"),
    ("TCN_T", "TCN.onnx", "hwc"),
    ("dscnn_test", "model_int.onnx", "chw"),
    ("eegnetDW_1d_8b_Hx1", "eegnet_id_8b.onnx", "hwc"),
    ("eegnet_1d_8b_1xW", "eegnet_id_8b.onnx", "hwc"),
]
# Deeploy's integer softmax and norms (iSoftmax, iRMSNorm, iNoNorm): single layers no tile takes,
# run whole (on GAP8 too)
DEEPLOY_NORM_NETS = [
    "Kernels/Integer/Softmax/Regular",
    "Kernels/Integer/Softmax/Large",
    "Kernels/Integer/RMSNorm",
    "Kernels/Integer/iNoNorm",
]
DEEPLOY_NETS = [
    "Kernels/Integer/Add/Regular",
    "Kernels/Integer/Add/Regular_RQ",
    "Kernels/Integer/Add/MultIO",
    "Kernels/Integer/Concat",  # 16-bit values (the engine's input type follows the test vectors' range)
    "Kernels/Integer/Conv/DW_2D_RQ",
    "Kernels/Integer/Conv/DW_3x3_RQ",
    "Kernels/Integer/Conv/PW_2D_RQ/Regular_RQ",
    "Kernels/Integer/Conv/Regular_1D_RQ",
    "Kernels/Integer/Conv/Regular_2D_RQ",
    "Kernels/Integer/Conv/StriddedPadded_2D_RQ",
    "Kernels/Integer/GEMM/Regular",
    "Kernels/Integer/GEMM/Regular_RQPerColumn",
    "Kernels/Integer/GEMM/Batch_RQ",  # a batch of 2 inside the graph: data, not samples
    "Kernels/Integer/MatMul/Batch",
    "Kernels/Integer/GEMM/Regular_RQPerRow",  # alpha, beta * C and a RequantShift per row
    "Kernels/Integer/GEMM/TransB_RQ",
    "Kernels/Integer/MatMul/Add",  # an int32 result plus a constant matrix
    "Kernels/Integer/MatMul/Regular",  # two rank-4 activations
    "Kernels/Integer/MatMul/Regular_RQ",  # a RequantShift per batch
    "Kernels/Integer/MaxPool/Regular_2D",
    "Kernels/Integer/Pad/Regular_2D",
    "Kernels/Integer/Slice",
    "Kernels/Integer/Attention",  # products of two activations per head, the integer softmax
    "Kernels/Integer/Sub",  # int32 output (Deeploy's Sub writes int32)
    "Kernels/Integer/ReduceSum",  # int32 sums
    "Kernels/Integer/ReduceMean",
    "Kernels/Integer/Hardswish/Regular",  # int32 output
    "Kernels/Integer/Hardswish/Regular_RQ",  # its RequantShift from int32 folded in
    "Kernels/Integer/TrueIntegerDiv",  # 16-bit input, merged into the RequantShift after it as Deeploy does
    *DEEPLOY_NORM_NETS,
    "Models/MLPerf/AnomalyDetection",
    "Models/MLPerf/ImageClassification",
    "Models/MLPerf/KeywordSpotting",
    "Models/MLPerf/VisualWakeWords",
    "Models/miniMobileNet",
]


def shared_onnx(rel: str) -> Path:
    """An ONNX network's file or folder by its path under onnx/."""
    return model_file(f"onnx/{rel}")
