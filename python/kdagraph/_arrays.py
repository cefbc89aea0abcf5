"""The drop-ins' arrays (docs/python.md): the caller's framework, host views, index conversion, the constant
index arrays a warmed-up call reuses, and errors that name arguments, dtypes and shapes as the caller
passed them."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Optional

from . import _kdagraph
from ._kdagraph import InvalidArgument

Array = Any  # anything with __dlpack__


def _bad(argument: str, message: str) -> InvalidArgument:
    error = InvalidArgument(f"kdagraph: {argument} {message}")
    error.argument = argument
    return error


def _dtype_name(x: Array) -> str:
    """x's dtype by name, as numpy spells it (float16, int64, bool; torch's without its module)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    name = getattr(dtype, "name", None)  # numpy, cupy, ml_dtypes; torch.dtype has none
    return str(name) if isinstance(name, str) else str(dtype).replace("torch.", "")


def _shape(x: Array) -> list:
    return [int(d) for d in x.shape]


@contextlib.contextmanager
def _shapes_as_passed(arguments, internal: tuple, passed: tuple):
    """The extension sees the arrays `arguments` reshaped from the caller's [passed..., ...] (cu_seqlens'
    [1, total, ...]) to [internal..., ...] ([B, T, ...]), views of the same memory; its refusals name
    them in the caller's shapes."""
    try:
        yield
    except InvalidArgument as e:
        argument = getattr(e, "argument", None)
        seen, given = "[" + ", ".join(map(str, internal)) + ", ", "[" + ", ".join(map(str, passed)) + ", "
        if argument not in arguments or seen == given or seen not in str(e):
            raise
        error = InvalidArgument(str(e).replace(seen, given))
        error.argument = argument
        raise error from None


# ---- arrays of the caller's framework ------------------------------------------------------------

def _framework(ref: Array) -> str:
    module = type(ref).__module__.split(".")[0]
    if module in ("numpy", "torch", "cupy"):
        return module
    raise _bad("output", f"is None and kdagraph cannot allocate arrays like {type(ref).__name__}: pass output=")


def _is_host(ref: Array) -> bool:
    """True for arrays in host memory (DLPack device type 1), which the host can read directly."""
    device = getattr(ref, "__dlpack_device__", None)
    return device is not None and int(device()[0]) == 1


def _host_view(x: Array):
    """A numpy view of a host array (no copy), for the checks only the host can make."""
    import numpy as np

    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().numpy()
    return np.from_dlpack(x)


def _on_call_stream(x: Array, name: str, stream: Any, reference: Array, capture_refusal: str):
    """A context in which x's framework (torch, cupy) enqueues on the stream the call enqueues on
    (resolved as for `reference`), for a copy of a device array. On a stream that is capturing a CUDA
    graph the copy would be hidden in the capture: refused by name, `capture_refusal` saying why."""
    handle, capturing = _kdagraph._call_stream(stream, reference)
    if capturing:
        raise _bad(name, capture_refusal)
    kind = type(x).__module__.split(".")[0]
    if kind == "torch":
        torch = sys.modules["torch"]
        current = torch.cuda.current_stream(x.device)
        on = current if current.cuda_stream == handle else torch.cuda.ExternalStream(handle, device=x.device)
        return torch.cuda.stream(on)
    if kind == "cupy":
        return sys.modules["cupy"].cuda.ExternalStream(handle)
    raise _bad(name, f"is in device memory of {type(x).__name__}, which kdagraph can copy only through torch or "
                     f"cupy: pass {name} as int32 (or in host memory)")


def _indices(x: Array, name: str, stream: Any, reference: Array) -> Array:
    """An index array as the extension takes it (int32). int64, torch's default integer type, is taken
    as FlashInfer takes it, converted to an int32 copy by the array's own framework: on the host, or on
    the stream the call enqueues on (resolved as for `reference`). On a stream that is capturing a CUDA
    graph that copy would be an allocation and a kernel hidden in the capture, kept alive by nothing the
    graph owns, so there int64 is refused by name: pass int32. Other dtypes go on to the extension, which
    refuses them by name."""
    if x is None or _dtype_name(x) != "int64":
        return x
    kind = type(x).__module__.split(".")[0]
    if _is_host(x):
        import numpy as np

        h = _host_view(x)
        wide = (h < -2**31) | (h >= 2**31)
        if wide.any():
            at = tuple(int(j) for j in np.argwhere(wide)[0])
            raise _bad(name, f"{list(at)} = {int(h[at])} does not fit int32")
        return x.to(dtype=sys.modules["torch"].int32) if kind == "torch" else h.astype(np.int32)
    with _on_call_stream(x, name, stream, reference, "is int64 on a stream that is capturing a CUDA graph: its "
                         "int32 copy would be an allocation inside the capture; pass int32 indices to a captured call"):
        return x.to(dtype=sys.modules["torch"].int32) if kind == "torch" else x.astype(sys.modules["cupy"].int32)


def _read_on_host(x: Array, name: str, stream: Any, reference: Array):
    """The values of a small array (cu_seqlens) as numpy: a view of a host array, or a copy of a device one
    read on the call's stream (a synchronization, refused by name while that stream captures a graph)."""
    if _is_host(x):
        return _host_view(x)
    with _on_call_stream(x, name, stream, reference, "is in device memory on a stream that is capturing a CUDA "
                         "graph, and only the host can split sequences of different lengths: pass it in host "
                         "memory, or pass sequences of one length with num_spec_tokens (FlashInfer's form)"):
        if type(x).__module__.split(".")[0] == "torch":
            return x.cpu().numpy()
        return sys.modules["cupy"].asnumpy(x)


def _swapped(x: Array, stream: Any, reference: Array, into: Optional[Array] = None) -> Array:
    """x with its last two dimensions swapped (FLA's [K, V] state as kdagraph's [V, K], and back): a new
    contiguous array of x's framework, or written into `into` in place (tensors that require grad as
    plain memory). In device memory the copy runs on the call's stream (resolved as for `reference`),
    and is refused by name while that stream captures a CUDA graph."""
    on_stream = contextlib.nullcontext() if _is_host(x) else _on_call_stream(
        x, "state_v_first", stream, reference, "is False on a stream that is capturing a CUDA graph: FLA's [N, HV, "
        "K, V] state runs on a transposed copy, an allocation inside the capture; pass a V-major state [N, HV, V, K]")
    with on_stream:
        if _framework(x) == "torch":
            swapped = x.detach().transpose(-1, -2)
            return swapped.contiguous() if into is None else into.detach().copy_(swapped)
        module = sys.modules[_framework(x)]
        if into is None:
            return module.ascontiguousarray(module.swapaxes(x, -1, -2))
        into[...] = module.swapaxes(x, -1, -2)
        return into


def _new(ref: Array, shape, dtype: str, fill: Optional[int] = None) -> Array:
    """A new array on ref's device: dtype 'int32', 'float32' or 'like' (ref's own)."""
    kind = _framework(ref)
    if kind == "torch":
        import torch

        t = ref.dtype if dtype == "like" else getattr(torch, dtype)
        if fill is None:
            return torch.empty(shape, dtype=t, device=ref.device)
        return torch.full(shape, fill, dtype=t, device=ref.device)
    module = sys.modules[kind]
    t = ref.dtype if dtype == "like" else getattr(module, dtype)
    if fill is None:
        return module.empty(shape, dtype=t)
    return module.full(shape, fill, dtype=t)


# ---- constant index arrays, made once per device and size (like FlashInfer's), so a warmed-up call
# allocates nothing and can be captured --------------------------------------------------------------

_constants: dict = {}


def _constant(ref: Array, name: str, size: tuple, make):
    key = (name, _framework(ref), str(getattr(ref, "device", "cpu"))) + size
    if key not in _constants:
        _constants[key] = make()
    return _constants[key]


def _arange(ref: Array, n: int) -> Array:
    if _framework(ref) == "torch":
        import torch

        return torch.arange(n, dtype=torch.int32, device=ref.device)
    return sys.modules[_framework(ref)].arange(n, dtype="int32")


def _identity_rows(ref: Array, rows: int, tokens: int) -> Array:
    """[rows, tokens] int32 with entry (b, t) = b * tokens + t."""
    return _constant(ref, "identity", (rows, tokens), lambda: _arange(ref, rows * tokens).reshape(rows, tokens))


def _final_rows(ref: Array, rows: int, tokens: int) -> Array:
    """[rows, tokens] int32, -1 (not written) but for entry (b, tokens - 1) = b: FLA's plain form writes
    only each sequence's final state, to its own row. One row (each sequence of a varlen call alone) is a
    tail of one array per device, doubled when a longer sequence comes, so lengths do not pile up arrays
    (the shorter ones stay alive: a captured graph may read them)."""
    if rows > 1:
        def make():
            a = _new(ref, (rows, tokens), "int32", fill=-1)
            a[:, tokens - 1] = _arange(ref, rows)
            return a
        return _constant(ref, "final", (rows, tokens), make)
    tails = _constant(ref, "final-tails", (), list)
    if not tails or int(tails[-1].shape[0]) < tokens:
        tail = _new(ref, (max(tokens, 2 * int(tails[-1].shape[0]) if tails else 16),), "int32", fill=-1)
        tail[-1] = 0
        tails.append(tail)
    tail = tails[-1]
    return tail[int(tail.shape[0]) - tokens:].reshape(1, tokens)


def _ones(ref: Array, rows: int) -> Array:
    return _constant(ref, "ones", (rows,), lambda: _new(ref, (rows,), "int32", fill=1))
