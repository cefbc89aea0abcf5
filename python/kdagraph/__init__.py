"""kdagraph: the speculative-decoding verify step of Kimi Delta Attention layers (SPEC §11).

Where engines already call a function, kdagraph offers the same signature and semantics, so code can
switch by changing an import:

- ``build_fused_accept_indices`` (SGLang's keyword signature);
- ``recurrent_kda`` (FlashInfer 0.7's signature, spec-decode semantics, its frozen verify), and token trees
  (``parent_indices=``, SPEC §12).

Beside them: ``short_conv`` (the KDA layer's short convolution with the fused-accept offset window, SPEC
§9), the operations of a round over caller-owned arrays (``RoundSpec``, ``SlotStorage``, ``RoundIndices``,
``build_indices``, ``conv_layer``, ``verify_layer``, ``conv_verify_layer`` (the two in one kernel), ``accept``,
``accept_path``, ``commit``, ``materialize``) and the owning classes ``Verifier`` and ``GraphRunner``
(``conv_width=`` gives them the conv). Token trees (SPEC §12): ``short_conv(parent_indices=, accept_index=)``,
``RoundSpec(trees=True)`` with ``build_indices(parent=)`` and ``accept_path``, and ``Verifier(trees=True)`` with
``set_tree``, ``accept_path_from_host`` and ``GraphRunner.accept_path``.

Arrays are anything with ``__dlpack__`` (numpy, torch, cupy) and numpy arrays of ``ml_dtypes.bfloat16``;
they are used in place, never copied: float32 or bfloat16 inputs and states, int32 indices, C-contiguous,
CPU arrays on the CPU backend and CUDA arrays on the CUDA backend. The drop-ins also take state pools
whose slot stride exceeds a state (SGLang's per-slot envelopes; the inner dimensions compact), and int64
indices, converted to int32 on the host or on the call's stream, but refused on a stream that is
capturing a CUDA graph (the copy would be an allocation inside the capture). Tensors that require grad
are plain memory to kdagraph: it has no autograd, and its outputs do not require grad. A bad argument raises
``kdagraph.InvalidArgument`` (a ``ValueError`` whose ``argument`` names it); a CUDA failure raises
``RuntimeError``. ``stream`` is an integer handle (or a ``torch.cuda.Stream``); by default the current
stream of the arrays' framework when it is imported (torch's for torch tensors, cupy's
``cupy.cuda.get_current_stream()`` for cupy arrays), else stream 0.

Replay mode (SPEC §3) keeps per slot one checkpoint (its pool row) and a ring of records of the tokens
it accepted since (``Verifier(ring_records=, flush_min=)`` and ``RoundSpec`` the same; ``SlotStorage``'s
``ring_kg``, ``ring_u``, ``ring_pending`` and ``ring_start``): a round first folds each slot's pending
records into the checkpoint's state, bitwise the state fused accept would have kept. With the gate in
the kernel, ``A_log`` and ``dt_bias`` are the layer's weights: the records hold the raw gate an earlier
round was given, and a round folds them with its own gate arrays, so they must not change between
rounds (neither their values nor where they are). ``Verifier`` and ``GraphRunner`` refuse a round whose
gate arrays for a layer are not the previous round's (``InvalidArgument`` naming ``A_log`` or
``dt_bias``) until every slot has been materialized or prefilled, and for good once a graph was
captured; the ops keep nothing between calls and cannot check it.

The drop-ins and the ops record what only the device sees in one device error word per backend
(``device_errors``). On CUDA it is host-mapped memory that the first call needing it allocates; that call
must not be inside a stream capture (allocating there is not capture-safe): a first call on a capturing
stream is refused with ``InvalidArgument`` naming ``stream``. Make one call outside the capture first (a
warm-up, or ``device_errors("cuda")``), then capture.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from ._kdagraph import (
    GraphRunner,
    InvalidArgument,
    Mode,
    RoundIndices,
    RoundSpec,
    SlotStorage,
    Verifier,
    accept,
    accept_path,
    build_indices,
    built_with_cuda,
    clear_device_errors,
    commit,
    conv_layer,
    conv_verify_layer,
    cuda_available,
    device_errors,
    materialize,
    round_index_elems,
    round_index_offsets,
    verify_layer,
)
from . import _kdagraph

__all__ = [
    "GraphRunner",
    "InvalidArgument",
    "Mode",
    "RoundIndices",
    "RoundSpec",
    "SlotStorage",
    "Verifier",
    "accept",
    "accept_path",
    "build_fused_accept_indices",
    "build_indices",
    "built_with_cuda",
    "clear_device_errors",
    "commit",
    "conv_layer",
    "conv_verify_layer",
    "cuda_available",
    "device_errors",
    "materialize",
    "recurrent_kda",
    "round_index_elems",
    "round_index_offsets",
    "short_conv",
    "verify_layer",
]

Array = Any  # anything with __dlpack__


def _bad(argument: str, message: str) -> InvalidArgument:
    error = InvalidArgument(f"kdagraph: {argument} {message}")
    error.argument = argument
    return error


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


def _indices(x: Array, name: str, stream: Any, reference: Array) -> Array:
    """An index array as the extension takes it (int32). int64, torch's default integer type, is taken
    as FlashInfer takes it, converted to an int32 copy by the array's own framework: on the host, or on
    the stream the call enqueues on (resolved as for `reference`). On a stream that is capturing a CUDA
    graph that copy would be an allocation and a kernel hidden in the capture, kept alive by nothing the
    graph owns, so there int64 is refused by name: pass int32. Other dtypes go on to the extension, which
    refuses them by name."""
    if x is None or not str(getattr(x, "dtype", "")).endswith("int64"):
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
    handle, capturing = _kdagraph._call_stream(stream, reference)
    if capturing:
        raise _bad(name, "is int64 on a stream that is capturing a CUDA graph: its int32 copy would be an "
                         "allocation inside the capture; pass int32 indices to a captured call")
    if kind == "torch":
        torch = sys.modules["torch"]
        current = torch.cuda.current_stream(x.device)
        on = current if current.cuda_stream == handle else torch.cuda.ExternalStream(handle, device=x.device)
        with torch.cuda.stream(on):
            return x.to(dtype=torch.int32)
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.ExternalStream(handle):
            return x.astype(cupy.int32)
    raise _bad(name, f"is int64 in device memory of {type(x).__name__}: pass int32")


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


_constants: dict = {}


def _identity_rows(ref: Array, rows: int, tokens: int) -> Array:
    """[rows, tokens] int32 with entry (b, t) = b * tokens + t, made once per device and size (like
    FlashInfer's, so a warmed-up call allocates nothing and can be captured)."""
    key = ("identity", _framework(ref), str(getattr(ref, "device", "cpu")), rows, tokens)
    if key not in _constants:
        kind = _framework(ref)
        if kind == "torch":
            import torch

            a = torch.arange(rows * tokens, dtype=torch.int32, device=ref.device).reshape(rows, tokens)
        else:
            a = sys.modules[kind].arange(rows * tokens, dtype="int32").reshape(rows, tokens)
        _constants[key] = a
    return _constants[key]


def _ones(ref: Array, rows: int) -> Array:
    key = ("ones", _framework(ref), str(getattr(ref, "device", "cpu")), rows)
    if key not in _constants:
        _constants[key] = _new(ref, (rows,), "int32", fill=1)
    return _constants[key]


# ---- SGLang: build_fused_accept_indices ----------------------------------------------------------

def build_fused_accept_indices(*, slots: Array, scratch_steps: int, draft_token_num: int,
                               accept_lens_pool: Array, stream: Any = None) -> Tuple[Array, Array]:
    """SGLang's fused-accept indices (SPEC §4, §11), built on the slots' device.

    Returns ``(ssm_state_indices [N, T] int32, num_accepted_tokens [N] int32)``: row n addresses the
    scratch rows ``slots[n] * scratch_steps + t`` of its slot; a padded row (slot -1) is fully negative and
    gathers its length from slot 0 (always in range), a real row from ``accept_lens_pool[slot]``. On the
    host a slot outside [-1, P) or repeated is refused; on the device it makes its row padding and is
    recorded (``device_errors``). ``slots`` and ``accept_lens_pool`` are int32, or int64 converted as
    ``recurrent_kda`` converts its indices.
    """
    if getattr(slots, "ndim", None) != 1:
        raise _bad("slots", f"must be a 1-D array of slots, got {type(slots).__name__} of shape {getattr(slots, 'shape', None)}")
    slots = _indices(slots, "slots", stream, slots)
    accept_lens_pool = _indices(accept_lens_pool, "accept_lens_pool", stream, slots)
    T, S = int(draft_token_num), int(scratch_steps)
    if S < 1:
        raise _bad("scratch_steps", f"= {S} must be at least 1")
    if not 1 <= T <= S:
        raise _bad("draft_token_num", f"= {T} is outside [1, scratch_steps = {S}]")
    n = int(slots.shape[0])
    if _is_host(slots):
        s = _host_view(slots)
        pool_slots = int(accept_lens_pool.shape[0])
        bad = (s < -1) | (s >= pool_slots)
        if bad.any():
            i = int(bad.nonzero()[0][0])
            raise _bad("slots", f"[{i}] = {int(s[i])} is outside [-1, {pool_slots}) (-1 marks a padded row)")
        real = s[s >= 0]
        if len(set(real.tolist())) != len(real):
            raise _bad("slots", "repeats a slot: each slot may appear once per batch")
    ssm_state_indices = _new(slots, (n, T), "int32")
    num_accepted_tokens = _new(slots, (n,), "int32")
    _kdagraph._build_slot_indices(slots, accept_lens_pool, S, T, ssm_state_indices, num_accepted_tokens, stream)
    return ssm_state_indices, num_accepted_tokens


# ---- FlashInfer: recurrent_kda -------------------------------------------------------------------

def _check_host_indices(B: int, T: int, states_rows: int, write_row, seed_token, seed_row, seeds_rows: int,
                        parent, names: dict, writes: bool) -> None:
    """What only the host can check before the verify, on host arrays: every index in range, every
    accept length in [1, T], every real row's token tree (`parent`, or None: chains) in topological
    order, and when the call `writes` states, no state row written twice or read by one row while
    another writes it. `write_row` None: a frozen verify's own rows, which name nothing."""
    import numpy as np

    w = None if write_row is None else _host_view(write_row).reshape(B, T)
    if w is not None:
        over = w >= states_rows
        if over.any():
            b, t = (int(x) for x in np.argwhere(over)[0])
            raise _bad(names["write_row"], f"[{b}, {t}] = {int(w[b, t])} is outside the state's {states_rows} rows")
    if seed_token is not None:
        a = _host_view(seed_token)
        live = w.max(axis=1) >= 0
        out = live & ((a < 1) | (a > T))
        if out.any():
            b = int(out.nonzero()[0][0])
            raise _bad(names["seed_token"], f"[{b}] = {int(a[b])} is outside [1, T = {T}]")
        seed = np.where(live, w[np.arange(B), np.clip(a, 1, T) - 1], -1)
    else:
        r = _host_view(seed_row)
        over = r >= seeds_rows
        if over.any():
            b = int(over.nonzero()[0][0])
            raise _bad(names["seed_row"], f"[{b}] = {int(r[b])} is outside the {seeds_rows} rows it indexes")
        seed = r
    padded = seed < 0
    if parent is not None:  # SPEC §12: parent[b, t] in [-1, t); a padded row's is never read
        p = _host_view(parent)
        bad = ~padded[:, None] & ((p < -1) | (p >= np.arange(T)[None, :]))
        if bad.any():
            b, t = (int(x) for x in np.argwhere(bad)[0])
            raise _bad(names["parent"], f"[{b}, {t}] = {int(p[b, t])} is outside [-1, {t}): a token's parent is an "
                                        "earlier token of its sequence, or -1 (the seed)")
    if not writes:
        return
    written = w[~padded]
    written = written[written >= 0]
    if len(np.unique(written)) != len(written):
        raise _bad(names["write_row"], "names a state row twice: each post-state needs its own row")
    if seed_token is not None or names["seeds"] == names["states"]:
        owner = {int(x): b for b in range(B) if not padded[b] for x in w[b] if x >= 0}
        for b in range(B):
            if not padded[b] and owner.get(int(seed[b]), b) != b:
                raise _bad(names["write_row"], f"row {owner[int(seed[b])]} writes state row {int(seed[b])}, the seed of row {b}")


# FlashInfer 0.7's recurrent_kda options kdagraph does not implement, with the value that leaves each
# unused (the default, which a caller may also pass explicitly). Any other value is refused by name.
_UNIMPLEMENTED = {
    "seq_order": None,                  # packed-prefill scheduling
    "prefill_workspace": None,          # prefill backends' workspace
    "state_checkpoints": None,          # prefill checkpoints
    "checkpoint_cu_starts": None,
    "checkpoint_every_n_tokens": 0,
    "checkpoint_state_indices": None,
    "correction_cache": None,           # frozen verify's recovery caches
    "kg_cache": None,
}
_BACKENDS = (None, "auto")  # FlashInfer's choice among its own implementations; kdagraph has one per device


def recurrent_kda(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Optional[Array] = None,
                  dt_bias: Optional[Array] = None, scale: Optional[float] = None,
                  initial_state: Optional[Array] = None, output_final_state: bool = False,
                  use_qk_l2norm_in_kernel: bool = True, use_gate_in_kernel: bool = False,
                  lower_bound: Optional[float] = None, cu_seqlens: Optional[Array] = None,
                  ssm_state_indices: Optional[Array] = None, num_spec_tokens: Optional[int] = None,
                  num_accepted_tokens: Optional[Array] = None, output: Optional[Array] = None,
                  initial_state_source: Optional[Array] = None, initial_state_indices: Optional[Array] = None,
                  beta_is_logit: bool = False, seq_order: Optional[Array] = None, prefill_workspace: Any = None,
                  state_checkpoints: Optional[Array] = None, checkpoint_cu_starts: Optional[Array] = None,
                  checkpoint_every_n_tokens: int = 0, checkpoint_state_indices: Optional[Array] = None, *,
                  disable_state_update: bool = False, correction_cache: Optional[Array] = None,
                  kg_cache: Optional[Array] = None, backend: Optional[str] = "auto",
                  parent_indices: Optional[Array] = None, stream: Any = None) -> Tuple[Array, Optional[Array]]:
    """FlashInfer 0.7's recurrent KDA with spec-decode semantics (SPEC §1, §11), its signature as is.

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g ``[B, T, HV, K]`` (log decay, or the raw gate input with
    ``use_gate_in_kernel``, then ``A_log [HV]`` and ``dt_bias [HV * K]`` fp32), beta ``[B, T, HV]``; or the
    packed ``[1, B * T, ...]`` form with ``cu_seqlens [B + 1]`` of B sequences of one length T. The state
    ``initial_state [N, HV, V, K]`` (fp32 or bf16, V-major) is updated in place; its slot stride (dimension
    0) may be any multiple of 16 bytes that holds a state (SGLang's per-slot envelopes), the rest compact:

    - spec decode, ``ssm_state_indices [B, T]``: the post-state of token t goes to row
      ``ssm_state_indices[b, t]`` (negative: not written); the seed is row
      ``ssm_state_indices[b, num_accepted_tokens[b] - 1]`` (``num_accepted_tokens`` None: 1);
    - decode (T = 1) with ``ssm_state_indices [B]``: row ``ssm_state_indices[b]`` is the seed and takes the
      new state; without indices, row b (``num_spec_tokens`` set: rows ``b * T + t``, as FlashInfer);
    - ``initial_state_source [N0, HV, V, K]`` with ``initial_state_indices [B]`` (FlashInfer 0.7): the seed is
      row ``initial_state_indices[b]`` of that read-only pool whatever ``num_accepted_tokens`` says;
    - ``disable_state_update=True`` (FlashInfer 0.7's frozen verify): the outputs from the seed the same
      call would use, no state row written (``initial_state`` may be None with a source); as FlashInfer's
      frozen mode, ``ssm_state_indices [B]`` names each row's seed at any T, no indices seed row b, and
      ``output_final_state=True`` is refused.

    Token trees (SPEC §12, EAGLE's top-k > 1), kdagraph's own keyword: with ``parent_indices [B, T]``
    (int32, or int64 converted as the indices are; in q's memory) the T tokens of sequence b form a tree,
    token t updating the state of token ``parent_indices[b, t]`` (-1: the seed) and outputting from its
    own post-state, which goes where a chain's would (row ``ssm_state_indices[b, t]``). Each entry is in
    ``[-1, t)`` (topological order, so ``parent_indices[b, 0] = -1``); a chain, ``parent_indices[b, t] =
    t - 1``, is bitwise the call without. The seed is found as for a chain: row ``ssm_state_indices[b,
    num_accepted_tokens[b] - 1]`` with num_accepted_tokens = the last accepted node + 1 (or the source's
    row). Trees go with spec decode (``ssm_state_indices [B, T]``, or ``num_spec_tokens``) and with the
    frozen verify (the tree's outputs from the one seed, nothing written); a decode (one token per
    sequence updating its own row) has nothing to branch and refuses ``parent_indices`` by name. On CUDA
    a tree has at most 16 tokens (more is refused naming ``parent_indices``).

    A negative seed index marks a padded row: zero output, nothing read or written. Index arrays are
    int32, or int64 as torch makes them, converted to an int32 copy (on the host, or on the call's stream)
    except on a stream that is capturing a CUDA graph, where int64 is refused: pass int32 to captured calls.
    Tensors that require grad are read and written as plain memory: kdagraph records no autograd graph,
    and its outputs do not require grad.

    Returns ``(output [B, T, HV, V] in q's dtype and form, initial_state if output_final_state else None)``.
    Cases FlashInfer leaves undefined (an accept length outside [1, T], indices outside the state, a
    state row written twice, shapes that disagree, sequences of different lengths) raise
    ``InvalidArgument`` naming the argument; so do FlashInfer 0.7 options kdagraph does not implement
    (``seq_order``, ``prefill_workspace``, ``state_checkpoints``, ``checkpoint_cu_starts``,
    ``checkpoint_every_n_tokens``, ``checkpoint_state_indices``, ``correction_cache``, ``kg_cache``, and a
    ``backend`` other than "auto"), each with nothing changed; so does, on host arrays, a real row's
    ``parent_indices`` entry outside ``[-1, t)``. On the device, where the host cannot look, lengths are
    clamped, out-of-range rows skipped and a parent outside ``[-1, t)`` read as t - 1 (the chain's), each
    recorded in ``device_errors("cuda")``.
    """
    given = dict(seq_order=seq_order, prefill_workspace=prefill_workspace, state_checkpoints=state_checkpoints,
                 checkpoint_cu_starts=checkpoint_cu_starts, checkpoint_every_n_tokens=checkpoint_every_n_tokens,
                 checkpoint_state_indices=checkpoint_state_indices, correction_cache=correction_cache,
                 kg_cache=kg_cache)
    for name, unused in _UNIMPLEMENTED.items():
        value = given[name]
        if (value is not None) if unused is None else (value != unused):
            raise _bad(name, "is a FlashInfer 0.7 option kdagraph does not implement; leave it at its default "
                             f"({unused!r})")
    if backend not in _BACKENDS:
        raise _bad("backend", f"= {backend!r} selects one of FlashInfer's implementations; kdagraph has one per "
                              "device: leave it at 'auto' (or None)")
    frozen = bool(disable_state_update)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state),
                    ("initial_state_source", initial_state_source), ("output", output)):
        if x is None and name not in ("q", "k", "v", "g", "beta"):
            continue
        if not hasattr(x, "shape"):
            raise _bad(name, f"is not an array: {type(x).__name__}")
    if len(q.shape) != 4:
        raise _bad("q", f"has shape {tuple(q.shape)}; expected [B, T, H, K] (or [1, B * T, H, K] with cu_seqlens)")
    packed_shape = None
    if cu_seqlens is not None:
        if q.shape[0] != 1:
            raise _bad("q", f"has shape {tuple(q.shape)}; with cu_seqlens it is [1, B * T, H, K]")
        B = int(cu_seqlens.shape[0]) - 1
        if B < 1:
            raise _bad("cu_seqlens", f"has {int(cu_seqlens.shape[0])} entries; expected B + 1 >= 2")
        total = int(q.shape[1])
        if total % B:
            raise _bad("cu_seqlens", f"describes {B} sequences of {total} tokens: kdagraph takes sequences of one length")
        T = total // B
        if _is_host(cu_seqlens):
            import numpy as np

            c = _host_view(cu_seqlens)
            if not np.array_equal(c, np.arange(0, total + 1, T)):
                raise _bad("cu_seqlens", f"= {c.tolist()} is not {B} sequences of {T} tokens each")
        packed_shape = tuple(q.shape)
        q, k, v, g, beta = (x.reshape((B, T) + tuple(x.shape[2:])) for x in (q, k, v, g, beta))
        if output is not None:
            output = output.reshape((B, T) + tuple(output.shape[2:]))
    B, T, H, K = (int(d) for d in q.shape)
    HV, V = int(v.shape[2]), int(v.shape[3])
    if num_spec_tokens is not None and int(num_spec_tokens) + 1 != T:
        raise _bad("num_spec_tokens", f"= {num_spec_tokens} but the inputs hold T = {T} tokens per sequence (T = 1 + num_spec_tokens)")

    if use_gate_in_kernel:
        gate = "lower-bound" if lower_bound is not None else "softplus"
        if lower_bound is not None and not float(lower_bound) < 0:
            raise _bad("lower_bound", f"= {lower_bound} must be negative")
    else:
        if lower_bound is not None:
            raise _bad("lower_bound", "is set but use_gate_in_kernel is False: g is already the log decay")
        gate = "precomputed"

    if (initial_state_source is None) != (initial_state_indices is None):
        missing = "initial_state_indices" if initial_state_indices is None else "initial_state_source"
        raise _bad(missing, "is None: initial_state_source and initial_state_indices come together")
    if frozen:
        if output_final_state:
            raise _bad("output_final_state", "is True with disable_state_update: a frozen verify writes no state to return")
        if initial_state is None and initial_state_source is None:
            raise _bad("initial_state", "is None: a frozen verify (disable_state_update) seeds from initial_state "
                                        "or initial_state_source")
    ssm_state_indices = _indices(ssm_state_indices, "ssm_state_indices", stream, q)
    num_accepted_tokens = _indices(num_accepted_tokens, "num_accepted_tokens", stream, q)
    initial_state_indices = _indices(initial_state_indices, "initial_state_indices", stream, q)
    parent_indices = _indices(parent_indices, "parent_indices", stream, q)

    # Which rows the verify seeds from and writes to. A frozen verify seeds as the updating call would
    # and writes nothing; its write rows then only locate a seed_token's row (None: its own, unread).
    names = {"states": "initial_state", "seeds": "initial_state", "write_row": "ssm_state_indices",
             "seed_row": "ssm_state_indices", "seed_token": "num_accepted_tokens", "output": "output",
             "parent": "parent_indices"}
    seed_row = seed_token = None
    checked_write_row = None
    if ssm_state_indices is not None and len(ssm_state_indices.shape) == 2:
        if tuple(ssm_state_indices.shape) != (B, T):
            raise _bad("ssm_state_indices", f"has shape {tuple(ssm_state_indices.shape)}; expected [B, T] = [{B}, {T}]")
        if initial_state is None and not frozen:
            raise _bad("initial_state", "is None: spec decode writes into the state pool ssm_state_indices names")
        write_row = checked_write_row = ssm_state_indices
        if initial_state_source is None:
            seed_token = num_accepted_tokens if num_accepted_tokens is not None else _ones(q, B)
    elif ssm_state_indices is not None:
        if len(ssm_state_indices.shape) != 1 or int(ssm_state_indices.shape[0]) != B:
            raise _bad("ssm_state_indices", f"has shape {tuple(ssm_state_indices.shape)}; expected [B, T] or, at T = 1, [B]")
        if T != 1 and not frozen:
            raise _bad("ssm_state_indices", f"is [B] but T = {T}: a verify of T > 1 tokens needs [B, T] (spec decode)")
        if num_accepted_tokens is not None and initial_state_source is None:
            raise _bad("num_accepted_tokens", "is set without spec decode (ssm_state_indices [B, T])")
        if initial_state is None and not frozen:
            raise _bad("initial_state", "is None: ssm_state_indices names rows of the state pool")
        if T == 1:
            write_row = checked_write_row = ssm_state_indices.reshape(B, 1)
        else:
            write_row = _identity_rows(q, B, T)
        seed_row = ssm_state_indices
        names["write_row"] = names["seed_row"] = "ssm_state_indices"
    else:
        if num_accepted_tokens is not None and num_spec_tokens is None and initial_state_source is None:
            raise _bad("num_accepted_tokens", "is set without spec decode (ssm_state_indices or num_spec_tokens)")
        if T != 1 and num_spec_tokens is None and not frozen:
            raise _bad("q", f"holds T = {T} tokens per sequence: more than one needs num_spec_tokens or ssm_state_indices [B, T]")
        write_row = _identity_rows(q, B, T)
        names["write_row"] = "initial_state (rows b * T + t)"
        if initial_state is None and not frozen:
            initial_state = _new(q, (B * T, HV, V, K), "float32", fill=0)
        if frozen:
            if num_accepted_tokens is not None and initial_state_source is None:
                raise _bad("num_accepted_tokens", "is set with disable_state_update and no ssm_state_indices: the "
                                                  "frozen verify seeds row b")
            seed_row = _identity_rows(q, B, 1).reshape(B)
            names["seed_row"] = "initial_state (row b)"
        elif T == 1:
            checked_write_row = write_row
            seed_row = write_row.reshape(B)
            names["seed_row"] = "initial_state (row b)"
        else:
            checked_write_row = write_row
            if initial_state_source is None:
                seed_token = num_accepted_tokens if num_accepted_tokens is not None else _ones(q, B)
    seeds = None
    if initial_state_source is not None:
        if tuple(initial_state_indices.shape) != (B,):
            raise _bad("initial_state_indices", f"has shape {tuple(initial_state_indices.shape)}; expected [B] = [{B}]")
        seeds, seed_row, seed_token = initial_state_source, initial_state_indices, None
        names["seeds"] = "initial_state_source"
        names["seed_row"] = "initial_state_indices"
        if frozen:  # nothing is written: the write rows are not read, and the source may stand in for the pool
            checked_write_row = None
            if initial_state is None:
                initial_state = initial_state_source
                names["states"] = "initial_state_source"

    decode = not frozen and T == 1 and num_spec_tokens is None and (
        ssm_state_indices is None or len(ssm_state_indices.shape) == 1)
    if parent_indices is not None and decode:
        raise _bad("parent_indices", "is set for a decode (one token per sequence, updating its own row): a token "
                                     "tree is for spec decode (ssm_state_indices [B, T] or num_spec_tokens) or a "
                                     "frozen verify")
    for name, x, shape in (("ssm_state_indices", ssm_state_indices, None), ("num_accepted_tokens", num_accepted_tokens, (B,)),
                           ("initial_state_indices", initial_state_indices, (B,)), ("parent_indices", parent_indices, (B, T))):
        if x is not None:
            if "int32" not in str(getattr(x, "dtype", "")):
                raise _bad(name, f"has dtype {getattr(x, 'dtype', type(x).__name__)}; expected int32 (or int64)")
            if shape is not None and tuple(x.shape) != shape:
                raise _bad(name, f"has shape {tuple(x.shape)}; expected {list(shape)}")
    if _is_host(q):
        if initial_state is not None and len(initial_state.shape) != 4:
            raise _bad(names["states"], f"has shape {tuple(initial_state.shape)}; expected [N, HV, V, K]")
        seeds_rows = int((seeds if seeds is not None else initial_state).shape[0])
        _check_host_indices(B, T, int(initial_state.shape[0]), checked_write_row, seed_token, seed_row, seeds_rows,
                            parent_indices, names, writes=not frozen)

    if output is None:
        output = _new(q, (B, T, HV, V), "like")
    _kdagraph._verify_indexed(q, k, v, g, beta, output, initial_state, seeds, seed_row, seed_token, write_row,
                              A_log if use_gate_in_kernel else None, dt_bias if use_gate_in_kernel else None,
                              bool(use_qk_l2norm_in_kernel), scale, gate,
                              float(lower_bound) if lower_bound is not None else -5.0, bool(beta_is_logit),
                              not frozen, parent_indices, stream, names)
    if packed_shape is not None:
        output = output.reshape((1, B * T, HV, V))
    return output, (initial_state if output_final_state else None)


# ---- kdagraph's own: short_conv --------------------------------------------------------------------

def _check_host_conv_trees(T: int, real, parent, accept_index) -> None:
    """SPEC §12's host checks of short_conv's token trees, on the real rows (`real` [B] bool; a padded
    row's entries are never read): `parent` [B, T] this call's tree, parent[b, t] in [-1, t) (so
    parent[b, 0] = -1); `accept_index` [B, T] a root-to-node path of the call before, its node indices in
    [0, T) strictly increasing, then only -1. Whether each step is a child of the one before, only the
    previous call's tree says; the call does not have it."""
    import numpy as np

    if parent is not None:
        p = _host_view(parent)
        bad = real[:, None] & ((p < -1) | (p >= np.arange(T)[None, :]))
        if bad.any():
            b, t = (int(x) for x in np.argwhere(bad)[0])
            raise _bad("parent_indices", f"[{b}, {t}] = {int(p[b, t])} is outside [-1, {t}): a token's parent is an "
                                         "earlier token of its sequence, or -1 (a child of the seed)")
    if accept_index is not None:
        path = _host_view(accept_index)
        for b in np.flatnonzero(real):
            last, end = -1, None
            for i, node in enumerate(int(v) for v in path[b]):
                if end is not None:
                    if node != -1:
                        raise _bad("accept_index", f"[{b}, {i}] = {node} follows the path's end ([{b}, {end}] = -1): "
                                                   "only -1 follows it")
                elif node == -1:
                    end = i
                elif not 0 <= node < T:
                    raise _bad("accept_index", f"[{b}, {i}] = {node} is outside [-1, T = {T}): a path's entries are "
                                               "node indices of the previous call's tree, then -1")
                elif node <= last:
                    raise _bad("accept_index", f"[{b}, {i}] = {node} does not come after node {last}: a root-to-node "
                                               "path goes down the tree, to later tokens (topological order)")
                else:
                    last = node


def short_conv(x: Array, conv_state: Array, weight: Array, bias: Optional[Array] = None, *, state_indices: Array,
               num_accepted_tokens: Array, activation: Optional[str] = "silu", output: Optional[Array] = None,
               parent_indices: Optional[Array] = None, accept_index: Optional[Array] = None,
               stream: Any = None) -> Array:
    """The short convolution of a KDA layer with SPEC §9's fused-accept offset window (SPEC §11).

    x ``[B, T, C]`` (the q, k and v projections concatenated; float32 or bfloat16), weight ``[C, W]``
    float32 (W = 2 to 4), bias ``[C]`` float32 or None, ``activation`` "silu" or "none" ("linear", None):
    ``y_t[c] = act(sum_j weight[c, j] * x_{t-W+1+j}[c] + bias[c])`` in fp32, y in x's dtype, any C >= 1. The
    conv state ``conv_state [N, W - 2 + S, C]`` (x's dtype, S >= T; compact rows at any row stride, e.g. a
    view into per-slot envelopes) is updated in place: batch row b uses state row ``state_indices[b]``,
    whose window of the W - 1 inputs before x_1 starts at column ``o = max(num_accepted_tokens[b] - 1, 0)``
    (both int32, or int64 converted as ``recurrent_kda`` converts them); afterwards columns
    ``[0, W - 2)`` hold ``[o + 1, o + W - 1)`` and ``[W - 2, W - 2 + T)`` hold x_1..x_T, so the next
    call's window is at the accept length of this round's tokens. A negative ``state_indices[b]`` marks a
    padded row: zero output, nothing read or written. Returns y ``[B, T, C]`` (``output`` when given).

    Token trees (SPEC §12, EAGLE top-k > 1), both ``[B, T]`` int32 (or int64, converted) and optional:

    - ``parent_indices``: this call's tree per row, ``parent_indices[b, t]`` in ``[-1, t)`` (-1: a child of
      the seed; ``[b, 0]`` is -1). Token t's window is the inputs of its nearest W - 1 ancestors, oldest
      first, after the row's history where it has fewer. The state is written as for a chain: columns
      ``[W - 2, W - 2 + T)`` hold x_1..x_T in token order. A chain given as a tree (``parent[b, t] = t - 1``)
      is bitwise the call without.
    - ``accept_index``: the path each row accepted in the call before (SGLang's ``accept_index``: its
      node indices from the root, a child of that call's seed, down that call's tree, then -1). The row's
      history is then the W - 2 columns ``[0, W - 2)`` followed by the previous call's inputs at columns
      ``W - 2 + accept_index[b, i]`` in path order, and the window is its last W - 1 inputs, so nothing is
      scattered when a branch is accepted. ``num_accepted_tokens[b]`` is then the path's last node + 1, as
      SGLang passes it (checked in ``[0, S]`` as always), and does not place the window; a row whose path
      is empty (``[b, 0] = -1``: a request just prefilled, with ``num_accepted_tokens`` 0) reads the offset
      window as without ``accept_index``. After a call with ``parent_indices`` the next call passes
      ``accept_index``: the offset window reads the accepted tokens only when they are a chain from token 0.

    Arguments that disagree raise ``InvalidArgument`` naming them; on host arrays also a state row outside
    ``[0, N)``, one named twice, a real row's accept length outside ``[0, S]``, a parent outside
    ``[-1, t)``, or an ``accept_index`` row that is not a path (entries outside ``[-1, T)``, not increasing,
    or other than -1 after its end; whether it follows the previous call's tree only that call knew). On
    the device, where the host cannot look, such rows are skipped, lengths clamped and a parent read as
    t - 1, each recorded in ``device_errors("cuda")``, and a path ends at its first entry outside ``[0, T)``.
    """
    for name, a in (("x", x), ("conv_state", conv_state), ("weight", weight), ("state_indices", state_indices),
                    ("num_accepted_tokens", num_accepted_tokens)):
        if not hasattr(a, "shape"):
            raise _bad(name, f"is not an array: {type(a).__name__}")
    state_indices = _indices(state_indices, "state_indices", stream, x)
    num_accepted_tokens = _indices(num_accepted_tokens, "num_accepted_tokens", stream, x)
    parent_indices = _indices(parent_indices, "parent_indices", stream, x)
    accept_index = _indices(accept_index, "accept_index", stream, x)
    # What only the host can check, once the shapes agree (else the extension names what disagrees).
    shapes_agree = len(x.shape) == 3 and len(weight.shape) == 2 and len(conv_state.shape) == 3 and \
        2 <= int(weight.shape[1]) <= 4 and int(x.shape[2]) == int(weight.shape[0]) == int(conv_state.shape[2])
    if shapes_agree and _is_host(state_indices) and _is_host(num_accepted_tokens):
        B, T, N = int(x.shape[0]), int(x.shape[1]), int(conv_state.shape[0])
        S = int(conv_state.shape[1]) - int(weight.shape[1]) + 2
        if S >= T and tuple(state_indices.shape) == (B,) and tuple(num_accepted_tokens.shape) == (B,) \
                and "int32" in str(num_accepted_tokens.dtype) and "int32" in str(state_indices.dtype):
            rows, a = _host_view(state_indices), _host_view(num_accepted_tokens)
            real = rows >= 0
            over = rows >= N
            if over.any():
                b = int(over.nonzero()[0][0])
                raise _bad("state_indices", f"[{b}] = {int(rows[b])} is outside the conv state's {N} rows")
            if len(set(rows[real].tolist())) != int(real.sum()):
                raise _bad("state_indices", "names a conv state row twice: each row's window is updated in place")
            out = real & ((a < 0) | (a > S))
            if out.any():
                b = int(out.nonzero()[0][0])
                raise _bad("num_accepted_tokens", f"[{b}] = {int(a[b])} is outside [0, S = {S}] (S = conv_state columns - W + 2)")
            # The trees' entries once their shape, dtype and place are right (else the extension names them).
            tree = lambda t: t if t is not None and _is_host(t) and tuple(t.shape) == (B, T) and \
                "int32" in str(t.dtype) else None
            _check_host_conv_trees(T, real, tree(parent_indices), tree(accept_index))
    if output is None:
        output = _new(x, tuple(int(d) for d in x.shape), "like")
    _kdagraph._short_conv(x, conv_state, weight, bias, state_indices, num_accepted_tokens, activation, output,
                          parent_indices, accept_index, stream)
    return output
