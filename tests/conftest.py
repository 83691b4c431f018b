import os

import pytest
import torch

import tolerance_guard

# Tests never touch the user's cache or the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Test models are tiny: intra-op threads only add contention (up to 10x slower on a busy 2-core machine).
torch.set_num_threads(1)

# assert_close with an absolute tolerance larger than the quantity compared fails (tests/tolerance_guard.py)
tolerance_guard.install()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NEXUS_CACHE", str(tmp_path_factory.getbasetemp() / "nexus-cache"))


def pytest_collection_modifyitems(config, items):
    """`cuda` tests run wherever torch sees a CUDA device and are skipped, with the reason, elsewhere."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
