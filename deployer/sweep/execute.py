"""Running a sweep's points: one after the other, on a pool of local processes, or as tasks on a
Ray cluster. Each yields rows as points finish (in no particular order). Every worker holds the
models' bytes once (the pool's initializer; Ray's object store) and writes each model once into a
private temporary folder of its own, under its file name, for the readers."""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Iterator

from network_parser.errors import UsageError

from .point import Point, run_point


class ModelFiles:
    """The models this process has written, in a private temporary folder removed at its exit."""

    def __init__(self):
        self.folder: Path | None = None
        self.paths: dict[str, Path] = {}

    def path(self, sha: str, name: str, data: bytes) -> Path:
        if sha not in self.paths:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="deploy-sweep-"))  # 0700
                atexit.register(self.close)
            (self.folder / sha).mkdir()
            path = self.folder / sha / name
            path.write_bytes(data)
            self.paths[sha] = path
        return self.paths[sha]

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder, self.paths = None, {}


_FILES = ModelFiles()
_MODELS: dict[str, bytes] = {}  # a pool worker's models, by digest


def run_task(point: Point, key: str, data: bytes) -> dict:
    """One point in this process (any worker): its row."""
    from solver import progress
    with progress.reporting(progress.Silent()):  # a worker's steps are nobody's to show
        return run_point(point, _FILES.path(point.model_sha256, point.model, data), key)


def serial(tasks: Iterable[tuple[Point, str]], models: dict[str, bytes]) -> Iterator[dict]:
    try:
        for point, key in tasks:
            yield run_task(point, key, models[point.model_sha256])
    finally:
        _FILES.close()


def _pool_init(models: dict[str, bytes]) -> None:
    _MODELS.update(models)
    from multiprocessing import util
    util.Finalize(None, _FILES.close, exitpriority=10)  # a pool worker does not run atexit


def _pool_task(point: Point, key: str) -> dict:
    return run_task(point, key, _MODELS[point.model_sha256])


def pool(tasks: Iterable[tuple[Point, str]], models: dict[str, bytes], jobs: int) -> Iterator[dict]:
    """A process pool of ``jobs`` workers (started fresh: no solver state is forked), the models
    sent once to each; at most a few points per worker queued ahead."""
    tasks = iter(tasks)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), initializer=_pool_init,
                             initargs=(models,)) as ex:
        running = set()
        try:
            while True:
                while len(running) < 4 * jobs and (task := next(tasks, None)) is not None:
                    running.add(ex.submit(_pool_task, *task))
                if not running:
                    return
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()
        except BaseException:
            for f in running:
                f.cancel()
            ex.shutdown(wait=False, cancel_futures=True)
            raise


def _reachable(address: str) -> None:
    """A HOST:PORT address answers on its port (Ray itself retries an unreachable one for minutes)."""
    host, _, port = address.rpartition(":")
    if address in ("local", "auto") or "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UsageError(f"--ray {address}: nothing answers there ({e.strerror or e})") from None


def ray_cluster(tasks: Iterable[tuple[Point, str]], models: dict[str, bytes], address: str,
                jobs: int | None) -> Iterator[dict]:
    """Tasks on a Ray cluster: ``address`` an existing cluster's (or ``auto``), or ``local`` for a
    Ray instance started here with ``jobs`` CPUs. The models go into the object store once; every
    node's workers keep their own model files and their own build cache."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install -e '.[ray]'") from None
    _reachable(address)
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance: no token to make
        try:
            if address == "local":
                ray.init(num_cpus=jobs or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR")
            else:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UsageError(f"--ray {address}: cannot start or reach a Ray cluster ({str(e).splitlines()[0]})") from None
    try:
        refs = {sha: ray.put(data) for sha, data in models.items()}
        remote = ray.remote(num_cpus=1, max_retries=1)(run_task)
        width = 4 * int(ray.cluster_resources().get("CPU", 1))
        tasks = iter(tasks)
        running = []
        while True:
            while len(running) < width and (task := next(tasks, None)) is not None:
                point, key = task
                running.append(remote.remote(point, key, refs[point.model_sha256]))
            if not running:
                return
            done, running = ray.wait(running, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()
