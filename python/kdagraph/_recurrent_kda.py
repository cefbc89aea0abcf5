"""FlashInfer 0.7's recurrent_kda (docs/python.md) and the forms flash-linear-attention calls through it.

Every call becomes verifies of [B, T] tokens (`_verify`), each seeding from and writing to the state rows
its form names. cu_seqlens of one length is a reshape of the packed [1, B * T, ...] form; sequences of
different lengths (FLA's varlen form) run one verify per run of equal lengths, on views of the caller's
arrays, after the host has checked the whole call, so a refused call still changes nothing."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ._arrays import Array, _bad, _dtype_name, _indices, _is_host, _new, _read_on_host, _shape, _shapes_as_passed
from ._verify import _check_host_indices, _verify


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

_IO = ("q", "k", "v", "g", "beta", "output")  # the arrays with a token dimension


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
                  parent_indices: Optional[Array] = None, allow_neg_eigval: bool = False,
                  state_v_first: Optional[bool] = None, transpose_state_layout: Optional[bool] = None,
                  stream: Any = None) -> Tuple[Array, Optional[Array]]:
    """FlashInfer 0.7's recurrent KDA with spec-decode semantics (docs/math.md, docs/python.md), its signature as is, and
    flash-linear-attention's plain and varlen forms through it.

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g ``[B, T, HV, K]`` (log decay, or the raw gate input with
    ``use_gate_in_kernel``, then ``A_log [HV]`` and ``dt_bias [HV * K]`` fp32), beta ``[B, T, HV]`` (q, k, v
    and the output float32, bfloat16 or float16; g and beta in that dtype, or both float32); or the
    packed ``[1, total, ...]`` form with ``cu_seqlens [B + 1]`` (below). The state ``initial_state [N, HV,
    V, K]`` (fp32 or bf16, V-major; FLA's ``[N, HV, K, V]`` with ``state_v_first=False``, below) is updated
    in place; its slot stride (dimension 0) may be any multiple of 16 bytes that holds a state (SGLang's
    per-slot envelopes), the rest compact:

    - spec decode, ``ssm_state_indices [B, T]``: the post-state of token t goes to row
      ``ssm_state_indices[b, t]`` (negative: not written); the seed is row
      ``ssm_state_indices[b, a - 1]`` with a = ``num_accepted_tokens[b]`` (None: 1) clamped to [1, T], as
      FlashInfer documents: on every backend a length of 0 seeds at token 0 and one above T at token T - 1,
      and a real row's clamped length is recorded in ``device_errors`` (``accept_out_of_range``);
    - decode (T = 1) with ``ssm_state_indices [B]``: row ``ssm_state_indices[b]`` is the seed and takes the
      new state; without indices, row b (``num_spec_tokens`` set: rows ``b * T + t``, as FlashInfer);
    - FLA's plain form, T > 1 tokens and no ``ssm_state_indices`` nor ``num_spec_tokens``: sequence b runs
      from ``initial_state[b]`` (None: zeros) and, with ``output_final_state=True``, only its final state is
      written, back to row b in place (FLA returns a new array; ``initial_state`` is otherwise unchanged);
    - ``initial_state_source [N0, HV, V, K]`` with ``initial_state_indices [B]`` (FlashInfer 0.7): the seed is
      row ``initial_state_indices[b]`` of that read-only pool whatever ``num_accepted_tokens`` says;
    - ``disable_state_update=True`` (FlashInfer 0.7's frozen verify): the outputs from the seed the same
      call would use, no state row written (``initial_state`` may be None with a source); as FlashInfer's
      frozen mode, ``ssm_state_indices [B]`` names each row's seed at any T, no indices seed row b, and
      ``output_final_state=True`` is refused.

    ``cu_seqlens [B + 1]`` (int32 or int64) with q ``[1, total, H, K]`` and the others alike: sequence b is
    tokens ``[cu_seqlens[b], cu_seqlens[b + 1])``. Of one length T it is the dense form's ``[B, T]``; of
    different lengths (FLA's varlen form) each sequence runs as the dense form would run it alone, on
    zero-copy views, ``ssm_state_indices``/``parent_indices`` then ``[B, >= the longest]`` (sequence b uses
    its first T_b columns) or ``[B]``, and a sequence of no tokens is skipped. Without indices the varlen
    form is FLA's plain form at every length. Device ``cu_seqlens`` with ``num_spec_tokens``, or of one
    token per sequence, are taken unread as FlashInfer takes them (one length, 1 + num_spec_tokens);
    other device ``cu_seqlens`` are read by the host (a synchronization, refused while capturing).

    ``state_v_first`` (FLA's keyword; ``transpose_state_layout``, its deprecated spelling, means the same,
    and passing both is refused): None or True, the state is V-major as above; False, ``initial_state`` is
    FLA's default ``[N, HV, K, V]`` (None: zeros, returned in that layout). It is taken by FLA's plain form
    and its varlen form (and the decode without indices, which also reads and writes row b): each verify
    runs on a V-major copy of the rows it reads, and what it writes is copied back transposed into the
    caller's array in place, so outputs and states are bitwise those of the call on a V-major state. This
    form allocates that transposed copy: it is FLA's convenience form, not a graph path (on a stream
    capturing a CUDA graph it is refused). A state pool is updated in place and never copied, so the
    pool forms (``ssm_state_indices``, ``num_spec_tokens``, ``initial_state_source``,
    ``disable_state_update``) refuse ``state_v_first=False`` by name: pass the pool V-major.

    Token trees (docs/trees.md, EAGLE's top-k > 1), kdagraph's own keyword: with ``parent_indices [B, T]``
    (int32, or int64 converted as the indices are; in q's memory) the T tokens of sequence b form a tree,
    token t updating the state of token ``parent_indices[b, t]`` (-1: the seed) and outputting from its
    own post-state, which goes where a chain's would (row ``ssm_state_indices[b, t]``). Each entry is in
    ``[-1, t)`` (topological order, so ``parent_indices[b, 0] = -1``); a chain, ``parent_indices[b, t] =
    t - 1``, is bitwise the call without. The seed is found as for a chain: row ``ssm_state_indices[b,
    num_accepted_tokens[b] - 1]`` with num_accepted_tokens = the last accepted node + 1 (or the source's
    row). Trees go with spec decode (``ssm_state_indices [B, T]``, or ``num_spec_tokens``) and with the
    frozen verify (the tree's outputs from the one seed, nothing written); a decode, or FLA's plain form
    (which keeps a chain's final state), refuses ``parent_indices`` by name. On CUDA a tree has at most 16
    tokens (more is refused naming ``parent_indices``).

    A negative seed index marks a padded row: zero output, nothing read or written. Index arrays are
    int32, or int64 as torch makes them, converted to an int32 copy (on the host, or on the call's stream)
    except on a stream that is capturing a CUDA graph, where int64 is refused: pass int32 to captured calls.
    Tensors that require grad are read and written as plain memory: kdagraph records no autograd graph,
    and its outputs do not require grad. ``allow_neg_eigval`` (FLA's keyword) makes a logit's beta
    ``2 * sigmoid(beta)``; as in FLA it acts only with ``beta_is_logit`` (FLA's
    ``use_beta_sigmoid_in_kernel``). ``backend`` (FlashInfer's choice among its implementations:
    "auto", "cute-dsl", "cake", "triton", ...) is any string, or None, and is ignored: kdagraph has one
    implementation per device.

    Returns ``(output [B, T, HV, V] in q's dtype and form, initial_state if output_final_state else None)``.
    Cases FlashInfer leaves undefined (indices outside the state, a state row written twice, shapes that
    disagree) raise ``InvalidArgument`` naming the argument, its dtype by name and its shape as passed; so
    does an empty batch (B = 0, or no tokens); so do FlashInfer 0.7 options kdagraph does not implement
    (``seq_order``, ``prefill_workspace``, ``state_checkpoints``, ``checkpoint_cu_starts``,
    ``checkpoint_every_n_tokens``, ``checkpoint_state_indices``, ``correction_cache``, ``kg_cache``), each
    with nothing changed; so does, on host arrays, a real row's ``parent_indices`` entry outside ``[-1,
    t)``. On the device, where the host cannot look, out-of-range rows are skipped and a parent outside
    ``[-1, t)`` read as t - 1 (the chain's), each recorded in ``device_errors("cuda")``.
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
    if backend is not None and not isinstance(backend, str):
        raise _bad("backend", f"= {backend!r}: FlashInfer names its backends by strings (kdagraph ignores them)")
    frozen = bool(disable_state_update)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state),
                    ("initial_state_source", initial_state_source), ("output", output)):
        if x is None and name not in ("q", "k", "v", "g", "beta"):
            continue
        if not hasattr(x, "shape"):
            raise _bad(name, f"is not an array: {type(x).__name__}")
    if len(q.shape) != 4:
        raise _bad("q", f"has shape {_shape(q)}; expected [B, T, H, K] (or [1, total, H, K] with cu_seqlens)")
    if int(q.shape[0]) == 0:
        raise _bad("q", f"has an empty batch: B = 0 (shape {_shape(q)})")

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
    if transpose_state_layout is not None:  # FLA's deprecated spelling
        if state_v_first is not None:
            raise _bad("transpose_state_layout", f"= {transpose_state_layout!r} is given beside state_v_first = "
                                                 f"{state_v_first!r}: it is FLA's deprecated spelling of "
                                                 "state_v_first; pass one of them")
        state_v_first = transpose_state_layout
    state_v_first = state_v_first is None or bool(state_v_first)
    if not state_v_first:
        _check_flas_state_layout(q, v, initial_state, ssm_state_indices=ssm_state_indices is not None,
                                 num_spec_tokens=num_spec_tokens is not None,
                                 initial_state_source=initial_state_source is not None, disable_state_update=frozen)
    call = dict(
        initial_state=initial_state, output_final_state=bool(output_final_state), frozen=frozen,
        state_v_first=state_v_first,
        num_spec_tokens=num_spec_tokens, initial_state_source=initial_state_source, stream=stream,
        ssm_state_indices=_indices(ssm_state_indices, "ssm_state_indices", stream, q),
        num_accepted_tokens=_indices(num_accepted_tokens, "num_accepted_tokens", stream, q),
        initial_state_indices=_indices(initial_state_indices, "initial_state_indices", stream, q),
        parent_indices=_indices(parent_indices, "parent_indices", stream, q),
        kernel=(A_log if use_gate_in_kernel else None, dt_bias if use_gate_in_kernel else None,
                bool(use_qk_l2norm_in_kernel), scale, gate, float(lower_bound) if lower_bound is not None else -5.0,
                bool(beta_is_logit), bool(allow_neg_eigval)))
    if cu_seqlens is None:
        if int(q.shape[1]) == 0:
            raise _bad("q", f"holds no tokens: T = 0 (shape {_shape(q)})")
        return _verify(q, k, v, g, beta, output, **call)

    # The packed form: every array with a token dimension is [1, total, ...] as q.
    total = int(q.shape[1])
    io = dict(q=q, k=k, v=v, g=g, beta=beta, output=output)
    for name, x in io.items():
        if x is not None and (len(x.shape) < 3 or _shape(x)[:2] != [1, total]):
            raise _bad(name, f"has shape {_shape(x)}; with cu_seqlens it is [1, total = {total}, ...] as q "
                             f"{_shape(q)}")
    lengths = _sequence_lengths(cu_seqlens, total, num_spec_tokens, stream, q)
    B = len(lengths)
    if total == 0:
        raise _bad("q", f"holds no tokens: shape {_shape(q)}, cu_seqlens of {B} empty sequences")
    if (lengths == lengths[0]).all():  # one length: the dense form, reshaped
        T = int(lengths[0])
        dense = {name: None if x is None else x.reshape((B, T) + tuple(x.shape[2:])) for name, x in io.items()}
        with _shapes_as_passed(_IO, (B, T), (1, total)):
            out, final = _verify(**dense, **call)
        return (output if output is not None else out.reshape((1, total) + tuple(out.shape[2:]))), final
    return _verify_varlen(io, lengths, **call)


def _check_flas_state_layout(q: Array, v: Array, initial_state: Optional[Array], **pool_forms: bool) -> None:
    """What state_v_first=False (FLA's [N, HV, K, V] state) needs: none of the pool forms, whose state is
    used in place and never copied (`pool_forms`: which the call names), and a state of that shape in an
    array kdagraph can transpose."""
    for name, given in pool_forms.items():
        if given:
            raise _bad("state_v_first", f"is False with {name}: FLA's [N, HV, K, V] layout runs on a transposed copy "
                                        "of the rows FLA's plain form reads, and a state pool is updated in place, "
                                        "never copied; pass the pool V-major, [N, HV, V, K]")
    if initial_state is None or len(v.shape) != 4:
        return
    HV, V, K = int(v.shape[2]), int(v.shape[3]), int(q.shape[3])
    if len(initial_state.shape) != 4 or _shape(initial_state)[1:] != [HV, K, V]:
        raise _bad("initial_state", f"has shape {_shape(initial_state)}; with state_v_first=False it is FLA's "
                                    f"[N, HV, K, V] = [*, {HV}, {K}, {V}]")
    if type(initial_state).__module__.split(".")[0] not in ("numpy", "torch", "cupy"):
        raise _bad("state_v_first", f"is False with initial_state a {type(initial_state).__name__}: kdagraph "
                                    "transposes numpy, torch and cupy arrays only; pass a V-major state")


def _sequence_lengths(cu_seqlens: Array, total: int, num_spec_tokens, stream: Any, q: Array):
    """Each sequence's token count from cu_seqlens [B + 1] (numpy [B]). Host arrays are read; device ones
    are read too (a synchronization on the call's stream) unless FlashInfer's contract gives the
    lengths unread: 1 + num_spec_tokens each, or one token each when total = B (its packed decode)."""
    import numpy as np

    shape = _shape(cu_seqlens) if hasattr(cu_seqlens, "shape") else None
    if shape is None or len(shape) != 1 or shape[0] < 2:
        what = "an empty batch (B = 0)" if shape == [1] else "expected [B + 1], B >= 1"
        raise _bad("cu_seqlens", f"has shape {shape}: {what}")
    B = shape[0] - 1
    if not _is_host(cu_seqlens) and (num_spec_tokens is not None or total == B):
        if total % B:
            raise _bad("cu_seqlens", f"describes {B} sequences of {total} tokens, which FlashInfer's form takes as one "
                                     "length (1 + num_spec_tokens) each")
        return np.full(B, total // B)
    if "int" not in _dtype_name(cu_seqlens):
        raise _bad("cu_seqlens", f"has dtype {_dtype_name(cu_seqlens)}; expected int32 or int64")
    c = np.asarray(_read_on_host(cu_seqlens, "cu_seqlens", stream, q)).astype(np.int64)
    lengths = np.diff(c)
    if c[0] != 0 or c[-1] != total or (lengths < 0).any():
        raise _bad("cu_seqlens", f"= {c.tolist()} is not offsets from 0 to total = {total} tokens, nondecreasing")
    return lengths


def _verify_varlen(io: dict, lengths, *, initial_state, output_final_state, frozen, num_spec_tokens,
                   initial_state_source, stream, ssm_state_indices, num_accepted_tokens, initial_state_indices,
                   parent_indices, kernel, state_v_first):
    """FLA's varlen form: sequence b, of lengths[b] tokens, runs as the dense form would run it alone,
    consecutive sequences of one length in one verify, on views of the caller's arrays. The host checks
    the whole call first (rows across sequences included) and the first verify the arrays' shapes and
    dtypes, so a refused call changes nothing."""
    import numpy as np

    q = io["q"]
    B, longest = len(lengths), int(lengths.max())
    if num_spec_tokens is not None:
        raise _bad("num_spec_tokens", f"= {num_spec_tokens} makes every sequence 1 + num_spec_tokens tokens long, but "
                                      f"cu_seqlens describes lengths {lengths.tolist()}")
    ssm = ssm_state_indices
    per_token = ssm is not None and len(ssm.shape) == 2
    for name, x in (("ssm_state_indices", ssm), ("num_accepted_tokens", num_accepted_tokens),
                    ("initial_state_indices", initial_state_indices), ("parent_indices", parent_indices)):
        if x is not None and _dtype_name(x) != "int32":
            raise _bad(name, f"has dtype {_dtype_name(x)}; expected int32 (or int64)")
    for name, x in (("ssm_state_indices", ssm if per_token else None), ("parent_indices", parent_indices)):
        if x is not None and (len(x.shape) != 2 or int(x.shape[0]) != B or int(x.shape[1]) < longest):
            raise _bad(name, f"has shape {_shape(x)}; expected [B = {B}, at least the longest sequence's "
                             f"{longest} tokens] (sequence b uses its first T_b columns)")
    for name, x in (("ssm_state_indices", None if per_token else ssm), ("num_accepted_tokens", num_accepted_tokens),
                    ("initial_state_indices", initial_state_indices)):
        if x is not None and _shape(x) != [B]:
            raise _bad(name, f"has shape {_shape(x)}; expected [B] = [{B}]")
    if ssm is not None and not per_token and not frozen and longest > 1:
        b = int(np.argmax(lengths > 1))
        raise _bad("ssm_state_indices", f"is [B] but sequence {b} holds {int(lengths[b])} tokens: a verify of more "
                                        "than one token needs [B, T] (spec decode)")
    if num_accepted_tokens is not None and not per_token and initial_state_source is None:
        raise _bad("num_accepted_tokens", "is set without spec decode (ssm_state_indices [B, T])")
    plain = ssm is None and not frozen
    if plain and parent_indices is not None:
        raise _bad("parent_indices", "is set for FLA's plain form (no ssm_state_indices), which keeps a chain's "
                                     "final state: a token tree goes with spec decode or a frozen verify")
    if initial_state is None and not frozen:
        if not plain:
            raise _bad("initial_state", "is None: spec decode writes into the state pool ssm_state_indices names")
        HV, V, K = int(io["v"].shape[2]), int(io["v"].shape[3]), int(q.shape[3])
        initial_state = _new(q, (B, HV, V, K) if state_v_first else (B, HV, K, V), "float32", fill=0)
    if ssm is None and initial_state is not None and int(initial_state.shape[0]) < B:
        raise _bad("initial_state", f"has {int(initial_state.shape[0])} rows but cu_seqlens describes {B} sequences: "
                                    "without ssm_state_indices sequence b runs from row b")
    if _is_host(q):
        _check_varlen_rows(lengths, initial_state, frozen, initial_state_source, ssm if per_token else None,
                           None if per_token else ssm, num_accepted_tokens, initial_state_indices, parent_indices)

    output = io["output"] if io["output"] is not None else \
        _new(q, (1, int(q.shape[1])) + tuple(int(d) for d in io["v"].shape[2:]), "like")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for b0, n in _runs(lengths, [x for x in (ssm if per_token else None, parent_indices) if x is not None]):
        T, first, end = int(lengths[b0]), int(starts[b0]), int(starts[b0 + n])
        rows = lambda x: None if x is None else x[b0:b0 + n]
        tokens = lambda x: None if x is None else x[b0:b0 + n, :T]
        dense = {name: x[:, first:end].reshape((n, T) + tuple(x.shape[2:])) for name, x in io.items() if x is not None}
        dense["output"] = output[:, first:end].reshape((n, T) + tuple(output.shape[2:]))
        with _shapes_as_passed(_IO, (n, T), (1, int(q.shape[1]))):
            _verify(**dense, initial_state=initial_state if ssm is not None else rows(initial_state),
                    output_final_state=output_final_state, frozen=frozen, num_spec_tokens=None,
                    initial_state_source=initial_state_source, stream=stream,
                    ssm_state_indices=tokens(ssm) if per_token else rows(ssm),
                    num_accepted_tokens=rows(num_accepted_tokens), initial_state_indices=rows(initial_state_indices),
                    parent_indices=tokens(parent_indices), kernel=kernel, state_v_first=state_v_first, plain=plain,
                    host_checks=False)
    return output, (initial_state if output_final_state else None)


def _runs(lengths, token_arrays):
    """(first sequence, count) of each verify of a varlen call: consecutive sequences of one length
    (none empty), alone where a [B, W] index array's columns would not be a contiguous view."""
    runs, b = [], 0
    while b < len(lengths):
        n = 1
        T = int(lengths[b])
        joinable = all(int(x.shape[1]) == T for x in token_arrays)
        while joinable and b + n < len(lengths) and int(lengths[b + n]) == T:
            n += 1
        if T > 0:
            runs.append((b, n))
        b += n
    return runs


def _check_varlen_rows(lengths, initial_state, frozen, source, per_token, per_sequence, accepted, source_rows,
                       parent) -> None:
    """_check_host_indices over a whole varlen call, as its verifies resolve their rows, so that a row one
    sequence writes and another reads is refused before any runs."""
    import numpy as np

    B, T = len(lengths), int(lengths.max())
    names = {"states": "initial_state", "seeds": "initial_state", "write_row": "ssm_state_indices",
             "seed_row": "ssm_state_indices", "seed_token": "num_accepted_tokens", "parent": "parent_indices"}
    states_rows = int(initial_state.shape[0]) if initial_state is not None else 0
    write_row = seed_token = seed_row = None
    if per_token is not None:
        write_row = per_token
        seed_token = None if source is not None else (accepted if accepted is not None else np.ones(B, np.int32))
    elif per_sequence is not None:
        write_row = per_sequence.reshape(B, 1) if T == 1 else None
        seed_row = per_sequence
    else:  # row b: nothing two sequences could share
        seed_row = np.arange(B)
        names["seed_row"] = "initial_state (row b)"
    if source is not None:
        seed_row, seed_token = source_rows, None
        names["seeds"], names["seed_row"] = "initial_state_source", "initial_state_indices"
        if frozen:
            write_row = None
    seeds_rows = int((source if source is not None else initial_state).shape[0])
    _check_host_indices(B, T, states_rows, write_row, seed_token, seed_row, seeds_rows, parent, names,
                        writes=not frozen, lengths=lengths)
