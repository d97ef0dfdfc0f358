"""Test setup: real data from ../shared/data (or $RACO_BENCH_DATA), a private calibration cache, the sweeps whose
stores tests only read made in the background (tests/stores.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
import stores

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_configure(config):
    if not os.environ.get("RACO_BENCH_DATA") and SHARED_DATA.is_dir():
        os.environ["RACO_BENCH_DATA"] = str(SHARED_DATA)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    os.environ["RACO_BENCH_CACHE"] = str(tmp_path_factory.mktemp("calibration-cache"))
    yield


@pytest.fixture(scope="session", autouse=True)
def _ray_temp():
    """Every Ray the tests start (an embedded one in a sweep, a test's cluster) writes its session logs under one
    folder of this run, removed when the run ends: about 100 MB a Ray, which would otherwise pile up in /tmp/ray run
    after run. Short and under /tmp, because Ray's socket paths must stay under 108 characters."""
    folder = tempfile.mkdtemp(prefix="rb-tmp-", dir="/tmp")
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = folder
    yield folder
    if before is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = before
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _background_stores(request, tmp_path_factory, _private_cache, _ray_temp):
    """Start the background stores declared in test modules (tests/stores.py) that some collected test uses, in the
    order declared and a few at a time; stop whatever of them still runs when the session ends."""
    stores.ROOT = tmp_path_factory.mktemp("background")
    stores.ENV = dict(os.environ)  # now, before any test patches it (a background store may start during such a test)
    used = {name for item in request.session.items for name in item.fixturenames}
    jobs = [job for name, job in stores.DECLARED.items() if name in used]
    stop = threading.Event()
    starter = threading.Thread(target=stores.start_in_order, args=(jobs, stop), name="background stores", daemon=True)
    starter.start()
    yield
    stop.set()
    starter.join()
    for job in stores.DECLARED.values():
        job.stop()


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = os.environ.get("RACO_BENCH_DATA")
    if not root or not Path(root).is_dir():
        pytest.fail("RACO_BENCH_DATA must point at a copy of shared/data (the tests use the real datasets)")
    return Path(root)


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (statistical checks and small steps; the machine has 2 cores), restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def adult():
    from raco_bench.data import load_dataset

    return load_dataset("adult")


@pytest.fixture
def started() -> list[subprocess.Popen]:
    """Processes a test starts in the background, each in its own session (``start_new_session=True``): any still
    running when the test ends (a failed check) is killed with its process group, and nothing else is."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
