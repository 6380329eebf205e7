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
