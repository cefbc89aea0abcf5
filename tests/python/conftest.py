"""Fresh random inputs for every test; the seed is printed, and KDAGRAPH_TEST_SEED repeats it.

The CUDA tests carry the marker `gpu`: without a CUDA device (or a CUDA build) they are reported skipped,
never passed. Where a GPU must be used (KDAGRAPH_REQUIRE_GPU=1, profiling/gpu_check.sh's Python stage), a
gpu test that skips for any reason fails instead, so that a run on the GPU machine cannot pass without
running them. The markers `cuda_graph` (a torch.cuda.graph capture), `cupy` (cupy arrays) and `tree`
(token trees) say what else a gpu test covers; the run ends with a line counting them by outcome."""

import collections
import os
import secrets

import numpy as np
import pytest

MARKERS = {
    "gpu": "needs a CUDA device and kdagraph built with CUDA: skipped without them, never passed",
    "cuda_graph": "captures the drop-ins in a torch.cuda.graph",
    "cupy": "passes cupy arrays (skipped without cupy)",
    "tree": "token trees (docs/trees.md)",
}
REQUIRE_GPU = os.environ.get("KDAGRAPH_REQUIRE_GPU") == "1"
COUNTS = collections.defaultdict(collections.Counter)  # marker -> outcome -> tests


@pytest.fixture
def rng():
    seed = int(os.environ.get("KDAGRAPH_TEST_SEED", secrets.randbits(63)))
    print(f"seed {seed} (KDAGRAPH_TEST_SEED={seed} repeats it)")
    return np.random.default_rng(seed)


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is None:
        for name in MARKERS:
            if item.get_closest_marker(name) is not None:
                pytest.fail(f"marked {name} but not gpu: every {name} test runs on the GPU", pytrace=False)
        return
    import kdagraph

    if not kdagraph.built_with_cuda:
        pytest.skip("kdagraph was built without CUDA (no nvcc at build time)")
    if not kdagraph.cuda_available():
        pytest.skip("no CUDA device visible")
    if item.get_closest_marker("cupy") is not None:
        pytest.importorskip("cupy", reason="cupy is not installed here; the cupy tests run where it is")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_GPU and report.skipped and item.get_closest_marker("gpu") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"KDAGRAPH_REQUIRE_GPU=1: a gpu test skipped ({reason})"


def pytest_runtest_logreport(report):
    """Counted once per test: its call, or the setup that skipped or failed it (also from xdist workers)."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        for name in MARKERS:
            if name in report.keywords:
                COUNTS[name][report.outcome] += 1


def pytest_terminal_summary(terminalreporter):
    parts = []
    for name in MARKERS:
        c = COUNTS[name]
        parts.append(f"{name} {c['passed']} passed {c['skipped']} skipped {c['failed']} failed")
    terminalreporter.write_line("kdagraph markers: " + "; ".join(parts))
