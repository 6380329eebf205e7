"""The generated files build as promised: no libc references, a CMake drop-in library, identical reruns."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from deployer.output import write_output
from deployer.pipeline import Options, deploy
from deployer.verify import write_files
from tests.tflite_builder import ModelBuilder


def every_op_model(path):
    """A float-I/O model touching every kind of kernel the emitter has."""
    mb = ModelBuilder(seed=11)
    x = mb.quantize(mb.input((1, 8, 6, 3), dtype="float32"))
    x = mb.pad(x, [[0, 0], [1, 1], [0, 2], [0, 0]])
    x = mb.conv2d(x, 8, stride=(2, 2), activation="RELU6")
    y = mb.depthwise_conv2d(x, multiplier=2, kernel=(3, 3))
    x = mb.concat([y, mb.conv2d(x, 4, kernel=(1, 1))], axis=3)
    x = mb.add(x, mb.max_pool(x, filter=(3, 3), stride=(1, 1), padding="SAME"))
    x = mb.mul(x, mb.mean(x, axes=(1, 2), keep_dims=True))
    x = mb.hard_swish(mb.relu(mb.logistic(x)))
    x = mb.transpose(mb.avg_pool(x, filter=(2, 2), stride=(1, 1)), (0, 3, 1, 2))
    x = mb.fully_connected(mb.reshape(x, (1, _elements(mb, x))), 5)
    mb.output(mb.dequantize(mb.softmax(x)))
    mb.save(path)
    return path


def _elements(mb, x):
    n = 1
    for d in mb.shape(x):
        n *= d
    return n


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("every_op")
    model = every_op_model(root / "every_op.tflite")
    dep = deploy(model, Options())
    out = root / "out"
    write_output(dep.files, out)
    return out


def test_engine_references_no_library_symbol(out_dir):
    """Compiled freestanding, the engine object has no undefined symbol: no libc, no libm, no memcpy."""
    engine = next(out_dir.glob("*_engine.c"))
    obj = out_dir / "engine.o"
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding",
                    "-c", str(engine), "-o", str(obj)], check=True)
    undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
    assert undefined.strip() == "", f"engine references external symbols:\n{undefined}"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_drop_in_library(out_dir, tmp_path):
    """add_subdirectory(out) + target_link_libraries(app PRIVATE <lib>) builds a working app."""
    lib = next(out_dir.glob("*_engine.c")).name.removesuffix("_engine.c")
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.c").write_text(
        '#include "inference_api.h"\n'
        "int main(void) {\n"
        "    if (inference_init() != 0) return 1;\n"
        "    float *in = (float *)inference_get_input(0);\n"
        "    for (unsigned i = 0; i < inference_input_bytes(0) / sizeof(float); ++i) in[i] = 0.25f;\n"
        "    if (inference_run() != 0) return 2;\n"
        "    const float *out = (const float *)inference_get_output(0);\n"
        "    float sum = 0.0f;\n"
        "    for (unsigned i = 0; i < inference_output_bytes(0) / sizeof(float); ++i) sum += out[i];\n"
        "    return (sum > 0.9f && sum < 1.1f) ? 0 : 3; /* softmax sums to one */\n"
        "}\n")
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        f"add_subdirectory({out_dir} engine)\nadd_executable(app main.c)\n"
        f"target_link_libraries(app PRIVATE {lib})\n")
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(app), "-B", str(build), "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    assert subprocess.run([str(build / "app")]).returncode == 0


def test_every_op_model_bit_exact(out_dir):
    from deployer.verify import random_inputs, verify
    model = out_dir.parent / "every_op.tflite"
    dep = deploy(model, Options())
    for sanitize in (False, True):
        result = verify(dep, model, [random_inputs(dep.graph, s) for s in range(3)], sanitize=sanitize)
        assert [o["max_abs_diff"] for o in result["outputs"]] == [0.0]


def test_same_model_same_flags_byte_identical(tmp_path):
    model = every_op_model(tmp_path / "m.tflite")
    first = deploy(model, Options(sram=256 * 1024)).files
    second = deploy(model, Options(sram=256 * 1024)).files
    assert first == second


def stack_frames(files: dict, cc: str, cflags, folder) -> dict[str, int]:
    """Each function's stack frame (gcc -fstack-usage) in the engine compiled with ``cflags``
    (the object is left as folder/e.o), by name without gcc's clone suffix (.constprop.0)."""
    write_files(files, folder)
    src = next(folder.glob("*_engine.c"))
    subprocess.run([cc, *cflags, "-fstack-usage", "-c", str(src), "-o", str(folder / "e.o")],
                   check=True, cwd=folder, capture_output=True)
    frames = {}
    for line in next(folder.glob("*.su")).read_text().splitlines():
        where, size, kind = line.rsplit("\t", 2) if "\t" in line else line.rsplit(None, 2)
        assert kind.startswith("static"), f"{where}: a dynamic stack frame ({kind})"
        name = where.rsplit(":", 1)[-1].split(".")[0]
        frames[name] = max(int(size), frames.get(name, 0))
    return frames


@pytest.mark.parametrize("rel,target,options", [
    ("mlperf_tiny/pretrainedResnet_quant.tflite", "cortex-m4", {}),  # the largest im2col column
    ("mlperf_tiny/kws_ref_model.tflite", "cortex-m7", {}),
    ("mlperf_tiny/vww_96_int8.tflite", "host", {"l1": 16 * 1024}),  # tiled
    ("mlperf_tiny/vww_96_int8.tflite", "host", {"sram": 48 * 1024}),  # patched
])
def test_stack_estimate_covers_the_compiled_frames(rel, target, options, tmp_path):
    """INFERENCE_ENGINE_STACK_BYTES (and the FreeRTOS task's stack) is at least inference_run's
    frame plus the deepest layer function's, as the target's compiler lays them out."""
    from tests.models import shared_model
    cc = "arm-none-eabi-gcc" if target.startswith("cortex") else "gcc"
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    dep = deploy(shared_model(rel), Options(target=target, rtos="freertos", **options))
    frames = stack_frames(dep.files, cc, dep.backend.cflags, tmp_path)
    need = frames["inference_run"] + max(v for k, v in frames.items() if k.startswith("op") or k.startswith("stage"))
    header = dep.files["inference_task.h"]
    estimate = int(re.search(r"INFERENCE_ENGINE_STACK_BYTES (\d+)", header).group(1))
    words = int(re.search(r"INFERENCE_TASK_STACK_WORDS (\d+)", header).group(1))
    assert need <= estimate <= 4 * words, (need, estimate, words)
