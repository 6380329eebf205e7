"""Where the shared reference models live, and which of them the deployer supports."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"
TFLITE = SHARED_MODELS / "tflite"

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
    path = TFLITE / rel
    if not path.exists():
        pytest.skip(f"shared model {path} is not present on this machine")
    return path


ONNX = SHARED_MODELS / "onnx"
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
DEEPLOY_NETS = [
    "Kernels/Integer/Add/Regular",
    "Kernels/Integer/Conv/DW_2D_RQ",
    "Kernels/Integer/Conv/Regular_2D_RQ",
    "Kernels/Integer/Conv/StriddedPadded_2D_RQ",
    "Kernels/Integer/GEMM/Regular",
    "Kernels/Integer/MaxPool/Regular_2D",
    "Models/MLPerf/AnomalyDetection",
    "Models/MLPerf/ImageClassification",
    "Models/MLPerf/KeywordSpotting",
    "Models/MLPerf/VisualWakeWords",
    "Models/miniMobileNet",
]


def shared_onnx(rel: str) -> Path:
    path = ONNX / rel
    if not path.exists():
        pytest.skip(f"shared ONNX network {path} is not present on this machine")
    return path
