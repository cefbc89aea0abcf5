"""Calls the engines make as they make them (docs/python.md, *What engines really pass*), on the CPU backend:
FlashInfer's clamping of num_accepted_tokens (0 and above T read as 1 and T, recorded in the error word,
the same as on CUDA), the README's SGLang-then-FlashInfer example with a zero-initialized accept_lens_pool
(a request just prefilled), and refusals that name the dtype, the caller's shape and an empty batch."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import expect_refused_unchanged
from test_recurrent_kda import Case


@pytest.fixture(autouse=True)
def clear_cpu_error_word():
    """These calls make the CPU backend record clamped lengths: the word is cleared before each test and
    after it, so that no other test reads what these recorded."""
    kdagraph.clear_device_errors("cpu")
    yield
    kdagraph.clear_device_errors("cpu")


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_num_accepted_tokens_outside_1_to_T_is_clamped_and_recorded(rng, framework):
    """FlashInfer: "values above 1 + S are clamped to the final checkpoint slot", and its kernel reads a
    0 as token 0. A real row's 0 and T + 1 give the outputs and states of 1 and T, bitwise, and the
    error word records them; a padded row's length is never read, so its 0 is not recorded."""
    c = Case(rng, padded=1)
    wild = c.accepted.copy()
    wild[0], wild[2] = 0, c.T + 1
    tame = np.clip(wild, 1, c.T).astype(np.int32)
    as_given = (lambda x: torch.from_numpy(x)) if framework == "torch" else (lambda x: x)
    runs = []
    for accepted in (wild, tame):
        pool = c.pool.copy()
        kdagraph.clear_device_errors("cpu")
        out, _ = kdagraph.recurrent_kda(*(as_given(x) for x in (c.q, c.k, c.v, c.g, c.beta)),
                                        initial_state=as_given(pool), ssm_state_indices=as_given(c.indices),
                                        num_accepted_tokens=as_given(accepted))
        runs.append((np.asarray(out), pool, kdagraph.device_errors("cpu")))
    (wild_out, wild_pool, wild_errors), (tame_out, tame_pool, tame_errors) = runs
    assert same_bits(wild_out, tame_out) and same_bits(wild_pool, tame_pool)
    assert not same_bits(tame_pool, c.pool), "the calls wrote their post-states"
    assert wild_errors["code"] == "accept_out_of_range" and wild_errors["count"] == 2
    assert (wild_errors["row"], wild_errors["value"]) in ((0, 0), (2, c.T + 1))
    assert tame_errors["count"] == 0


def test_the_readmes_example_runs_with_a_zero_initialized_accept_lens_pool():
    """README, *Python*: build_fused_accept_indices (SGLang) then recurrent_kda (FlashInfer), torch tensors.
    A pool of zeros (requests just prefilled) gathers accept lengths of 0, which FlashInfer reads as 1:
    the call seeds at token 0, equal to the same call with lengths of 1, and records the clamping."""
    gen = torch.Generator().manual_seed(11)
    P, S, T, H, HV, K, V = 6, 4, 3, 2, 4, 16, 16
    slots = torch.tensor([4, -1, 0], dtype=torch.int32)
    accept_lens_pool = torch.zeros(P, dtype=torch.int32)
    ssm_state_indices, num_accepted_tokens = kdagraph.build_fused_accept_indices(
        slots=slots, scratch_steps=S, draft_token_num=T, accept_lens_pool=accept_lens_pool)
    assert num_accepted_tokens.tolist() == [0, 0, 0]
    B = len(slots)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v, g, beta = torch.randn(B, T, HV, V, generator=gen), torch.randn(B, T, HV, K, generator=gen), torch.randn(B, T, HV)
    A_log, dt_bias = torch.rand(HV, generator=gen) - 0.5, torch.rand(HV * K, generator=gen) - 0.5
    start = torch.randn(P * S, HV, V, K, generator=gen)
    outs = []
    for accepted in (num_accepted_tokens, torch.ones(B, dtype=torch.int32)):
        pool = start.clone()
        kdagraph.clear_device_errors("cpu")
        o, _ = kdagraph.recurrent_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, initial_state=pool,
                                      use_gate_in_kernel=True, ssm_state_indices=ssm_state_indices,
                                      num_accepted_tokens=accepted, beta_is_logit=True)
        outs.append((o, pool, kdagraph.device_errors("cpu")))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert outs[0][2]["code"] == "accept_out_of_range" and outs[0][2]["count"] == 2, "the two real rows"
    assert outs[1][2]["count"] == 0
    assert (outs[0][0][1] == 0).all(), "the padded row outputs zeros"


def spoiled(c, **change):
    args = dict(q=c.q, k=c.k, v=c.v, g=c.g, beta=c.beta, initial_state=c.pool, ssm_state_indices=c.indices,
                num_accepted_tokens=c.accepted, output=c.output)
    args.update(change)
    return args


DTYPES = [  # (argument, the array as spoiled, the dtype's name)
    ("q", lambda c: torch.from_numpy(c.q).to(torch.float64), "float64"),
    ("k", lambda c: torch.from_numpy(c.k).to(torch.float16), "float16"),  # q's is float32
    ("k", lambda c: c.k.astype(np.float64), "float64"),
    ("v", lambda c: c.v.astype(np.int8), "int8"),
    ("initial_state", lambda c: c.pool.astype(np.float64), "float64"),
    ("initial_state", lambda c: torch.from_numpy(c.pool).to(torch.complex64), "complex64"),
    ("output", lambda c: np.zeros(c.output.shape, np.uint8), "uint8"),
    ("ssm_state_indices", lambda c: c.indices.astype(np.int16), "int16"),
    ("num_accepted_tokens", lambda c: torch.from_numpy(c.accepted).to(torch.bool), "bool"),
    ("num_accepted_tokens", lambda c: c.accepted.astype(np.uint32), "uint32"),
]


@pytest.mark.parametrize("argument,bad,name", DTYPES, ids=[f"{a}-{n}" for a, _, n in DTYPES])
def test_a_refused_dtype_is_named_by_name(rng, argument, bad, name):
    c = Case(rng)
    args = spoiled(c, **{argument: bad(c)})  # DLPack arrays of any framework may be mixed
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.recurrent_kda(**args)
    assert e.value.argument == argument
    assert f"dtype {name}" in str(e.value) and "code" not in str(e.value) and "torch." not in str(e.value), str(e.value)


def test_the_other_drop_ins_name_dtypes_too(rng):
    x = torch.zeros(2, 3, 8, dtype=torch.float64)
    with pytest.raises(kdagraph.InvalidArgument, match="x has dtype float64") as e:
        kdagraph.short_conv(x, torch.zeros(4, 5, 8, dtype=torch.float64), torch.zeros(8, 4),
                            state_indices=torch.arange(2, dtype=torch.int32), num_accepted_tokens=torch.ones(2, dtype=torch.int32))
    assert e.value.argument == "x"
    with pytest.raises(kdagraph.InvalidArgument, match="slots has dtype int16") as e:
        kdagraph.build_fused_accept_indices(slots=torch.arange(2, dtype=torch.int16), scratch_steps=4, draft_token_num=2,
                                            accept_lens_pool=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(kdagraph.InvalidArgument, match="has dtype bfloat16; expected float32") as e:
        kdagraph.short_conv(torch.zeros(2, 3, 8), torch.zeros(4, 5, 8), torch.zeros(8, 4).to(torch.bfloat16),
                            state_indices=torch.arange(2, dtype=torch.int32), num_accepted_tokens=torch.ones(2, dtype=torch.int32))
    assert e.value.argument == "weight"


def test_an_empty_batch_is_named_as_such(rng):
    c = Case(rng)
    empty = lambda x: x[:0]
    for kw in (dict(ssm_state_indices=c.indices[:0], num_accepted_tokens=c.accepted[:0]), dict(num_spec_tokens=c.T - 1),
               dict()):
        with pytest.raises(kdagraph.InvalidArgument, match=r"q has an empty batch: B = 0") as e:
            kdagraph.recurrent_kda(*(empty(x) for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=c.pool, **kw)
        assert e.value.argument == "q"
    packed = lambda x: x.reshape((1, -1) + x.shape[2:])[:, :0]
    expect_refused_unchanged(
        lambda: kdagraph.recurrent_kda(*(packed(x) for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=c.pool,
                                       cu_seqlens=np.zeros(1, np.int32)), "cu_seqlens", pool=c.pool)
    with pytest.raises(kdagraph.InvalidArgument, match="empty batch") as e:
        kdagraph.recurrent_kda(*(packed(x) for x in (c.q, c.k, c.v, c.g, c.beta)), cu_seqlens=np.zeros(1, np.int32))
    expect_refused_unchanged(
        lambda: kdagraph.recurrent_kda(*(x[:, :0] for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=c.pool),
        "q", pool=c.pool)


def test_the_packed_forms_refusals_show_the_callers_shapes(rng):
    """cu_seqlens' [1, total, ...] arrays are seen as [B, T, ...] views inside; a refusal names the shape
    the caller passed. A strided beta is either read through its strides (bitwise the contiguous call) or
    refused naming its shape as passed."""
    c = Case(rng)
    B, T = c.B, c.T
    pack = lambda x: x.reshape((1, B * T) + x.shape[2:])
    cu = np.arange(0, B * T + 1, T, dtype=np.int32)
    kw = dict(initial_state=c.pool, cu_seqlens=cu, ssm_state_indices=c.indices, num_accepted_tokens=c.accepted)
    wide_beta = np.zeros((1, B * T, c.HV + 1), np.float32)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.recurrent_kda(*(pack(x) for x in (c.q, c.k, c.v, c.g)), wide_beta, **kw)
    assert e.value.argument == "beta"
    assert f"[1, {B * T}, {c.HV + 1}]" in str(e.value) and f"[{B}, {T}, " not in str(e.value), str(e.value)

    strided = np.repeat(pack(c.beta), 2, axis=2)[:, :, ::2]
    assert not strided.flags.c_contiguous and np.array_equal(strided, pack(c.beta))
    pool = c.pool.copy()
    try:
        got, _ = kdagraph.recurrent_kda(*(pack(x) for x in (c.q, c.k, c.v, c.g)), strided, **dict(kw, initial_state=pool))
    except kdagraph.InvalidArgument as refused:
        assert refused.argument == "beta"
        assert f"[1, {B * T}, {c.HV}]" in str(refused) and f"[{B}, {T}, " not in str(refused), str(refused)
        assert same_bits(pool, c.pool)
    else:
        want, _ = kdagraph.recurrent_kda(*(pack(x) for x in (c.q, c.k, c.v, c.g, c.beta)), **dict(kw, initial_state=c.pool.copy()))
        assert same_bits(got, want)
