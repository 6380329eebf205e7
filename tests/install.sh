#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v cmake >/dev/null || missing+=(cmake)  # the CMake drop-in library test
# GAP8 / PULP target (tests/target): the RISC-V cross compiler and its C library
for pkg in gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# Cortex-M targets (tests/target/test_cortexm.py): the Arm cross compiler, newlib's headers,
# QEMU's Arm boards, and make for the engines' qemu/ folders
for pkg in gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm make; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# report.html in a real browser (tests/host/test_report_browser.py): Debian's Chromium, driven
# by playwright from PyPI (never `playwright install`: it downloads a browser of its own)
for pkg in chromium; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q && apt-get install -y -q "${missing[@]}"
fi
python -m pip install -q -e '.[test]'
