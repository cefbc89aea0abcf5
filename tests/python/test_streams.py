"""The stream a call enqueues on when `stream` is None (on CUDA): the current stream of the arrays'
framework when the caller imported it (torch's for torch tensors, cupy's for cupy arrays), else stream 0.
kdagraph imports no framework itself, so without torch or cupy in sys.modules it must not fail. Checked
through _default_stream, the very function every call resolves its stream with, against stand-in modules:
no GPU, torch or cupy needed."""

import sys
import types

import numpy as np

from kdagraph import _kdagraph


def fake_cupy(ptr):
    cupy = types.ModuleType("cupy")

    class ndarray:  # what cupy arrays are instances of
        pass

    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=ptr))
    return cupy


def fake_torch(handle):
    torch = types.ModuleType("torch")

    class Tensor:
        device = "cuda:0"

    torch.Tensor = Tensor
    torch.is_tensor = lambda x: isinstance(x, Tensor)
    seen = []

    def current_stream(device=None):
        seen.append(device)
        return types.SimpleNamespace(cuda_stream=handle)

    torch.cuda = types.SimpleNamespace(current_stream=current_stream)
    torch.seen = seen
    return torch


def without_frameworks(monkeypatch):
    for name in ("torch", "cupy"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_without_torch_or_cupy_the_default_is_stream_0(monkeypatch):
    without_frameworks(monkeypatch)
    assert _kdagraph._default_stream(None) == 0  # a KeyError('torch') once
    assert _kdagraph._default_stream(np.zeros(2, np.float32)) == 0


def test_a_blocked_torch_import_is_no_torch(monkeypatch):
    without_frameworks(monkeypatch)
    monkeypatch.setitem(sys.modules, "torch", None)  # how Python marks an import as blocked
    assert _kdagraph._default_stream(None) == 0


def test_cupy_arrays_run_on_cupys_current_stream(monkeypatch):
    without_frameworks(monkeypatch)
    cupy = fake_cupy(0xC0FFEE)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert _kdagraph._default_stream(cupy.ndarray()) == 0xC0FFEE
    assert _kdagraph._default_stream(None) == 0xC0FFEE
    assert _kdagraph._default_stream(np.zeros(2, np.float32)) == 0, "numpy arrays are not cupy's"


def test_each_framework_its_own_stream_when_both_are_imported(monkeypatch):
    without_frameworks(monkeypatch)
    cupy, torch = fake_cupy(0xC0FFEE), fake_torch(0x7042)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert _kdagraph._default_stream(torch.Tensor()) == 0x7042
    assert torch.seen[-1] == "cuda:0", "torch's current stream of the tensor's device"
    assert _kdagraph._default_stream(cupy.ndarray()) == 0xC0FFEE
    assert _kdagraph._default_stream(None) == 0x7042, "no reference: torch's, as before"
