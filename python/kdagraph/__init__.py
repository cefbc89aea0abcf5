"""kdagraph: the speculative-decoding verify step of Kimi Delta Attention layers (docs/python.md).

Where engines already call a function, kdagraph offers the same signature and semantics, so code can
switch by changing an import:

- ``build_fused_accept_indices`` (SGLang's keyword signature);
- ``recurrent_kda`` (FlashInfer 0.7's signature, spec-decode semantics, its frozen verify; the calls
  flash-linear-attention makes through the same arguments: its plain form and ``cu_seqlens`` of different
  lengths), and token trees (``parent_indices=``, docs/trees.md).

Beside them: ``short_conv`` (the KDA layer's short convolution with the fused-accept offset window,
docs/conv.md), the operations of a round over caller-owned arrays (``RoundSpec``, ``SlotStorage``, ``RoundIndices``,
``build_indices``, ``conv_layer``, ``verify_layer``, ``conv_verify_layer`` (the two in one kernel), ``accept``,
``accept_path``, ``commit``, ``materialize``) and the owning classes ``Verifier`` and ``GraphRunner``
(``conv_width=`` gives them the conv). Token trees (docs/trees.md): ``short_conv(parent_indices=, accept_index=)``,
``RoundSpec(trees=True)`` with ``build_indices(parent=)`` and ``accept_path``, and ``Verifier(trees=True)`` with
``set_tree``, ``accept_path_from_host`` and ``GraphRunner.accept_path``.

Arrays are anything with ``__dlpack__`` (numpy, torch, cupy) and numpy arrays of ``ml_dtypes.bfloat16``;
they are used in place, never copied: float32 or bfloat16 inputs and states, int32 indices, C-contiguous
(``recurrent_kda``'s q, k and v may be views with a contiguous last dimension, read through their
strides), CPU arrays on the CPU backend and CUDA arrays on the CUDA backend. The drop-ins also take state pools
whose slot stride exceeds a state (SGLang's per-slot envelopes; the inner dimensions compact), and int64
indices, converted to int32 on the host or on the call's stream, but refused on a stream that is
capturing a CUDA graph (the copy would be an allocation inside the capture). Tensors that require grad
are plain memory to kdagraph: it has no autograd, and its outputs do not require grad. A bad argument raises
``kdagraph.InvalidArgument`` (a ``ValueError`` whose ``argument`` names it, with its dtype by name and its
shape as passed); a CUDA failure raises
``RuntimeError``. ``stream`` is an integer handle (or a ``torch.cuda.Stream``); by default the current
stream of the arrays' framework when it is imported (torch's for torch tensors, cupy's
``cupy.cuda.get_current_stream()`` for cupy arrays), else stream 0.

Replay mode (docs/modes.md) keeps per slot one checkpoint (its pool row) and a ring of records of the tokens
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
from ._arrays import Array, _bad, _host_view, _indices, _is_host, _new
from ._recurrent_kda import recurrent_kda

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

# ---- SGLang: build_fused_accept_indices ----------------------------------------------------------

def build_fused_accept_indices(*, slots: Array, scratch_steps: int, draft_token_num: int,
                               accept_lens_pool: Array, stream: Any = None) -> Tuple[Array, Array]:
    """SGLang's fused-accept indices (docs/indices.md, docs/python.md), built on the slots' device.

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


# ---- kdagraph's own: short_conv --------------------------------------------------------------------

def _check_host_conv_trees(T: int, real, parent, accept_index) -> None:
    """docs/trees.md's host checks of short_conv's token trees, on the real rows (`real` [B] bool; a padded
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
    """The short convolution of a KDA layer with docs/conv.md's fused-accept offset window (docs/python.md).

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

    Token trees (docs/trees.md, EAGLE top-k > 1), both ``[B, T]`` int32 (or int64, converted) and optional:

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
