"""One verify of [B, T] tokens through the extension, in the form recurrent_kda's arguments name
(docs/python.md): which state rows it seeds from and writes to, and what only the host can check of them."""

from __future__ import annotations

from . import _kdagraph
from ._arrays import _bad, _dtype_name, _final_rows, _host_view, _identity_rows, _is_host, _new, _ones, _shape, _swapped


def _check_host_indices(B: int, T: int, states_rows: int, write_row, seed_token, seed_row, seeds_rows: int,
                        parent, names: dict, writes: bool, lengths=None) -> None:
    """What only the host can check before the verify, on host arrays: every index in range, every real
    row's token tree (`parent`, or None: chains) in topological order, and when the call `writes` states,
    no state row written twice or read by one row while another writes it. An accept length
    (`seed_token`) outside [1, T] is not refused: it is clamped into [1, T] as FlashInfer documents, here
    as in the kernels (which record it in the error word). `write_row` None: nothing the call writes is
    named (a frozen verify's own rows). `lengths` [B]: row b has only its first lengths[b] tokens (a
    varlen call; the arrays are [B, at least T]); None: every row has T."""
    import numpy as np

    tokens = np.full(B, T) if lengths is None else np.asarray(lengths)
    exists = np.arange(T)[None, :] < tokens[:, None]
    w = None
    if write_row is not None:
        w = np.where(exists, _host_view(write_row).reshape(B, -1)[:, :T], -1)
        over = w >= states_rows
        if over.any():
            b, t = (int(x) for x in np.argwhere(over)[0])
            raise _bad(names["write_row"], f"[{b}, {t}] = {int(w[b, t])} is outside the state's {states_rows} rows")
    if seed_token is not None:
        a = _host_view(seed_token)
        live = w.max(axis=1) >= 0
        seed = np.where(live, w[np.arange(B), np.clip(a, 1, np.maximum(tokens, 1)) - 1], -1)
    else:
        r = _host_view(seed_row)
        over = r >= seeds_rows
        if over.any():
            b = int(over.nonzero()[0][0])
            raise _bad(names["seed_row"], f"[{b}] = {int(r[b])} is outside the {seeds_rows} rows it indexes")
        seed = np.where(tokens > 0, r, -1)
    padded = seed < 0
    if parent is not None:  # docs/trees.md: parent[b, t] in [-1, t); a padded row's is never read
        p = _host_view(parent).reshape(B, -1)[:, :T]
        bad = ~padded[:, None] & exists & ((p < -1) | (p >= np.arange(T)[None, :]))
        if bad.any():
            b, t = (int(x) for x in np.argwhere(bad)[0])
            raise _bad(names["parent"], f"[{b}, {t}] = {int(p[b, t])} is outside [-1, {t}): a token's parent is an "
                                        "earlier token of its sequence, or -1 (the seed)")
    if not writes or w is None:
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



def _verify(q, k, v, g, beta, output, *, initial_state, output_final_state, frozen, num_spec_tokens,
            initial_state_source, stream, ssm_state_indices, num_accepted_tokens, initial_state_indices,
            parent_indices, kernel, state_v_first, plain=False, host_checks=True):
    """One verify of [B, T] tokens in the form its arguments name (recurrent_kda's list), through the
    extension. `plain`: FLA's plain form at any T (a varlen call's); otherwise it is the form at T > 1
    without indices. `host_checks` False: the caller checked the rows (a varlen call, as a whole).
    `state_v_first` False: initial_state is FLA's [N, HV, K, V] (recurrent_kda refused the pool forms and
    checked its shape); the verify runs on a V-major copy of rows [0, B), the rows these forms read, and
    what it writes is copied back transposed."""
    B, T, H, K = (int(d) for d in q.shape)
    HV, V = int(v.shape[2]), int(v.shape[3])
    state = (HV, V, K) if state_v_first else (HV, K, V)
    if num_spec_tokens is not None and int(num_spec_tokens) + 1 != T:
        raise _bad("num_spec_tokens", f"= {num_spec_tokens} but the inputs hold T = {T} tokens per sequence (T = 1 + num_spec_tokens)")
    ssm, accepted, source, source_rows = ssm_state_indices, num_accepted_tokens, initial_state_source, initial_state_indices

    # Which rows the verify seeds from and writes to. A frozen verify seeds as the updating call would
    # and writes nothing; its write rows then only locate a seed_token's row (None: its own, unread).
    names = {"states": "initial_state", "seeds": "initial_state", "write_row": "ssm_state_indices",
             "seed_row": "ssm_state_indices", "seed_token": "num_accepted_tokens", "output": "output",
             "parent": "parent_indices"}
    seed_row = seed_token = None
    checked_write_row = None
    writes = not frozen
    if ssm is not None and len(ssm.shape) == 2:
        if _shape(ssm) != [B, T]:
            raise _bad("ssm_state_indices", f"has shape {_shape(ssm)}; expected [B, T] = [{B}, {T}]")
        if initial_state is None and not frozen:
            raise _bad("initial_state", "is None: spec decode writes into the state pool ssm_state_indices names")
        write_row = checked_write_row = ssm
        if source is None:
            seed_token = accepted if accepted is not None else _ones(q, B)
    elif ssm is not None:
        if len(ssm.shape) != 1 or int(ssm.shape[0]) != B:
            raise _bad("ssm_state_indices", f"has shape {_shape(ssm)}; expected [B, T] or, at T = 1, [B]")
        if T != 1 and not frozen:
            raise _bad("ssm_state_indices", f"is [B] but T = {T}: a verify of T > 1 tokens needs [B, T] (spec decode)")
        if accepted is not None and source is None:
            raise _bad("num_accepted_tokens", "is set without spec decode (ssm_state_indices [B, T])")
        if initial_state is None and not frozen:
            raise _bad("initial_state", "is None: ssm_state_indices names rows of the state pool")
        if T == 1:
            write_row = checked_write_row = ssm.reshape(B, 1)
        else:
            write_row = _identity_rows(q, B, T)
        seed_row = ssm
        names["write_row"] = names["seed_row"] = "ssm_state_indices"
    else:
        if accepted is not None and num_spec_tokens is None and source is None:
            raise _bad("num_accepted_tokens", "is set without spec decode (ssm_state_indices or num_spec_tokens)")
        plain = plain or (T != 1 and num_spec_tokens is None and not frozen)
        if plain:  # FLA: sequence b from row b, its final state back to row b when asked for
            if parent_indices is not None:
                raise _bad("parent_indices", "is set for FLA's plain form (no ssm_state_indices), which keeps a "
                                             "chain's final state: a token tree goes with spec decode or a frozen verify")
            if initial_state is None:
                initial_state = _new(q, (B,) + state, "float32", fill=0)
            elif len(initial_state.shape) == 4 and int(initial_state.shape[0]) < B:
                raise _bad("initial_state", f"has {int(initial_state.shape[0])} rows but B = {B}: without "
                                            "ssm_state_indices sequence b runs from row b")
            write_row = checked_write_row = _final_rows(q, B, T)
            seed_row = _identity_rows(q, B, 1).reshape(B)
            names["write_row"] = names["seed_row"] = "initial_state (row b)"
            writes = bool(output_final_state)
        else:
            write_row = _identity_rows(q, B, T)
            names["write_row"] = "initial_state (rows b * T + t)"
            if initial_state is None and not frozen:
                initial_state = _new(q, (B * T,) + state, "float32", fill=0)
            if frozen:
                if accepted is not None and source is None:
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
                if source is None:
                    seed_token = accepted if accepted is not None else _ones(q, B)
    seeds = None
    if source is not None:
        if _shape(source_rows) != [B]:
            raise _bad("initial_state_indices", f"has shape {_shape(source_rows)}; expected [B] = [{B}]")
        seeds, seed_row, seed_token = source, source_rows, None
        names["seeds"] = "initial_state_source"
        names["seed_row"] = "initial_state_indices"
        if frozen:  # nothing is written: the write rows are not read, and the source may stand in for the pool
            checked_write_row = None
            if initial_state is None:
                initial_state = source
                names["states"] = "initial_state_source"

    decode = not frozen and not plain and T == 1 and num_spec_tokens is None and (ssm is None or len(ssm.shape) == 1)
    if parent_indices is not None and decode:
        raise _bad("parent_indices", "is set for a decode (one token per sequence, updating its own row): a token "
                                     "tree is for spec decode (ssm_state_indices [B, T] or num_spec_tokens) or a "
                                     "frozen verify")
    for name, x, shape in (("ssm_state_indices", ssm, None), ("num_accepted_tokens", accepted, [B]),
                           ("initial_state_indices", source_rows, [B]), ("parent_indices", parent_indices, [B, T])):
        if x is not None:
            if _dtype_name(x) != "int32":
                raise _bad(name, f"has dtype {_dtype_name(x)}; expected int32 (or int64)")
            if shape is not None and _shape(x) != shape:
                raise _bad(name, f"has shape {_shape(x)}; expected {shape}")
    if state_v_first and initial_state is not None and len(initial_state.shape) == 4 and K != V and \
            _shape(initial_state)[1:] == [HV, K, V]:
        raise _bad(names["states"], f"has shape {_shape(initial_state)}: FLA's [N, HV, K, V] layout; kdagraph's state "
                                    f"is V-major, [N, HV, V, K] = [*, {HV}, {V}, {K}] (docs/math.md); pass "
                                    "state_v_first=False to have FLA's plain form run on a transposed copy")
    if host_checks and _is_host(q):
        if initial_state is not None and len(initial_state.shape) != 4:
            raise _bad(names["states"], f"has shape {_shape(initial_state)}; expected [N, HV, V, K]")
        seeds_rows = int((seeds if seeds is not None else initial_state).shape[0])
        _check_host_indices(B, T, int(initial_state.shape[0]), checked_write_row, seed_token, seed_row, seeds_rows,
                            parent_indices, names, writes=writes)

    if output is None:
        output = _new(q, (B, T, HV, V), "like")
    callers = initial_state
    if not state_v_first:
        initial_state = _swapped(callers[:B], stream, q)
    A_log, dt_bias, l2norm, scale, gate, lower_bound, beta_is_logit, neg_eigval = kernel
    _kdagraph._verify_indexed(q, k, v, g, beta, output, initial_state, seeds, seed_row, seed_token, write_row,
                              A_log, dt_bias, l2norm, scale, gate, lower_bound, beta_is_logit, writes,
                              parent_indices, stream, names, neg_eigval)
    if not state_v_first and writes:
        _swapped(initial_state, stream, q, into=callers[:B])
    return output, (callers if output_final_state else None)
