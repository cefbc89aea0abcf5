"""recurrent_kda's FlashInfer 0.7 call forms (docs/python.md): initial_state_source wins the seed with or
without num_accepted_tokens; disable_state_update (the frozen verify) seeds as the updating call does,
writes no state row and returns the same outputs; every FlashInfer 0.7 option kdagraph does not
implement is refused by name with nothing changed, and any `backend` is taken and ignored; the signature
takes FlashInfer's positional order."""

import inspect

import numpy as np
import pytest

import kdagraph
from helpers import expect_refused_unchanged
from test_recurrent_kda import Case, check_round

# FlashInfer 0.7.4's flashinfer.recurrent_kda, in its order: positional, then keyword-only.
FLASHINFER_POSITIONAL = [
    "q", "k", "v", "g", "beta", "A_log", "dt_bias", "scale", "initial_state", "output_final_state",
    "use_qk_l2norm_in_kernel", "use_gate_in_kernel", "lower_bound", "cu_seqlens", "ssm_state_indices",
    "num_spec_tokens", "num_accepted_tokens", "output", "initial_state_source", "initial_state_indices",
    "beta_is_logit", "seq_order", "prefill_workspace", "state_checkpoints", "checkpoint_cu_starts",
    "checkpoint_every_n_tokens", "checkpoint_state_indices"]
FLASHINFER_KEYWORD_ONLY = ["disable_state_update", "correction_cache", "kg_cache", "backend"]


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_the_signature_is_flashinfer_0_7s():
    params = inspect.signature(kdagraph.recurrent_kda).parameters
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    keyword_only = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY]
    assert positional == FLASHINFER_POSITIONAL
    assert keyword_only[:len(FLASHINFER_KEYWORD_ONLY)] == FLASHINFER_KEYWORD_ONLY and keyword_only[-1] == "stream"
    assert params["backend"].default == "auto" and params["checkpoint_every_n_tokens"].default == 0


def source_case(rng, **kw):
    c = Case(rng, **kw)
    source = rng.uniform(-1, 1, (5, c.HV, c.V, c.K)).astype(np.float32)
    seed_rows = rng.permutation(5)[: c.B].astype(np.int32)
    seed_rows[c.padded] = -1
    return c, source, seed_rows


def test_the_source_wins_the_seed_with_or_without_num_accepted_tokens(rng):
    """FlashInfer 0.7 loads token 0's state from initial_state_source[initial_state_indices[b]] whenever a
    source is given; num_accepted_tokens then picks nothing. The same call without it, bitwise."""
    c, source, seed_rows = source_case(rng)
    runs = []
    for accepted in (None, c.accepted, np.full(c.B, c.T, np.int32)):
        pool = c.pool.copy()
        out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=c.indices,
                                        num_accepted_tokens=accepted, initial_state_source=source,
                                        initial_state_indices=seed_rows)
        runs.append((out, pool))
    for out, pool in runs[1:]:
        assert same_bits(out, runs[0][0]) and same_bits(pool, runs[0][1])
    before = c.pool.copy()
    c.pool[...] = runs[1][1]
    seeds = [None if b == c.padded else source[seed_rows[b]] for b in range(c.B)]
    check_round(c, runs[1][0], before, seeds, c.indices, 1e-5)  # and it is the source's seed, against fp64


def frozen_and_updating(c, **kw):
    """(outputs, pool after) of the call with disable_state_update, then of the same call updating."""
    frozen_pool = c.pool.copy()
    frozen, final = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=frozen_pool,
                                           disable_state_update=True, **kw)
    assert final is None
    updating_pool = c.pool.copy()
    updating, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=updating_pool, **kw)
    return frozen, frozen_pool, updating, updating_pool


@pytest.mark.parametrize("gate", ["precomputed", "softplus"])
def test_a_frozen_verify_seeds_as_usual_and_writes_no_state(rng, gate):
    c = Case(rng, gate=gate, beta_is_logit=gate != "precomputed")
    forms = {
        "spec decode": dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted),
        "spec decode, a = 1": dict(ssm_state_indices=c.indices, num_spec_tokens=c.T - 1),
    }
    _, source, seed_rows = source_case(rng)
    forms["source"] = dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, initial_state_source=source,
                           initial_state_indices=seed_rows)
    for form, kw in forms.items():
        frozen, frozen_pool, updating, updating_pool = frozen_and_updating(c, **kw, **c.kwargs())
        assert same_bits(frozen_pool, c.pool), f"{form}: a frozen verify wrote a state row"
        assert not same_bits(updating_pool, c.pool), f"{form}: the updating call wrote its post-states"
        assert same_bits(frozen, updating), f"{form}: the frozen outputs are the updating call's"
        assert (frozen[c.padded] == 0).all()


def test_flashinfers_frozen_forms_seed_from_one_row_per_sequence(rng):
    """FlashInfer's frozen mode names one seed row per sequence: ssm_state_indices [B] at any T, or none
    (row b), or a source alone (initial_state None). Each equals the updating call that seeds there."""
    c = Case(rng, padded=None)
    seed_rows = c.indices[np.arange(c.B), c.accepted - 1].copy()
    _, _, want, _ = frozen_and_updating(c, ssm_state_indices=c.indices, num_accepted_tokens=c.accepted)
    pool = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=seed_rows,
                                    disable_state_update=True)
    assert same_bits(out, want) and same_bits(pool, c.pool)

    row_b = np.arange(c.B * c.T, dtype=np.int32).reshape(c.B, c.T)
    row_b[:, 0] = np.arange(c.B)  # the updating call's seed (a = 1) is row b, as the frozen call's
    row_b[:, 1:] += c.B
    _, _, want, _ = frozen_and_updating(c, ssm_state_indices=row_b)
    pool = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, disable_state_update=True)
    assert same_bits(out, want) and same_bits(pool, c.pool)

    source = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state_source=source,
                                    initial_state_indices=seed_rows, ssm_state_indices=c.indices,
                                    disable_state_update=True)
    assert same_bits(out, _frozen_want(c, seed_rows)) and same_bits(source, c.pool)


def _frozen_want(c, seed_rows):
    pool = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=seed_rows,
                                    disable_state_update=True)
    return out


def test_a_frozen_verify_refuses_what_it_cannot_do(rng):
    c = Case(rng)
    kw = dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, disable_state_update=True)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool,
                                                            output_final_state=True, **kw),
                             "output_final_state", pool=c.pool)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, **kw), "initial_state")
    expect_refused_unchanged(
        lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, disable_state_update=True,
                                       num_accepted_tokens=c.accepted), "num_accepted_tokens", pool=c.pool)


UNIMPLEMENTED = [
    ("seq_order", lambda c: np.arange(c.B, dtype=np.int32)),
    ("prefill_workspace", lambda c: object()),
    ("state_checkpoints", lambda c: np.zeros((4, c.HV, c.V, c.K), np.float32)),
    ("checkpoint_cu_starts", lambda c: np.zeros(c.B + 1, np.int64)),
    ("checkpoint_every_n_tokens", lambda c: 64),
    ("checkpoint_state_indices", lambda c: np.zeros(c.B, np.int32)),
    ("correction_cache", lambda c: np.zeros((c.N, c.HV, c.T, c.V), np.float32)),
    ("kg_cache", lambda c: np.zeros((c.N, c.HV, c.T, 2 * c.K), np.float32)),
]


@pytest.mark.parametrize("keyword,value", UNIMPLEMENTED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(UNIMPLEMENTED)])
def test_an_unimplemented_flashinfer_option_is_refused_by_name(rng, keyword, value):
    """Never a bare TypeError: InvalidArgument naming the option, before any work, with nothing changed.
    By keyword, and for the positional ones at their FlashInfer position too."""
    c = Case(rng)
    kw = dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, output=c.output)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool,
                                                            **kw, **{keyword: value(c)}),
                             keyword, pool=c.pool, output=c.output)
    if keyword in FLASHINFER_POSITIONAL:
        args = {name: None for name in FLASHINFER_POSITIONAL}
        args.update(q=c.q, k=c.k, v=c.v, g=c.g, beta=c.beta, initial_state=c.pool, output_final_state=False,
                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=False, beta_is_logit=False,
                    checkpoint_every_n_tokens=0, **kw)
        args[keyword] = value(c)
        expect_refused_unchanged(lambda: kdagraph.recurrent_kda(*(args[n] for n in FLASHINFER_POSITIONAL)), keyword,
                                 pool=c.pool, output=c.output)


def test_options_left_at_flashinfers_defaults_are_taken(rng):
    """Passing FlashInfer's defaults explicitly (positionally too) is the plain call, bitwise; and so is
    any `backend`: FlashInfer's choice among its implementations ("cute-dsl" is flashinfer.kda_decode's
    default), which kdagraph, with one per device, takes and ignores."""
    c = Case(rng)
    pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted)
    for backend in ("auto", None, "cute-dsl", "cake", "triton", "flashinfer", ""):
        pool2 = c.pool.copy()
        got, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, None, None, None, pool2, False, True, False, None,
                                        None, c.indices, None, c.accepted, None, None, None, False, None, None, None,
                                        None, 0, None, disable_state_update=False, correction_cache=None,
                                        kg_cache=None, backend=backend)
        assert same_bits(got, want) and same_bits(pool2, pool)


def test_a_backend_that_is_not_a_name_is_refused_by_name(rng):
    c = Case(rng)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool,
                                                            ssm_state_indices=c.indices, backend=1),
                             "backend", pool=c.pool)
