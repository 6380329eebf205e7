"""The task glue: the FreeRTOS variant compiles (against declarations of the kernel API: the
kernel's headers are not available from the package registries CI reaches), the bare-metal one
runs an inference, and the CMake library builds with the Arm cross compiler too."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deployer.output import write_output
from deployer.pipeline import Options, deploy
from tests.models import shared_model

STUB = Path(__file__).resolve().parent / "freertos_stub"
STRICT = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")


def generated(tmp_path, rel: str, **options) -> Path:
    out = tmp_path / "out"
    write_output(deploy(shared_model(rel), Options(**options)).files, out)
    return out


@pytest.mark.parametrize("cc,target", [("gcc", "host"), ("arm-none-eabi-gcc", "cortex-m4")])
def test_freertos_glue_compiles(tmp_path, cc, target):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    out = generated(tmp_path, "mlperf_tiny/kws_ref_model.tflite", target=target, rtos="freertos")
    text = (out / "inference_task.c").read_text()
    assert "xTaskCreate" in text and "ulTaskNotifyTake" in text
    flags = [] if target == "host" else ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
    subprocess.run([cc, *STRICT, *flags, "-O2", "-I", str(STUB), "-I", str(out), "-c", str(out / "inference_task.c"),
                    "-o", str(tmp_path / "task.o")], check=True, capture_output=True)


def test_baremetal_glue_runs_one_inference(tmp_path):
    out = generated(tmp_path, "mlperf_tiny/kws_ref_model.tflite")
    main = tmp_path / "main.c"
    main.write_text('#include "inference_api.h"\n#include "inference_task.h"\n'
                    "int main(void) {\n"
                    "    if (inference_init() != 0) return 1;\n"
                    "    if (inference_task_step() != 0) return 2; /* nothing marked ready */\n"
                    "    inference_task_input_ready();\n"
                    "    if (inference_task_step() != 1) return 3;\n"
                    "    return inference_task_step() == 0 ? 0 : 4;\n"
                    "}\n")
    exe = tmp_path / "app"
    subprocess.run(["gcc", *STRICT, "-O2", "-I", str(out), str(main), *map(str, out.glob("*.c")), "-o", str(exe)],
                   check=True, capture_output=True)
    assert subprocess.run([str(exe)]).returncode == 0


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="cmake or arm-none-eabi-gcc is not installed")
def test_cmake_library_cross_compiles_for_cortex_m(tmp_path):
    """add_subdirectory(out) in a firmware project whose toolchain is arm-none-eabi-gcc."""
    out = generated(tmp_path, "mlperf_tiny/kws_ref_model.tflite", target="cortex-m7")
    lib = next(out.glob("*_engine.c")).name.removesuffix("_engine.c")
    fw = tmp_path / "fw"
    fw.mkdir()
    (fw / "toolchain.cmake").write_text(
        "set(CMAKE_SYSTEM_NAME Generic)\nset(CMAKE_SYSTEM_PROCESSOR arm)\n"
        "set(CMAKE_C_COMPILER arm-none-eabi-gcc)\nset(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n")
    (fw / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(fw C)\n"
        f"add_subdirectory({out} engine)\n")
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(fw), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={fw / 'toolchain.cmake'}",
                    "-DCMAKE_C_FLAGS=-mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16 -O2 -Wall -Wextra -Werror"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    archive = next(build.rglob(f"lib{lib}.a"))
    symbols = subprocess.run(["arm-none-eabi-nm", str(archive)], capture_output=True, text=True, check=True).stdout
    assert " T inference_run" in symbols and " T inference_task_step" in symbols
    # without the core's flags the DSP kernels cannot build, and say why
    wrong = tmp_path / "wrong"
    subprocess.run(["cmake", "-S", str(fw), "-B", str(wrong), f"-DCMAKE_TOOLCHAIN_FILE={fw / 'toolchain.cmake'}"],
                   check=True, capture_output=True)
    res = subprocess.run(["cmake", "--build", str(wrong)], capture_output=True, text=True)
    assert res.returncode != 0 and "compile it for the core (-mcpu=cortex-m7" in res.stdout + res.stderr
