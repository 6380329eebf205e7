"""Where a long deployment is, for whoever listens: the pipeline marks its steps, the CLI shows
them on stderr (a bar on a terminal, plain lines otherwise, nothing with --quiet).

    with progress.step("tiling", total=len(layers)) as s:
        for layer in layers:
            ...
            s.advance()

    with progress.reporting(progress.for_stream(sys.stderr)):
        deploy(model, options)

The listener is a context variable, not a global: a library caller hears nothing unless it
asks, and threads that plan in parallel each have their own.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO


class Step:
    """One running step: its name, how far it is (``done`` of ``total``) and when it started."""

    def __init__(self, name: str, total: int | None, limit_s: float | None, clock=time.monotonic):
        self.name, self.total, self.limit_s, self.clock = name, total, limit_s, clock
        self.done = 0
        self.note = ""  # what else to say of it (a sweep's failed points)
        self.started = clock()

    def advance(self, n: int = 1) -> None:
        self.done += n

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started


class Silent:
    """Hears nothing (the default)."""

    def start(self, step: Step) -> None:
        pass

    def finish(self, step: Step) -> None:
        pass


class Lines(Silent):
    """Plain lines for logs and pipes: a step that runs longer than ``after_s`` is announced,
    then reported every ``every_s`` while it runs and once when it ends."""

    def __init__(self, stream: TextIO, after_s: float = 1.0, every_s: float = 5.0):
        self.stream, self.after_s, self.every_s = stream, after_s, every_s
        self._lock = threading.Lock()
        self._running: dict[int, tuple[threading.Thread, threading.Event]] = {}
        self._shown: set[int] = set()

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(f"deploy: {text}\n")
            self.stream.flush()

    def start(self, step: Step) -> None:
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(step, stop), daemon=True)
        self._running[id(step)] = (watcher, stop)
        watcher.start()

    def _watch(self, step: Step, stop: threading.Event) -> None:
        wait = self.after_s
        while not stop.wait(wait):
            self._shown.add(id(step))
            self._write(f"{step.name}: {_status(step)}")
            wait = self.every_s

    def finish(self, step: Step) -> None:
        watcher, stop = self._running.pop(id(step))
        stop.set()
        watcher.join()  # a status line it is writing comes before the step's last line
        if id(step) in self._shown:
            self._shown.discard(id(step))
            self._write(f"{step.name}: done in {step.elapsed:.1f} s")


class Bar(Silent):
    """One line redrawn in place on a terminal: the innermost running step's bar (its count, or
    its elapsed time against its time limit), cleared when no step runs."""

    WIDTH = 24

    def __init__(self, stream: TextIO, after_s: float = 0.3, every_s: float = 0.1):
        self.stream, self.after_s, self.every_s = stream, after_s, every_s
        self._steps: list[Step] = []
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._drawn = False

    def start(self, step: Step) -> None:
        with self._lock:
            self._steps.append(step)
            if self._stop is None:
                self._stop = threading.Event()
                threading.Thread(target=self._draw_loop, args=(self._stop,), daemon=True).start()

    def finish(self, step: Step) -> None:
        with self._lock:
            self._steps.remove(step)
            if not self._steps and self._stop is not None:
                self._stop.set()
                self._stop = None
                self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def _draw_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            with self._lock:
                if stop.is_set() or not self._steps:
                    return
                step = self._steps[-1]
                if step.elapsed < self.after_s:
                    continue
                self.stream.write(f"\r\033[K{step.name} {_bar(step, self.WIDTH)} {_status(step)}")
                self.stream.flush()
                self._drawn = True


def _fraction(step: Step) -> float | None:
    if step.total:
        return min(1.0, step.done / step.total)
    if step.limit_s:
        return min(1.0, step.elapsed / step.limit_s)
    return None


def _bar(step: Step, width: int) -> str:
    f = _fraction(step)
    if f is None:  # no measure of how far: a bouncing mark
        pos = int(step.elapsed * 8) % (2 * width - 2)
        pos = pos if pos < width else 2 * width - 2 - pos
        return "[" + " " * pos + "#" + " " * (width - pos - 1) + "]"
    filled = round(f * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _status(step: Step) -> str:
    if step.total:
        note = f", {step.note}" if step.note else ""
        left = step.elapsed / step.done * (step.total - step.done) if 0 < step.done < step.total else None
        eta = "" if left is None else f", about {left:.{0 if left >= 10 else 1}f} s to go"
        return f"{step.done}/{step.total}{note} ({step.elapsed:.1f} s{eta})"
    if step.limit_s:
        return f"{step.elapsed:.1f} s of at most {step.limit_s:g} s"
    return f"{step.elapsed:.1f} s"


_LISTENER: ContextVar[Silent] = ContextVar("progress", default=Silent())


def for_stream(stream: TextIO) -> Silent:
    """A bar when ``stream`` is a terminal, plain lines otherwise."""
    isatty = getattr(stream, "isatty", None)
    return Bar(stream) if isatty is not None and isatty() else Lines(stream)


@contextmanager
def reporting(listener: Silent):
    """Report the steps run inside the block to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield listener
    finally:
        _LISTENER.reset(token)


@contextmanager
def step(name: str, total: int | None = None, limit_s: float | None = None):
    """Mark a step of the pipeline: ``total`` things to do (``advance`` each), or a solver's
    time limit (its elapsed time is the measure)."""
    listener = _LISTENER.get()
    s = Step(name, total, limit_s)
    listener.start(s)
    try:
        yield s
    finally:
        listener.finish(s)
