"""torch CPU tensors (CUDA in test_gpu.py) through every drop-in and the owning classes (the ops:
test_ops.py): the numpy results bitwise, results that stay torch, states updated in place (data_ptr
unchanged), bfloat16, stream= on the CPU, tensors that require grad, and a Verifier and GraphRunner
driven with torch tensors for 50 rounds bitwise equal to the same rounds on numpy. torch is a test
dependency: these tests never skip for want of it."""

import types

import ml_dtypes
import numpy as np
import pytest
import torch

import kdagraph
from test_recurrent_kda import Case
from test_short_conv import ConvCase

BF16 = ml_dtypes.bfloat16


def t(x):
    """A torch tensor with x's values in x's dtype, in its own memory (numpy bfloat16 as torch.bfloat16)."""
    x = np.ascontiguousarray(x)
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def as_numpy(x):
    """A torch tensor's bits as numpy, bfloat16 as ml_dtypes.bfloat16."""
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(BF16)
    return x.numpy()


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("io,state", [(np.float32, np.float32), (BF16, np.float32), (BF16, BF16)],
                         ids=["f32", "bf16-io", "bf16-all"])
def test_recurrent_kda_on_torch_gives_the_numpy_results_in_place(rng, io, state):
    c = Case(rng, io=io, state=state, gate="softplus", beta_is_logit=True)
    want_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=want_pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted, **c.kwargs())
    pool = t(c.pool)
    address = pool.data_ptr()
    kw = {name: (t(v) if isinstance(v, np.ndarray) else v) for name, v in c.kwargs().items()}
    out, final = kdagraph.recurrent_kda(t(c.q), t(c.k), t(c.v), t(c.g), t(c.beta), initial_state=pool,
                                        output_final_state=True, ssm_state_indices=t(c.indices),
                                        num_accepted_tokens=t(c.accepted), **kw)
    assert isinstance(out, torch.Tensor) and out.dtype == t(c.q).dtype and out.shape == want.shape
    assert final is pool and pool.data_ptr() == address, "the state is updated in place, not copied"
    assert same_bits(as_numpy(out), want) and same_bits(as_numpy(pool), want_pool)
    given = torch.full(out.shape, float("nan"), dtype=out.dtype)
    got, _ = kdagraph.recurrent_kda(t(c.q), t(c.k), t(c.v), t(c.g), t(c.beta), initial_state=t(c.pool), output=given,
                                    ssm_state_indices=t(c.indices), num_accepted_tokens=t(c.accepted), **kw)
    assert got is given and same_bits(as_numpy(given), want), "output= is written and returned"


def test_build_fused_accept_indices_returns_torch_int32():
    slots = torch.tensor([2, -1, 0], dtype=torch.int32)
    rows, acc = kdagraph.build_fused_accept_indices(slots=slots, scratch_steps=4, draft_token_num=3,
                                                    accept_lens_pool=torch.tensor([3, 1, 2], dtype=torch.int32))
    assert isinstance(rows, torch.Tensor) and rows.dtype == torch.int32 and acc.dtype == torch.int32
    assert rows.tolist() == [[8, 9, 10], [-1, -1, -1], [0, 1, 2]] and acc.tolist() == [2, 3, 3]


@pytest.mark.parametrize("io", ["float32", "bfloat16"])
def test_short_conv_on_torch_gives_the_numpy_results_in_place(rng, io):
    c = ConvCase(rng, W=4, C=37, S=5, T=3, io=io)
    state = t(c.state)
    address = state.data_ptr()
    y = kdagraph.short_conv(t(c.x), state, t(c.weight), t(c.bias), state_indices=t(c.indices),
                            num_accepted_tokens=t(c.accepted))
    want = c.run()
    assert isinstance(y, torch.Tensor) and y.dtype == t(c.x).dtype
    assert same_bits(as_numpy(y), want) and same_bits(as_numpy(state), c.state)
    assert state.data_ptr() == address


def test_stream_is_taken_and_ignored_on_the_cpu(rng):
    """On the CPU backend there is no stream: an integer handle or a stream object changes nothing."""
    c = Case(rng)
    results = []
    for stream in (None, 0, 12345, types.SimpleNamespace(cuda_stream=7)):
        pool = t(c.pool)
        out, _ = kdagraph.recurrent_kda(t(c.q), t(c.k), t(c.v), t(c.g), t(c.beta), initial_state=pool,
                                        ssm_state_indices=t(c.indices), num_accepted_tokens=t(c.accepted), stream=stream)
        results.append((out.numpy(), pool.numpy()))
    for out, pool in results[1:]:
        assert same_bits(out, results[0][0]) and same_bits(pool, results[0][1])
    cc = ConvCase(rng, W=3, C=16, S=4, T=2)
    state = t(cc.state)
    want = cc.run()
    y = kdagraph.short_conv(t(cc.x), state, t(cc.weight), t(cc.bias), state_indices=t(cc.indices),
                            num_accepted_tokens=t(cc.accepted), stream=99)
    assert same_bits(y.numpy(), want)


def test_tensors_that_require_grad_are_plain_memory_no_autograd(rng):
    """Parameters (A_log, dt_bias, the conv weight) are nn.Parameters in a model, and activations may
    require grad: kdagraph reads and writes them as memory, records no autograd graph, and its outputs do
    not require grad."""
    c = Case(rng, gate="softplus", beta_is_logit=True)
    want_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=want_pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted, **c.kwargs())
    grad = lambda x: t(x).requires_grad_(True)
    pool = grad(c.pool)
    kw = dict(c.kwargs(), A_log=torch.nn.Parameter(t(c.A_log)), dt_bias=torch.nn.Parameter(t(c.dt_bias)))
    out, _ = kdagraph.recurrent_kda(grad(c.q), grad(c.k), grad(c.v), grad(c.g), grad(c.beta), initial_state=pool,
                                    ssm_state_indices=t(c.indices), num_accepted_tokens=t(c.accepted), **kw)
    assert not out.requires_grad and out.grad_fn is None
    assert same_bits(out.numpy(), want) and same_bits(pool.detach().numpy(), want_pool)

    cc = ConvCase(rng, W=4, C=24, S=4, T=3)
    state = grad(cc.state)
    want_y = cc.run()
    y = kdagraph.short_conv(grad(cc.x), state, torch.nn.Parameter(t(cc.weight)), torch.nn.Parameter(t(cc.bias)),
                            state_indices=t(cc.indices), num_accepted_tokens=t(cc.accepted))
    assert not y.requires_grad and same_bits(y.numpy(), want_y) and same_bits(state.detach().numpy(), cc.state)


# ---- the owning classes, 50 rounds on torch against the same rounds on numpy ---------------------

SHAPE = dict(layers=2, heads=1, value_heads=2, head_k=16, head_v=16)
T, S, P, BATCH, ROUNDS, W = 3, 4, 6, 3, 50, 4
OPTIONS = dict(l2norm_qk=True, gate="softplus", beta_is_logit=True, conv_width=W)


def runner_inputs(rng, zeros):
    L, H, HV, K, V = (SHAPE[x] for x in ("layers", "heads", "value_heads", "head_k", "head_v"))
    C = 2 * H * K + HV * V
    layers = []
    for _ in range(L):
        layers.append(dict(q=zeros(BATCH, T, H, K), k=zeros(BATCH, T, H, K), v=zeros(BATCH, T, HV, V),
                           g=zeros(BATCH, T, HV, K), beta=zeros(BATCH, T, HV), o=zeros(BATCH, T, HV, V),
                           x=zeros(BATCH, T, C), weight=rng.uniform(-0.6, 0.6, (C, W)).astype(np.float32),
                           A_log=rng.uniform(-1, 0.5, HV).astype(np.float32),
                           dt_bias=rng.uniform(-0.5, 0.5, HV * K).astype(np.float32)))
    return layers


@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_verifier_and_runner_on_torch_equal_numpy_bitwise_over_50_rounds(rng, mode):
    L, HV, K, V = (SHAPE[x] for x in ("layers", "value_heads", "head_k", "head_v"))
    numpy_inputs = runner_inputs(rng, lambda *shape: np.zeros(shape, np.float32))
    # torch's own tensors (not views of the numpy arrays), filled with the same values every round
    torch_inputs = [{name: torch.from_numpy(a.copy()) if name in ("weight", "A_log", "dt_bias")
                     else torch.zeros(a.shape, dtype=torch.float32) for name, a in layer.items()}
                    for layer in numpy_inputs]
    runs = []
    for inputs in (numpy_inputs, torch_inputs):
        verifier = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=S, max_rows=BATCH, tokens=T, mode=mode, **OPTIONS)
        runner = kdagraph.GraphRunner(verifier, inputs)
        runs.append((verifier, runner, inputs))
    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    windows = rng.uniform(-1, 1, (P, L, W - 1, runs[0][0].conv_channels)).astype(np.float32)
    for (verifier, runner, inputs), wrap in zip(runs, (lambda a: a, torch.from_numpy)):
        for slot in range(P):
            verifier.prefill(slot, wrap(states[slot].copy()), conv_window=wrap(windows[slot].copy()))
        runner.capture()
    batch = list(range(BATCH))
    for r in range(ROUNDS):
        if r % 10 == 0:  # a new batch now and then: slots leave and come back
            batch = rng.permutation(P)[:BATCH].tolist()
            for _, runner, _ in runs:
                runner.set_batch(batch)
        fresh = {name: rng.uniform(-1, 1, a.shape).astype(np.float32) for name, a in numpy_inputs[0].items()
                 if name in ("x", "g", "beta")}
        fresh["g"] = -np.abs(fresh["g"])
        for _, runner, inputs in runs:
            for layer in inputs:
                for name, x in fresh.items():
                    layer[name][...] = torch.from_numpy(x) if isinstance(layer[name], torch.Tensor) else x
                layer["o"][...] = float("nan")
            runner.run_round()
        for layer in range(L):
            got = torch_inputs[layer]["o"].numpy()
            assert not np.isnan(got).any(), f"round {r}: an output was not written"
            assert same_bits(got, numpy_inputs[layer]["o"]), f"round {r} layer {layer}: torch and numpy differ"
        accepted = rng.integers(1, T + 1, BATCH).astype(np.int32)
        runs[0][1].accept(accepted)
        runs[1][1].accept(torch.from_numpy(accepted.copy()))
    outs = []
    for verifier, _, _ in runs:
        verifier.materialize(list(range(P)))
        pool = np.empty((P, L, HV, V, K), np.float32)
        window = np.empty((P,) + verifier.conv_window_shape, np.float32)
        for slot in range(P):
            verifier.read_pool(slot, pool[slot])
            verifier.read_conv_window(slot, window[slot])
        outs.append((pool, window))
    assert same_bits(outs[0][0], outs[1][0]) and same_bits(outs[0][1], outs[1][1]), "materialized states differ"
    assert not same_bits(outs[0][0], states), "the rounds moved the states"
