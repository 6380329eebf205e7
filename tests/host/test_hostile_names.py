"""Names from a model (its file or folder name, tensor and op names) never change the meaning of a
generated file: the C compiles with -Werror (comment, trigraph and bidi warnings included), a CMake
app that adds the output folder runs no command of the model's, the Makefile and report carry the
names as text."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from deployer.output import write_output
from deployer.pipeline import Options, deploy
from deployer.render import c_identifier, c_text, cmake_text, make_text
from tests.tflite_builder import ModelBuilder
from tests import gptneo_builder

INJECT_CMAKE = "k\nexecute_process(COMMAND touch PWNED)\n#"
INJECT_MAKE = "m\n$(shell touch PWNED)\nx: ; touch PWNED\n#"
# Names a file system accepts (no NUL, no slash)
FILE_NAMES = [INJECT_CMAKE, INJECT_MAKE, "q??=", "back\\", "esc\x1b[31mred", "bidi\u202eevil",
              'quote"d', "\u6a21\u578b", "`touch PWNED`$(touch PWNED)", "<script>alert(1)<\\script>", "a" * 240,
              "all", "install", "test", "int"]
# Tensor and op names may hold anything a flatbuffer string holds
TENSOR_NAMES = ["*/ int pwned; /*", "??/", "line\\", "nul\x00byte", "cr\rlf\n#define X", "\u202eevil\u2066",
                "\x1b]0;title\x07", "//", "</script><b>"]


def hostile_model(folder: Path, stem: str, seed: int = 0) -> Path:
    mb = ModelBuilder(seed)
    x = mb.input((1, 6, 6, 2))
    x = mb.conv2d(x, 4, kernel=(3, 3))
    x = mb.depthwise_conv2d(x)
    x = mb.fully_connected(mb.reshape(x, (1, 144)), 3)
    mb.output(mb.softmax(x))
    for i, t in enumerate(mb._tensors):
        t.name = TENSOR_NAMES[i % len(TENSOR_NAMES)] + f"#{i}"
    path = folder / f"{stem}.tflite"
    mb.save(path)
    return path


def assert_plain_text(out: Path) -> None:
    """Every generated source and build file is printable ASCII and newlines (tabs in Makefiles)."""
    for f in out.rglob("*"):
        if f.is_dir() or f.suffix in (".bin", ".html") or f.name == "manifest.json":
            continue
        text = f.read_bytes().decode("ascii")  # raises on anything beyond ASCII
        bad = [c for c in text if not (" " <= c <= "~" or c in "\n\t")]
        assert not bad, (f.name, bad[:5])


def cmake_app(out: Path, tmp: Path, library: str) -> None:
    app = tmp / "app"
    app.mkdir()
    (app / "main.c").write_text('#include "inference_api.h"\nint main(void) { return inference_init(); }\n')
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        f"add_subdirectory({out.as_posix()} engine)\nadd_executable(app main.c)\n"
        f"target_link_libraries(app PRIVATE {library})\n")
    build = tmp / "build"
    subprocess.run(["cmake", "-S", str(app), "-B", str(build), "-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"],
                   check=True, capture_output=True, cwd=tmp)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, cwd=tmp)


@pytest.mark.parametrize("rule", [c_text, cmake_text, make_text])
@pytest.mark.parametrize("name", FILE_NAMES + TENSOR_NAMES)
def test_rules_leave_nothing_that_acts(rule, name):
    text = rule(name)
    assert all(" " <= c <= "~" for c in text)
    assert rule(text) == text  # idempotent: text escaped twice reads the same
    if rule is c_text:
        assert not any(s in text for s in ("/*", "*/", "//", "??", "\\"))
    else:
        assert not any(c in text for c in "$#;()\"\\`<>\n")


@pytest.mark.parametrize("name", FILE_NAMES)
def test_library_names_are_safe_identifiers(name):
    ident = c_identifier(name)
    assert ident.isascii() and ident.replace("_", "a").isalnum() and not ident[0].isdigit()
    assert len(ident) <= 48
    assert ident not in ("all", "install", "test", "int", "help", "clean")
    assert c_identifier(name) == ident  # the same name, the same library


def test_long_names_keep_apart():
    assert c_identifier("a" * 250) != c_identifier("a" * 249 + "b")


@pytest.mark.parametrize("stem", FILE_NAMES)
def test_hostile_names_generate_inert_files(stem, tmp_path):
    model = hostile_model(tmp_path, stem)
    dep = deploy(model, Options())
    out = tmp_path / "out"
    write_output(dep.files, out)
    assert_plain_text(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == stem  # JSON carries the name exactly
    library = manifest["library"]
    engine = out / f"{library}_engine.c"
    subprocess.run(["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-Wcomment", "-Wtrigraphs",
                    "-c", str(engine), "-o", str(tmp_path / "e.o")], check=True, cwd=tmp_path)
    report = (out / "report.html").read_text()
    assert "<script>" not in report and "</script><b>" not in report
    if shutil.which("cmake"):
        cmake_app(out, tmp_path, library)
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None or shutil.which("make") is None,
                    reason="the Arm cross compiler and make are not installed")
@pytest.mark.parametrize("stem", [INJECT_MAKE, "bidi\u202eevil"])
def test_hostile_names_on_cortex_m(stem, tmp_path):
    """The Cortex-M engine (warnings as errors, bidi characters among them) and its qemu/ Makefile."""
    model = hostile_model(tmp_path, stem)
    out = tmp_path / "out"
    write_output(deploy(model, Options(target="cortex-m7")).files, out)
    assert_plain_text(out)
    subprocess.run(["make", "-s", "-C", str(out / "qemu"), "all"], check=True, capture_output=True, cwd=tmp_path)
    assert not list(tmp_path.rglob("PWNED"))


def test_hostile_language_model_folder(tmp_path):
    """A GPT-Neo checkpoint's folder name is its model's name."""
    folder = tmp_path / INJECT_CMAKE
    model = gptneo_builder.write(folder)
    from deployer.llm_passes import LanguageFlags
    dep = deploy(model, Options(language=LanguageFlags(weights="f32", kv="f32")))
    out = tmp_path / "out"
    write_output(dep.files, out)
    assert_plain_text(out)
    library = json.loads((out / "manifest.json").read_text())["library"]
    subprocess.run(["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-c",
                    str(out / f"{library}_engine.c"), "-o", str(tmp_path / "e.o")], check=True, cwd=tmp_path)
    if shutil.which("cmake"):
        cmake_app(out, tmp_path, library)
    assert not list(tmp_path.rglob("PWNED"))
