"""Test setup: real data from ../shared/data (or $RACO_BENCH_DATA), a private calibration cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_configure(config):
    if not os.environ.get("RACO_BENCH_DATA") and SHARED_DATA.is_dir():
        os.environ["RACO_BENCH_DATA"] = str(SHARED_DATA)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    os.environ["RACO_BENCH_CACHE"] = str(tmp_path_factory.mktemp("calibration-cache"))
    yield


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
