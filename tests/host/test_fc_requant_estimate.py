"""fx_rq_fc, the integer estimate of the reference's double-precision requantization on cores
whose double arithmetic is software (Cortex-M4F, GAP8): compiled with the host gcc from the
engine's own fixedpoint.h, it equals fx_rq_double (the reference's arithmetic) on every case:
random scales and accumulators, accumulators placed within a few units of every rounding
boundary x.5, the extremes of int32, the clamp's edges; and the estimate is what decides nearly
always (the double fallback is rare)."""
from __future__ import annotations

import random
import shutil
import subprocess
from fractions import Fraction

import pytest

from deployer.fixedpoint import scale_q32
from deployer.render import environment

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no host gcc")

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include "fixedpoint.h"
int main(void)
{
    int32_t acc, m, zp, lo, hi; double scale; long bad = 0, n = 0;
    while (scanf("%d %d %la %d %d %d", &acc, &m, &scale, &zp, &lo, &hi) == 6) {
        const int32_t want = fx_rq_double((double)acc * scale, zp, lo, hi);
        const int32_t got = fx_rq_fc(acc, m, scale, zp, lo, hi);
        if (got != want) { if (bad < 5) printf("MISMATCH %d %a %d -> %d want %d\n", acc, scale, zp, got, want); ++bad; }
        ++n;
    }
    printf("%ld cases, %ld mismatches\n", n, bad);
    return bad != 0;
}
"""


def cases(seed: int = 1):
    rng = random.Random(seed)
    scales = [rng.uniform(1e-6, 0.49) for _ in range(40)] + [2.0 ** -rng.randrange(1, 30) for _ in range(10)] + \
             [rng.uniform(1e-9, 1e-4) for _ in range(10)] + [0.4999999999, 3e-10]
    for s in scales:
        m = scale_q32(s)
        for zp, lo, hi in ((0, -128, 127), (-128, -128, 127), (5, -128, 127), (0, -32768, 32767), (17, 0, 127)):
            for _ in range(30):  # anywhere
                yield rng.randrange(-2 ** 31, 2 ** 31), m, s, zp, lo, hi
            for _ in range(30):  # a few units from a boundary k + 0.5 inside the clamp range
                k = rng.randrange(lo - zp - 2, hi - zp + 2)
                centre = int(Fraction(2 * k + 1, 2) / Fraction(s))
                for acc in (centre - 2, centre - 1, centre, centre + 1, centre + 2):
                    if -2 ** 31 <= acc < 2 ** 31:
                        yield acc, m, s, zp, lo, hi
            for acc in (-2 ** 31, 2 ** 31 - 1, 0, 1, -1):
                yield acc, m, s, zp, lo, hi


def test_the_estimate_equals_the_double_arithmetic(tmp_path):
    (tmp_path / "fixedpoint.h").write_text(environment(("host",)).get_template("fixedpoint.h.j2").render(
        soft_double=True, model="t", guard="T", sixteen_bit=False))
    (tmp_path / "t.c").write_text(HARNESS)
    subprocess.run(["gcc", "-O2", "-std=c99", "-Wall", "-Werror", "-o", str(tmp_path / "t"), str(tmp_path / "t.c")],
                   check=True, cwd=tmp_path)
    text = "".join(f"{a} {m} {float(s).hex()} {zp} {lo} {hi}\n" for a, m, s, zp, lo, hi in cases())
    run = subprocess.run([str(tmp_path / "t")], input=text, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "0 mismatches" in run.stdout


def test_scale_estimates():
    assert scale_q32(0.25) == 2 ** 30 and scale_q32(2 ** -32) == 1
    assert scale_q32(0.5) == 0 and scale_q32(0.0) == 0 and scale_q32(float("nan")) == 0  # no estimate: double
    s = 0.0123456789
    assert abs(scale_q32(s) - Fraction(s) * 2 ** 32) <= Fraction(1, 2)
