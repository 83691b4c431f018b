import os

import pytest
import tolerance_guard
import torch

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


@pytest.fixture
def builtin_growth_families(monkeypatch):
    """Only nexus's own growth families in the registries: a test module may register its own at import
    (test_experiment_progressive's `test_ffn_double`), and pytest imports every test module before the first
    test runs, so a test that lists the families would otherwise depend on which files were collected."""
    from nexus.growth import registry as R
    from nexus.growth import spec as S
    from nexus.plugins import Registry

    R.GROWERS.load()
    specs = {k: v for k, v in S.spec_classes().items() if v.__module__.startswith("nexus.")}
    growers = Registry("growth spec family", None, plugins=False)
    for name in specs:
        growers.register(name)(R.GROWERS.get(name))
    monkeypatch.setattr(R, "GROWERS", growers)
    monkeypatch.setattr(S, "_SPECS", specs)


@pytest.fixture
def live_process():
    """A live process other than this one, held open by its stdin (a lock holder that is still running)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield p
    p.stdin.close()
    p.wait()


@pytest.fixture
def signal_noting_process():
    """A live process that exits with 100 + the signal's number on any common catchable signal (its own handlers,
    so a signal mutmut's worker ignores still shows): a liveness probe must leave it running (returncode 0 at the
    end). `.still_running()` waits half a second for it."""
    import subprocess
    import sys

    code = (
        "import signal, sys\n"
        "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):\n"
        "    signal.signal(s, lambda n, f: sys.exit(100 + n))\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"  # its handlers are in place

    def still_running() -> bool:
        try:
            p.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return True
        return False

    p.still_running = still_running
    yield p
    p.stdin.close()
    p.wait()
    assert p.returncode == 0, f"the probed process got signal {p.returncode - 100}"
