"""A Verifier and a GraphRunner driven from Python for 60 rounds, bitwise equal to the C++ host engine
(docs/cli.md) with the same seed: the same requests in the same slots, the same synthetic inputs, gate
parameters, conv weights and windows, and accept lengths; every round's outputs and, after materialize,
every state and conv window compared bit for bit, in every mode, without and with the short convolution
(docs/conv.md). The runner replays its CPU graph; the engine runs its own."""

import numpy as np
import pytest

import kdagraph
from kdagraph._kdagraph import _reference as ref

SHAPE = dict(layers=2, heads=1, value_heads=2, head_k=16, head_v=16)
T, S, P, BATCH, ROUNDS = 3, 4, 5, 3, 60
OPTIONS = dict(l2norm_qk=True, gate="softplus", beta_is_logit=True)


def round_inputs(seed, layer, N, conv_width, T=T):
    """One layer's arrays for a runner of N rows of T tokens, zeroed (poisoned before each round), with the
    engine's gate parameters and, with a conv, its weights."""
    L, H, HV, K, V = (SHAPE[x] for x in ("layers", "heads", "value_heads", "head_k", "head_v"))
    a_log, dt_bias = ref.synthetic_gate(seed, layer, HV, K)
    d = dict(q=np.zeros((N, T, H, K), np.float32), k=np.zeros((N, T, H, K), np.float32),
             v=np.zeros((N, T, HV, V), np.float32), g=np.zeros((N, T, HV, K), np.float32),
             beta=np.zeros((N, T, HV), np.float32), o=np.zeros((N, T, HV, V), np.float32), A_log=a_log, dt_bias=dt_bias)
    if conv_width:
        C = 2 * H * K + HV * V
        d.update(x=np.zeros((N, T, C), np.float32), weight=ref.synthetic_conv_weight(seed, layer, C, conv_width))
    return d


@pytest.mark.parametrize("conv_width", [0, 4, 2], ids=["no-conv", "conv4", "conv2"])
@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_python_rounds_equal_the_cpp_host_engine_bitwise(rng, mode, conv_width):
    """With a conv (docs/conv.md) the runner's inputs are the pre-conv projections x, convolved inside each layer's
    verify kernel: q, k and v stay as they were (poisoned before every round, so a write shows), and after
    materialize each request's conv window is compared too."""
    seed = int(rng.integers(1, 2**62))
    rate = float(rng.uniform(0.4, 0.9))
    outputs, batches, retired = ref.run_host_engine(backend="cpu", **SHAPE, tokens=T, slots=P, scratch_steps=S,
                                                    batch=BATCH, mode=mode, accept_rate=rate, seed=seed,
                                                    rounds=ROUNDS, conv_width=conv_width, **OPTIONS)
    assert len(outputs) == ROUNDS and all(b == list(range(BATCH)) for b in batches)

    L, H, HV, K, V = (SHAPE[x] for x in ("layers", "heads", "value_heads", "head_k", "head_v"))
    C = 2 * H * K + HV * V
    verifier = kdagraph.Verifier(backend="cpu", **SHAPE, slots=P, scratch_steps=S, max_rows=BATCH, tokens=T,
                                 mode=mode, conv_width=conv_width, **OPTIONS)
    inputs = [round_inputs(seed, layer, BATCH, conv_width) for layer in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs)
    slots = list(range(BATCH))
    for request, slot in enumerate(slots):  # the engine's requests 0, 1, ... join slots 0, 1, ...
        window = ref.synthetic_conv_window(seed, request, L, conv_width, C) if conv_width else None
        verifier.prefill(slot, ref.synthetic_state(seed, request, L, HV, V, K), conv_window=window)
    runner.capture()
    assert runner.captured
    runner.set_batch(slots)
    assert runner.rows == BATCH
    accepted = np.zeros(BATCH, np.int32)
    kept = ("q", "k", "v") if conv_width else ()  # fused, the kernel keeps the conv's outputs
    for r in range(ROUNDS):
        for layer in range(L):
            fresh = ref.synthetic_inputs(seed, r, slots, layer, T, H, HV, K, V, True, True, conv=bool(conv_width))
            for name, x in fresh.items():
                inputs[layer][name][...] = x  # in place: the graph points at these arrays
            for name in ("o",) + kept:
                inputs[layer][name][...] = np.nan
        runner.run_round()
        for layer in range(L):
            assert not np.isnan(inputs[layer]["o"]).any(), f"round {r} layer {layer}: o not fully written"
            for name in kept:
                assert np.isnan(inputs[layer][name]).all(), f"round {r} layer {layer}: {name} was written"
        accepted[:] = [ref.synthetic_accept_length(seed, r, s, T, rate) for s in slots]
        runner.accept(accepted)
        got = np.stack([inputs[layer]["o"] for layer in range(L)])
        assert np.array_equal(got.view(np.uint32), outputs[r].view(np.uint32)), f"round {r}: outputs differ"
    verifier.materialize(slots)
    state = np.empty((L, HV, V, K), np.float32)
    window = np.empty(verifier.conv_window_shape, np.float32)
    assert sorted(s for _, s, _, _ in retired) == slots
    for request, slot, want, want_window in retired:
        verifier.read_pool(slot, state)
        assert np.array_equal(state.view(np.uint32), want.view(np.uint32)), f"slot {slot}: materialized state differs"
        if conv_width:
            verifier.read_conv_window(slot, window)
            assert np.array_equal(window.view(np.uint32), want_window.view(np.uint32)), f"slot {slot}: conv window differs"
            assert np.array_equal(verifier.conv_state[:, slot, :conv_width - 1], window), "conv_state is the same memory"
        else:
            assert want_window is None
    assert verifier.device_errors()["count"] == 0


def test_a_wrong_accept_length_is_seen(rng):
    """The comparison above can fail: one accept length off in one round changes every later output."""
    seed, rate = int(rng.integers(1, 2**62)), 0.5
    outputs, _, _ = ref.run_host_engine(backend="cpu", **SHAPE, tokens=T, slots=P, scratch_steps=S, batch=1,
                                        mode="fused-accept", accept_rate=rate, seed=seed, rounds=3, **OPTIONS)
    L, H, HV, K, V = (SHAPE[x] for x in ("layers", "heads", "value_heads", "head_k", "head_v"))
    verifier = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=S, max_rows=1, tokens=T, **OPTIONS)
    inputs = [round_inputs(seed, layer, 1, 0) for layer in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs, exec="eager")
    verifier.prefill(0, ref.synthetic_state(seed, 0, L, HV, V, K))
    runner.set_batch([0])
    same = []
    for r in range(3):
        for layer in range(L):
            for name, x in ref.synthetic_inputs(seed, r, [0], layer, T, H, HV, K, V, True, True).items():
                inputs[layer][name][...] = x
        runner.run_round()
        a = ref.synthetic_accept_length(seed, r, 0, T, rate)
        runner.accept(np.array([a % T + 1 if r == 0 else a], np.int32))  # round 0 accepts a wrong length
        same.append(np.array_equal(np.stack([i["o"] for i in inputs]), outputs[r]))
    assert same[0] and not same[1] and not same[2]
