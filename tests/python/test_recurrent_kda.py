"""recurrent_kda (FlashInfer's signature, docs/python.md) on numpy arrays and the CPU backend, against an
independent fp64 implementation of docs/math.md: the seed row at num_accepted_tokens - 1, every post-state
written where ssm_state_indices says, padded rows zero and untouched, initial_state_source, the gate and
beta in the kernel, the packed cu_seqlens form, and zero copy."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import kdagraph
from helpers import as_f64, reference_verify, rel_error

BF16 = ml_dtypes.bfloat16
TOL = {np.float32: 1e-5, BF16: 1e-2}


class Case:
    """B rows of T tokens; a state pool of N rows with fresh random values; row `padded` (if any) padded."""

    def __init__(self, rng, *, B=3, T=4, H=2, HV=4, K=16, V=8, N=None, io=np.float32, state=np.float32,
                 gate="precomputed", beta_is_logit=False, l2norm=True, scale=None, padded=1):
        self.B, self.T, self.H, self.HV, self.K, self.V = B, T, H, HV, K, V
        self.N = N if N is not None else B * T + 3
        self.io, self.state_dtype = io, state
        self.gate, self.beta_is_logit, self.l2norm, self.scale = gate, beta_is_logit, l2norm, scale
        u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape)
        self.q = u(-1, 1, B, T, H, K).astype(io)
        self.k = u(-1, 1, B, T, H, K).astype(io)
        self.v = u(-1, 1, B, T, HV, V).astype(io)
        self.g = (u(-3, 3, B, T, HV, K) if gate != "precomputed" else u(-0.6, -0.01, B, T, HV, K)).astype(io)
        self.beta = (u(-3, 3, B, T, HV) if beta_is_logit else u(0.05, 0.95, B, T, HV)).astype(io)
        self.A_log = u(-1.0, 0.5, HV).astype(np.float32)
        self.dt_bias = u(-0.5, 0.5, HV * K).astype(np.float32)
        self.pool = u(-1, 1, self.N, HV, V, K).astype(state)
        rows = rng.permutation(self.N)[: B * T].astype(np.int32).reshape(B, T)
        self.padded = padded
        if padded is not None:
            rows[padded] = -1
        self.indices = rows
        self.accepted = rng.integers(1, T + 1, B).astype(np.int32)
        if padded is not None:
            self.accepted[padded] = 0  # a padded row's length is never read
        self.output = np.full((B, T, HV, V), np.nan, dtype=io)

    def kwargs(self):
        kw = dict(use_qk_l2norm_in_kernel=self.l2norm, scale=self.scale, beta_is_logit=self.beta_is_logit)
        if self.gate != "precomputed":
            kw.update(use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias,
                      lower_bound=-4.0 if self.gate == "lower-bound" else None)
        return kw

    def reference(self, b, seed_state, parent=None):
        """Row b's (outputs [T, HV, V], post-states [T, HV, V, K]) in fp64: a chain from seed_state, or with
        `parent` [T] a token tree (docs/trees.md), each token a one-token verify from its parent's post-state
        (-1: from seed_state)."""
        def run(state, tokens):
            return reference_verify(as_f64(state), *(as_f64(x[b, tokens]) for x in (self.q, self.k, self.v, self.g, self.beta)),
                                    l2norm=self.l2norm, scale=self.scale, gate=self.gate, A_log=self.A_log,
                                    dt_bias=self.dt_bias, lower_bound=-4.0, beta_is_logit=self.beta_is_logit)

        if parent is None:
            return run(seed_state, slice(None))
        outs, posts = [], []
        for t, p in enumerate(parent):
            o, s = run(seed_state if p < 0 else posts[p], slice(t, t + 1))
            outs.append(o[0])
            posts.append(s[0])
        return np.stack(outs), np.stack(posts)


def check_round(case, out, pool_before, seeds, write_rows, tol, parent=None):
    """Every output and post-state against fp64 (of the token trees `parent` [B, T] when given); padded
    rows zero; rows nobody names unchanged."""
    assert not np.isnan(as_f64(out)).any(), "an output element was not written"
    written = set()
    for b in range(case.B):
        if seeds[b] is None:
            assert (as_f64(out[b]) == 0).all(), f"padded row {b} must output zeros"
            continue
        want_o, want_posts = case.reference(b, seeds[b], None if parent is None else parent[b])
        assert rel_error(out[b], want_o) <= tol, f"outputs of row {b}"
        for t in range(case.T):
            r = write_rows[b][t]
            if r < 0:
                continue
            written.add(r)
            assert rel_error(case.pool[r], want_posts[t]) <= tol, f"post-state of row {b}, token {t} (state row {r})"
    for r in range(case.N):
        if r not in written:
            assert np.array_equal(case.pool[r].view(np.uint8), pool_before[r].view(np.uint8)), f"state row {r} changed"


SWEEP = list(itertools.product([np.float32, BF16], [np.float32, BF16],
                               [("precomputed", False, True, None), ("softplus", True, True, None),
                                ("lower-bound", True, False, 0.3), ("precomputed", False, False, 0.25)]))


@pytest.mark.parametrize("io,state,opts", SWEEP, ids=lambda p: getattr(p, "__name__", str(p)))
def test_spec_decode_seeds_at_accept_minus_one_and_writes_every_post_state(rng, io, state, opts):
    gate, logit, l2norm, scale = opts
    c = Case(rng, io=io, state=state, gate=gate, beta_is_logit=logit, l2norm=l2norm, scale=scale)
    before = c.pool.copy()
    seeds = [None if b == c.padded else before[c.indices[b, c.accepted[b] - 1]] for b in range(c.B)]
    out, final = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, output_final_state=True,
                                        ssm_state_indices=c.indices, num_spec_tokens=c.T - 1,
                                        num_accepted_tokens=c.accepted, output=c.output, **c.kwargs())
    assert out is c.output and final is c.pool, "the caller's arrays come back, written in place"
    check_round(c, out, before, seeds, c.indices, max(TOL[io], TOL[state]))


def test_packed_cu_seqlens_form_equals_the_dense_form_bitwise(rng):
    c = Case(rng, gate="softplus", beta_is_logit=True)
    dense_pool = c.pool.copy()
    dense, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=dense_pool,
                                      ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, **c.kwargs())
    B, T = c.B, c.T
    pack = lambda x: x.reshape((1, B * T) + x.shape[2:])
    cu = np.arange(0, B * T + 1, T, dtype=np.int32)
    out = np.full((1, B * T, c.HV, c.V), np.nan, np.float32)
    got, _ = kdagraph.recurrent_kda(pack(c.q), pack(c.k), pack(c.v), pack(c.g), pack(c.beta), initial_state=c.pool,
                                    cu_seqlens=cu, ssm_state_indices=c.indices, num_spec_tokens=T - 1,
                                    num_accepted_tokens=c.accepted, output=out, **c.kwargs())
    assert got.shape == (1, B * T, c.HV, c.V)
    assert np.array_equal(got.reshape(dense.shape), dense)
    assert np.array_equal(c.pool, dense_pool)


def test_initial_state_source_seeds_from_a_separate_read_only_pool(rng):
    c = Case(rng)
    source = rng.uniform(-1, 1, (5, c.HV, c.V, c.K)).astype(np.float32)
    source_before = source.copy()
    seed_rows = rng.permutation(5)[: c.B].astype(np.int32)
    seed_rows[c.padded] = -1
    before = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=c.indices,
                                    initial_state_source=source, initial_state_indices=seed_rows, output=c.output)
    seeds = [None if b == c.padded else source_before[seed_rows[b]] for b in range(c.B)]
    check_round(c, out, before, seeds, c.indices, 1e-5)
    assert np.array_equal(source, source_before), "initial_state_source is read only"


def test_a_row_whose_write_rows_are_partly_negative_writes_only_the_others(rng):
    c = Case(rng, padded=None)
    c.indices[0, 1] = -1
    c.accepted[0] = 1
    before = c.pool.copy()
    seeds = [before[c.indices[b, c.accepted[b] - 1]] for b in range(c.B)]
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=c.indices,
                                    num_accepted_tokens=c.accepted, output=c.output)
    check_round(c, out, before, seeds, c.indices, 1e-5)


def test_num_accepted_tokens_none_seeds_at_token_zero(rng):
    c = Case(rng)
    before = c.pool.copy()
    seeds = [None if b == c.padded else before[c.indices[b, 0]] for b in range(c.B)]
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=c.indices,
                                    num_spec_tokens=c.T - 1, output=c.output)
    check_round(c, out, before, seeds, c.indices, 1e-5)


def test_decode_with_one_index_per_row_updates_that_row(rng):
    c = Case(rng, T=1)
    rows = c.indices[:, 0].copy()
    before = c.pool.copy()
    seeds = [None if rows[b] < 0 else before[rows[b]] for b in range(c.B)]
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=rows,
                                    output=c.output)
    check_round(c, out, before, seeds, rows.reshape(c.B, 1), 1e-5)


def test_decode_without_indices_updates_row_b(rng):
    c = Case(rng, T=1, N=3, padded=None)
    before = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, output=c.output)
    check_round(c, out, before, [before[b] for b in range(c.B)], [[b] for b in range(c.B)], 1e-5)


def test_dense_spec_decode_without_indices_uses_rows_b_times_t_plus_t(rng):
    c = Case(rng, padded=None, N=12)  # B * T = 12 rows
    before = c.pool.copy()
    rows = np.arange(c.B * c.T).reshape(c.B, c.T)
    seeds = [before[rows[b, c.accepted[b] - 1]] for b in range(c.B)]
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, num_spec_tokens=c.T - 1,
                                    num_accepted_tokens=c.accepted, output=c.output)
    check_round(c, out, before, seeds, rows, 1e-5)


def test_no_initial_state_starts_from_zeros_and_returns_the_final_state(rng):
    c = Case(rng, T=1, padded=None)
    out, final = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, output_final_state=True)
    zero = np.zeros((c.HV, c.V, c.K))
    for b in range(c.B):
        want_o, want_posts = c.reference(b, zero)
        assert rel_error(out[b], want_o) <= 1e-5
        assert rel_error(final[b], want_posts[0]) <= 1e-5
    assert final.shape == (c.B, c.HV, c.V, c.K) and final.dtype == np.float32


def test_the_state_is_updated_in_place_and_nothing_is_copied(rng):
    c = Case(rng)
    pool_address = c.pool.__array_interface__["data"][0]
    before = c.pool.copy()
    out, final = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, output_final_state=True,
                                        ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, output=c.output)
    assert final is c.pool and c.pool.__array_interface__["data"][0] == pool_address
    live = c.indices[c.indices >= 0]
    assert not np.array_equal(c.pool[live], before[live]), "the caller's state array changed in place"
    # A view into a bigger array is written through too: the library sees the caller's memory itself.
    big = np.concatenate([before, before]).copy()
    view = big[: c.N]
    kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=view, ssm_state_indices=c.indices,
                           num_accepted_tokens=c.accepted)
    assert np.array_equal(big[: c.N], c.pool) and np.array_equal(big[c.N:], before)
    # What would need a copy is refused rather than copied, naming the stride that is wrong.
    strided = np.concatenate([before, before], axis=3)[..., : c.K]
    with pytest.raises(kdagraph.InvalidArgument, match="stride 32 in dimension 2 where compact is 16") as e:
        kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=strided, ssm_state_indices=c.indices,
                               num_accepted_tokens=c.accepted)
    assert e.value.argument == "initial_state"
