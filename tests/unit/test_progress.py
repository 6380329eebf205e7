"""Progress of long steps: nothing unless asked, plain lines for pipes and logs (only for steps
that take long), a bar redrawn in place on a terminal, and the CLI's choice between them."""
from __future__ import annotations

import io
import re
import time

from solver import progress
from deployer.pipeline import Options, deploy
from tests.unit.test_cli import builder_model, run_subprocess


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_steps_are_silent_unless_someone_listens(tmp_path):
    with progress.step("anything", total=3) as s:
        s.advance(3)
    assert s.done == 3
    deploy(builder_model(tmp_path / "m.tflite"), Options())  # no listener: nothing to see, nothing fails


def test_plain_lines_announce_only_long_steps_and_their_end():
    out = io.StringIO()
    with progress.reporting(progress.Lines(out, after_s=0.05, every_s=0.05)):
        with progress.step("quick"):
            pass
        with progress.step("tiling (cpsat)", total=4) as s:
            s.advance(2)
            time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert not any("quick" in line for line in lines)
    assert re.fullmatch(r"deploy: tiling \(cpsat\): 2/4 \(\d+\.\d s, about \d+\.\d s to go\)", lines[0]), lines
    assert re.fullmatch(r"deploy: tiling \(cpsat\): done in \d+\.\d s", lines[-1]), lines


def test_a_counted_step_says_what_else_and_the_time_to_go():
    now = [0.0]
    s = progress.Step("sweep", 100, None, clock=lambda: now[0])
    now[0] = 20.0
    s.advance(40)
    s.note = "3 failed"
    assert progress._status(s) == "40/100, 3 failed (20.0 s, about 30 s to go)"


def test_a_time_limited_solve_shows_its_limit():
    out = io.StringIO()
    with progress.reporting(progress.Lines(out, after_s=0.05, every_s=1.0)):
        with progress.step("arena (cpsat, 40 buffers)", limit_s=5.0):
            time.sleep(0.15)
    assert re.search(r"arena \(cpsat, 40 buffers\): \d+\.\d s of at most 5 s", out.getvalue())


def test_bar_redraws_one_line_and_clears_it():
    out = Tty()
    with progress.reporting(progress.for_stream(out)) as bar:
        assert isinstance(bar, progress.Bar)
        bar.after_s, bar.every_s = 0.0, 0.02
        with progress.step("tiling (greedy)", total=10) as s:
            for _ in range(10):
                s.advance()
                time.sleep(0.01)
            time.sleep(0.1)
    text = out.getvalue()
    assert "\n" not in text  # redrawn in place
    assert re.search(r"\r\x1b\[Ktiling \(greedy\) \[#+\.*\] 10/10", text)
    assert text.endswith("\r\x1b[K")  # cleared when the step ends


def test_for_stream_picks_plain_lines_for_a_pipe():
    assert isinstance(progress.for_stream(io.StringIO()), progress.Lines)


def test_cli_shows_progress_on_stderr_and_quiet_silences_it(tmp_path):
    model = builder_model(tmp_path / "m.tflite")
    # whatever progress a run shows goes to stderr as 'deploy:' lines; stdout keeps the summary
    code, out, err = run_subprocess(model, "-o", tmp_path / "a", env={})
    assert code == 0 and "wrote" in out
    assert all(line.startswith("deploy: ") for line in err.splitlines())
    code, out, err = run_subprocess(model, "-o", tmp_path / "b", "--quiet")
    assert (code, out, err) == (0, "", "")
