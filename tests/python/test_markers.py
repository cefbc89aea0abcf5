"""conftest.py's markers, in a pytest of their own with no CUDA device visible (CUDA_VISIBLE_DEVICES empty,
on a GPU machine too): a gpu test is skipped, never passed; with KDAGRAPH_REQUIRE_GPU=1, as on the GPU
check, it fails instead; a cuda_graph, cupy or tree test not marked gpu fails; the closing line counts each
marker's tests by outcome."""

import os
import shutil
import subprocess
import sys

TESTS = '''
import pytest

@pytest.mark.gpu
@pytest.mark.cuda_graph
def test_on_the_gpu():
    pass

@pytest.mark.gpu
@pytest.mark.tree
def test_a_tree_on_the_gpu():
    pass

def test_on_the_cpu():
    pass
'''
UNMARKED = '''
import pytest

@pytest.mark.cupy
def test_cupy_without_gpu():
    pass
'''


def run_pytest(tmp_path, tests, require_gpu):
    shutil.copy(os.path.join(os.path.dirname(__file__), "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(tests)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", KDAGRAPH_REQUIRE_GPU="1" if require_gpu else "0")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    markers = [line for line in p.stdout.splitlines() if line.startswith("kdagraph markers: ")]
    assert len(markers) == 1, p.stdout + p.stderr
    return p, markers[0]


def test_without_a_gpu_the_gpu_tests_are_skipped_and_counted(tmp_path):
    p, markers = run_pytest(tmp_path, TESTS, require_gpu=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 2 skipped" in p.stdout, p.stdout
    assert markers == ("kdagraph markers: gpu 0 passed 2 skipped 0 failed; cuda_graph 0 passed 1 skipped 0 failed; "
                       "cupy 0 passed 0 skipped 0 failed; tree 0 passed 1 skipped 0 failed"), markers


def test_where_a_gpu_is_required_a_skipped_gpu_test_fails(tmp_path):
    p, markers = run_pytest(tmp_path, TESTS, require_gpu=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "KDAGRAPH_REQUIRE_GPU=1: a gpu test skipped" in p.stdout, p.stdout
    assert "1 passed, 2 errors" in p.stdout, p.stdout
    assert markers.startswith("kdagraph markers: gpu 0 passed 0 skipped 2 failed;"), markers


def test_a_gpu_kind_not_marked_gpu_fails(tmp_path):
    p, markers = run_pytest(tmp_path, UNMARKED, require_gpu=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "marked cupy but not gpu" in p.stdout, p.stdout
    assert "cupy 0 passed 0 skipped 1 failed" in markers, markers
