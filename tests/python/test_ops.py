"""The ops of a round over arrays the caller owns (SPEC §10): build_indices, verify_layer, accept, commit
and materialize on SGLang's layout (one pool [L, P + 1, HV, V, K], the padding slot never named) and
vLLM's (an array per layer), bitwise equal to a Verifier running the same rounds, in every mode."""

import numpy as np
import pytest

import kdagraph

L, H, HV, K, V, T, S, P, N = 2, 1, 2, 16, 16, 3, 4, 5, 3


def fresh_inputs(rng):
    u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape).astype(np.float32)
    return [dict(q=u(-1, 1, N, T, H, K), k=u(-1, 1, N, T, H, K), v=u(-1, 1, N, T, HV, V),
                 g=u(-0.6, -0.01, N, T, HV, K), beta=u(0.05, 0.95, N, T, HV)) for _ in range(L)]


@pytest.mark.parametrize("layout", ["sglang", "per-layer"])
@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_ops_on_caller_arrays_equal_the_verifier_bitwise(rng, mode, layout):
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, mode=mode,
                              l2norm_qk=True)
    verifier = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S,
                                 max_rows=N, tokens=T, mode=mode, l2norm_qk=True)
    buffers = [dict(q=np.zeros((N, T, H, K), np.float32), k=np.zeros((N, T, H, K), np.float32),
                    v=np.zeros((N, T, HV, V), np.float32), g=np.zeros((N, T, HV, K), np.float32),
                    beta=np.zeros((N, T, HV), np.float32), o=np.zeros((N, T, HV, V), np.float32)) for _ in range(L)]
    runner = kdagraph.GraphRunner(verifier, buffers, exec="eager")

    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    pool = np.full((L, P + 1, HV, V, K), 7.0, np.float32)  # SGLang: slot P is padding, never named
    scratch = np.zeros((L, P * S, HV, V, K), np.float32)
    if layout == "per-layer":
        pool_arg = [np.ascontiguousarray(pool[l]) for l in range(L)]
        scratch_arg = [np.ascontiguousarray(scratch[l]) for l in range(L)]
    else:
        pool_arg, scratch_arg = pool, scratch
    accept_len = np.zeros(P, np.int32)
    extra = {}
    if mode == "replay":
        extra = dict(token_cache=np.zeros((L, 2 * P, spec.token_cache_row_stride), np.float32),
                     cache_parity=np.zeros(P, np.int32))
    storage = kdagraph.SlotStorage(spec, pool=pool_arg, accept_len=accept_len, scratch_steps=S,
                                   scratch=None if mode == "replay" else scratch_arg, **extra)
    index_storage = np.full(kdagraph.round_index_elems(N, T), 99, np.int32)
    indices = kdagraph.RoundIndices(index_storage, N, T)
    pool_layer = (lambda l: pool_arg[l]) if layout == "per-layer" else (lambda l: pool[l])
    for slot in range(P):
        verifier.prefill(slot, states[slot])
        for l in range(L):
            pool_layer(l)[slot] = states[slot, l]

    outputs = [np.zeros((N, T, HV, V), np.float32) for _ in range(L)]
    for r in range(8):
        batch = rng.permutation(P)[:N].astype(np.int32)
        runner.set_batch(batch.tolist())
        inputs = fresh_inputs(rng)
        for l in range(L):
            for name, x in inputs[l].items():
                buffers[l][name][...] = x
        runner.run_round()
        kdagraph.build_indices(spec, storage, indices, slots=batch, n_real=np.array([N], np.int32), rows=N)
        for l in range(L):
            outputs[l][...] = np.nan
            kdagraph.verify_layer(spec, storage, indices, rows=N, layer=l, o=outputs[l], **inputs[l])
            assert np.array_equal(outputs[l], buffers[l]["o"]), f"round {r} layer {l}"
        accepted = rng.integers(1, T + 1, N).astype(np.int32)
        runner.accept(accepted)
        kdagraph.accept(spec, storage, indices, rows=N, accepted=accepted)
        if mode == "two-phase":
            kdagraph.commit(spec, storage, indices, rows=N)
        if r == 4:  # a retirement mid-stream: materialize one slot, then go on
            kdagraph.materialize(spec, storage, slots=batch[:1].copy())
            verifier.materialize(batch[:1].tolist())
    all_slots = np.arange(P, dtype=np.int32)
    kdagraph.materialize(spec, storage, slots=all_slots)
    verifier.materialize(all_slots.tolist())
    want = np.empty((L, HV, V, K), np.float32)
    for slot in range(P):
        verifier.read_pool(slot, want)
        got = np.stack([pool_layer(l)[slot] for l in range(L)])
        assert np.array_equal(got, want), f"slot {slot}"
    assert (accept_len == 0).all()
    if layout == "sglang":
        assert (pool[:, P] == 7.0).all(), "the padding slot is never written"


def test_storage_refuses_bad_arrays_by_name():
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T)
    good = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32), scratch_steps=S,
                scratch=np.zeros((L, P * S, HV, V, K), np.float32))
    for argument, change in [("pool", dict(pool=np.zeros((L + 1, P, HV, V, K), np.float32))),
                             ("pool[1]", dict(pool=[np.zeros((P, HV, V, K), np.float32), np.zeros((P, HV, V, 2), np.float32)])),
                             ("accept_len", dict(accept_len=np.zeros(P, np.float32))),
                             ("scratch", dict(scratch=None)),
                             ("scratch", dict(scratch=np.zeros((L, P * S, HV, K, V + 1), np.float32)))]:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.SlotStorage(spec, **{**good, **change})
        assert e.value.argument == argument, str(e.value)
    storage = kdagraph.SlotStorage(spec, **good)
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.build_indices(spec, storage, indices, slots=np.zeros(N, np.int32), n_real=np.array([N], np.int32), rows=N + 1)
    assert e.value.argument == "slots"
    with pytest.raises(kdagraph.InvalidArgument) as e:  # the library's own check of its views
        kdagraph.SlotStorage(spec, **{**good, "scratch_steps": T - 1}) and kdagraph.build_indices(
            spec, kdagraph.SlotStorage(spec, **{**good, "scratch_steps": T - 1}), indices,
            slots=np.zeros(N, np.int32), n_real=np.array([N], np.int32), rows=N)
    assert e.value.argument == "storage.scratch_steps"


def test_the_gate_parameters_of_the_ops_are_checked():
    """verify_layer's A_log and dt_bias, and materialize's per-layer gates (one pair per layer: a shorter list
    was read past its end), are checked like recurrent_kda's."""
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, mode="replay",
                              gate="softplus")
    storage = kdagraph.SlotStorage(spec, pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32),
                                   scratch_steps=S, token_cache=np.zeros((L, 2 * P, spec.token_cache_row_stride), np.float32),
                                   cache_parity=np.zeros(P, np.int32))
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    kdagraph.build_indices(spec, storage, indices, slots=np.arange(N, dtype=np.int32), n_real=np.array([N], np.int32), rows=N)
    z = lambda *shape: np.zeros(shape, np.float32)
    layer = dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, V), g=z(N, T, HV, K), beta=z(N, T, HV), o=z(N, T, HV, V))
    good = dict(A_log=z(HV), dt_bias=z(HV, K))
    kdagraph.verify_layer(spec, storage, indices, rows=N, layer=0, **layer, **good)
    for argument, bad in [("A_log", dict(A_log=None)), ("A_log", dict(A_log=np.zeros(HV, np.float64))),
                          ("A_log", dict(A_log=z(HV + 1))), ("dt_bias", dict(dt_bias=z(K, HV + 1))),
                          ("dt_bias", dict(dt_bias=None))]:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.verify_layer(spec, storage, indices, rows=N, layer=0, **layer, **{**good, **bad})
        assert e.value.argument == argument, str(e.value)
    slots = np.arange(N, dtype=np.int32)
    pair = (z(HV), z(HV * K))
    for argument, gates in [("gates", [pair]), ("gates", [pair] * (L + 1)), ("gates[1]", [pair, (z(HV),)]),
                            ("gates[0].A_log", [(z(HV).astype(np.float64), z(HV * K)), pair]),
                            ("gates[1].dt_bias", [pair, (z(HV), z(HV * K - 1))])]:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.materialize(spec, storage, slots=slots, gates=gates)
        assert e.value.argument == argument, str(e.value)
    kdagraph.materialize(spec, storage, slots=slots, gates=[pair] * L)


def test_the_runner_checks_each_layers_gate_parameters():
    v = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S, max_rows=N,
                          tokens=T, gate="softplus")
    z = lambda *shape: np.zeros(shape, np.float32)
    layer = lambda: dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, V), g=z(N, T, HV, K), beta=z(N, T, HV),
                         o=z(N, T, HV, V), A_log=z(HV), dt_bias=z(HV, K))
    kdagraph.GraphRunner(v, [layer() for _ in range(L)])
    for argument, key, bad in [("inputs[1]['A_log']", "A_log", z(1, HV)), ("inputs[1]['dt_bias']", "dt_bias", z(K, HV)),
                               ("inputs[1]['A_log']", "A_log", None)]:
        inputs = [layer() for _ in range(L)]
        if bad is None:
            del inputs[1][key]
        else:
            inputs[1][key] = bad
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.GraphRunner(v, inputs)
        assert e.value.argument == argument, str(e.value)
