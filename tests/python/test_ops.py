"""The ops of a round over arrays the caller owns (docs/ops.md): build_indices, verify_layer, accept, commit
and materialize on SGLang's layout (one pool [L, P + 1, HV, V, K], the padding slot never named) and
vLLM's (an array per layer), bitwise equal to a Verifier running the same rounds, in every mode, given
numpy arrays or torch CPU tensors (torch.from_numpy: the same memory, so the numpy side sees every write)."""

import numpy as np
import pytest
import torch

import kdagraph


def ml_bf16():
    return pytest.importorskip("ml_dtypes").bfloat16

L, H, HV, K, V, T, S, P, N = 2, 1, 2, 16, 16, 3, 4, 5, 3


C = 2 * H * K + HV * V  # the conv's channels


def fresh_inputs(rng, conv_width=0):
    """One round's inputs per layer; with a conv, x [N, T, C] stands where q, k and v would."""
    u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape).astype(np.float32)
    layers = []
    for _ in range(L):
        d = dict(g=u(-0.6, -0.01, N, T, HV, K), beta=u(0.05, 0.95, N, T, HV))
        if conv_width:
            d.update(x=u(-1, 1, N, T, C))
        else:
            d.update(q=u(-1, 1, N, T, H, K), k=u(-1, 1, N, T, H, K), v=u(-1, 1, N, T, HV, V))
        layers.append(d)
    return layers


def as_framework(framework):
    """What the ops are handed: the numpy arrays themselves, or torch tensors over the same memory."""
    if framework == "numpy":
        return lambda a: a
    wrap = lambda a: [torch.from_numpy(x) for x in a] if isinstance(a, list) else torch.from_numpy(a)
    return wrap


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("conv_width", [0, 3], ids=["no-conv", "conv3"])
@pytest.mark.parametrize("layout", ["sglang", "per-layer"])
@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_ops_on_caller_arrays_equal_the_verifier_bitwise(rng, mode, layout, conv_width, framework):
    """With a conv (docs/conv.md) conv_layer makes q, k and v from x before each verify_layer, over the caller's
    conv state (and two-phase conv scratch), or conv_verify_layer does both in one kernel as the runner does;
    outputs, pools and conv windows all bitwise."""
    W = conv_width
    fw = as_framework(framework)
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, mode=mode,
                              l2norm_qk=True, conv_width=W)
    verifier = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S,
                                 max_rows=N, tokens=T, mode=mode, l2norm_qk=True, conv_width=W)
    buffers = [dict(q=np.zeros((N, T, H, K), np.float32), k=np.zeros((N, T, H, K), np.float32),
                    v=np.zeros((N, T, HV, V), np.float32), g=np.zeros((N, T, HV, K), np.float32),
                    beta=np.zeros((N, T, HV), np.float32), o=np.zeros((N, T, HV, V), np.float32)) for _ in range(L)]
    weights = [rng.uniform(-0.6, 0.6, (C, W)).astype(np.float32) for _ in range(L)] if W else []
    for l, w in enumerate(weights):
        buffers[l].update(x=np.zeros((N, T, C), np.float32), weight=w)
    runner = kdagraph.GraphRunner(verifier, buffers, exec="eager")

    per_layer = lambda a: [np.ascontiguousarray(a[l]) for l in range(L)] if layout == "per-layer" else a
    at_layer = lambda arg, l: arg[l]  # one layer of either form (a view of the caller's memory)
    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    pool_arg = per_layer(np.full((L, P + 1, HV, V, K), 7.0, np.float32))  # SGLang: slot P is padding, never named
    scratch_arg = per_layer(np.zeros((L, P * S, HV, V, K), np.float32))
    accept_len = np.zeros(P, np.int32)
    extra = {}
    if mode == "replay":  # the ring's records (SGLang's layout: one array; vLLM's: one per layer) and cursor
        extra = dict(ring_kg=per_layer(np.full((L, P, spec.ring_kg_row_stride), np.nan, np.float32)),
                     ring_u=per_layer(np.full((L, P, spec.ring_u_row_stride), np.nan, np.float32)),
                     ring_pending=np.zeros(P, np.int32), ring_start=np.zeros(P, np.int32))
    assert spec.keeps_round_parity == (W > 0 and mode != "two-phase")
    if spec.keeps_round_parity:  # the conv state's halves
        extra["round_parity"] = np.zeros(P, np.int32)
    if W:
        columns = spec.conv_state_row_elems(S) // C
        assert columns == (W - 1 if mode == "two-phase" else 2 * (W - 1 + S))
        extra["conv_state"] = per_layer(np.full((L, P + 1, columns, C), 5.0, np.float32))
        if mode == "two-phase":
            assert spec.conv_scratch_row_elems == (W - 1) * C
            extra["conv_scratch"] = per_layer(np.zeros((L, P * S, W - 1, C), np.float32))
    storage = kdagraph.SlotStorage(spec, pool=fw(pool_arg), accept_len=fw(accept_len), scratch_steps=S,
                                   scratch=None if mode == "replay" else fw(scratch_arg),
                                   **{name: fw(a) for name, a in extra.items()})
    index_storage = np.full(kdagraph.round_index_elems(N, T), 99, np.int32)
    indices = kdagraph.RoundIndices(fw(index_storage), N, T)
    windows = rng.uniform(-1, 1, (P, L, max(W - 1, 1), C)).astype(np.float32)
    for slot in range(P):
        verifier.prefill(slot, states[slot], conv_window=windows[slot] if W else None)
        for l in range(L):
            at_layer(pool_arg, l)[slot] = states[slot, l]
            if W:
                at_layer(extra["conv_state"], l)[slot, :W - 1] = windows[slot, l]

    outputs = [np.zeros((N, T, HV, V), np.float32) for _ in range(L)]
    conv_out = [dict(q=np.zeros((N, T, H, K), np.float32), k=np.zeros((N, T, H, K), np.float32),
                     v=np.zeros((N, T, HV, V), np.float32)) for _ in range(L)]
    for r in range(8):
        batch = rng.permutation(P)[:N].astype(np.int32)
        runner.set_batch(batch.tolist())
        inputs = fresh_inputs(rng, W)
        for l in range(L):
            for name, x in inputs[l].items():
                buffers[l][name][...] = x
        runner.run_round()
        kdagraph.build_indices(spec, storage, indices, slots=fw(batch), n_real=fw(np.array([N], np.int32)), rows=N)
        for l in range(L):
            outputs[l][...] = np.nan
            layer_in = dict(inputs[l])
            if W and r % 2:  # the conv and the verify in one kernel, as the runner runs them
                kdagraph.conv_verify_layer(spec, storage, indices, rows=N, layer=l, x=fw(layer_in.pop("x")),
                                           weight=fw(weights[l]), g=fw(layer_in["g"]), beta=fw(layer_in["beta"]),
                                           o=fw(outputs[l]))
                assert np.array_equal(outputs[l], buffers[l]["o"]), f"round {r} layer {l}"
                continue
            if W:  # or as two: bitwise the same
                for a in conv_out[l].values():
                    a[...] = np.nan
                kdagraph.conv_layer(spec, storage, indices, rows=N, layer=l, x=fw(layer_in.pop("x")),
                                    weight=fw(weights[l]), **{name: fw(a) for name, a in conv_out[l].items()})
                layer_in.update(conv_out[l])
            kdagraph.verify_layer(spec, storage, indices, rows=N, layer=l, o=fw(outputs[l]),
                                  **{name: fw(a) for name, a in layer_in.items()})
            assert np.array_equal(outputs[l], buffers[l]["o"]), f"round {r} layer {l}"
        accepted = rng.integers(1, T + 1, N).astype(np.int32)
        runner.accept(accepted)
        kdagraph.accept(spec, storage, indices, rows=N, accepted=fw(accepted))
        if mode == "two-phase":
            kdagraph.commit(spec, storage, indices, rows=N)
        if r == 4:  # a retirement mid-stream: materialize one slot, then go on
            kdagraph.materialize(spec, storage, slots=fw(batch[:1].copy()))
            verifier.materialize(batch[:1].tolist())
    all_slots = np.arange(P, dtype=np.int32)
    kdagraph.materialize(spec, storage, slots=fw(all_slots))
    verifier.materialize(all_slots.tolist())
    want = np.empty((L, HV, V, K), np.float32)
    want_window = np.empty(verifier.conv_window_shape, np.float32)
    for slot in range(P):
        verifier.read_pool(slot, want)
        got = np.stack([at_layer(pool_arg, l)[slot] for l in range(L)])
        assert np.array_equal(got, want), f"slot {slot}"
        if W:
            verifier.read_conv_window(slot, want_window)
            got = np.stack([at_layer(extra["conv_state"], l)[slot, :W - 1] for l in range(L)])
            assert np.array_equal(got, want_window), f"slot {slot}: conv window"
    assert (accept_len == 0).all()
    if layout == "sglang":
        assert (pool_arg[:, P] == 7.0).all(), "the padding slot is never written"
        if W:
            assert (extra["conv_state"][:, P] == 5.0).all(), "the padding slot's conv state is never written"


def test_the_pdl_switch_is_on_by_default_and_settable():
    """docs/graphs.md: programmatic dependent launch is one switch of the round: RoundSpec's and the Verifier's."""
    shape = dict(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T)
    assert kdagraph.RoundSpec(**shape).pdl is True
    assert kdagraph.RoundSpec(**shape, pdl=False).pdl is False
    verifier = dict(shape, slots=P, scratch_steps=S, max_rows=N)
    assert kdagraph.Verifier(**verifier).pdl is True
    assert kdagraph.Verifier(**verifier, pdl=False).pdl is False


def test_storage_refuses_bad_arrays_by_name():
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T)
    good = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32), scratch_steps=S,
                scratch=np.zeros((L, P * S, HV, V, K), np.float32))
    for argument, change in [("pool", dict(pool=np.zeros((L + 1, P, HV, V, K), np.float32))),
                             ("conv_state", dict(conv_state=np.zeros((L, P, 3, C), np.float32))),
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


def conv_storage(mode, W=4, **changes):
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, mode=mode, conv_width=W)
    columns = spec.conv_state_row_elems(S) // C
    kw = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32), scratch_steps=S,
              scratch=np.zeros((L, P * S, HV, V, K), np.float32), conv_state=np.zeros((L, P, columns, C), np.float32))
    if mode == "two-phase":
        kw["conv_scratch"] = np.zeros((L, P * S, W - 1, C), np.float32)
    else:
        kw["round_parity"] = np.zeros(P, np.int32)
    kw.update(changes)
    return spec, kw


@pytest.mark.parametrize("argument,mode,change", [
    ("conv_state", "fused-accept", dict(conv_state=None)),
    ("conv_state", "fused-accept", dict(conv_state=np.zeros((L, P, 4 - 1, C), np.float32))),  # two-phase's columns
    ("conv_state", "fused-accept", dict(conv_state=np.zeros((L, P, 4 - 2 + S, C), np.float32))),  # short_conv's
    ("conv_state", "fused-accept", dict(conv_state=np.zeros((L, P, 2 * (4 - 1 + S), C), np.float64))),
    ("conv_state[1]", "fused-accept", dict(conv_state=[np.zeros((P, 2 * (4 - 1 + S), C), np.float32),
                                                       np.zeros((P, 2 * (4 - 1 + S), C + 1), np.float32)])),
    ("round_parity", "fused-accept", dict(round_parity=None)),
    ("round_parity", "fused-accept", dict(round_parity=np.zeros(P + 1, np.int32))),
    ("conv_scratch", "fused-accept", dict(conv_scratch=np.zeros((L, P * S, 3, C), np.float32))),
    ("conv_scratch", "two-phase", dict(conv_scratch=None)),
    ("conv_scratch", "two-phase", dict(conv_scratch=np.zeros((L, P * S, 2, C), np.float32))),
])
def test_conv_storage_is_refused_by_name(argument, mode, change):
    spec, kw = conv_storage(mode, **change)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.SlotStorage(spec, **kw)
    assert e.value.argument == argument, str(e.value)


def test_conv_state_without_a_conv_and_bad_conv_shapes_are_refused():
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.SlotStorage(spec, pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32),
                             scratch_steps=S, scratch=np.zeros((L, P * S, HV, V, K), np.float32),
                             conv_state=np.zeros((L, P, 7, C), np.float32))
    assert e.value.argument == "conv_state"
    for width in (1, 5, -1):
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, conv_width=width)
        assert e.value.argument == "conv_width"
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S, max_rows=N,
                          tokens=T, conv_width=4, conv_activation="gelu")
    assert e.value.argument == "conv_activation"
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, conv_width=2,
                              conv_activation=None)
    assert (spec.conv_width, spec.conv_channels, spec.conv_activation) == (2, C, "none")


@pytest.mark.parametrize("argument,change", [
    ("x", dict(x=np.zeros((N, T, C + 1), np.float32))),
    ("x", dict(x=np.zeros((N - 1, T, C), np.float32))),
    ("weight", dict(weight=np.zeros((C, 3), np.float32))),
    ("weight", dict(weight=np.zeros((C, 4), np.float64))),
    ("bias", dict(bias=np.zeros(C - 1, np.float32))),
    ("q", dict(q=np.zeros((N, T, H, K + 1), np.float32))),
    ("v", dict(v=np.zeros((N, T, HV, V), ml_bf16()))),
])
def test_conv_layer_refuses_bad_arrays_by_name(argument, change):
    spec, kw = conv_storage("fused-accept")
    storage = kdagraph.SlotStorage(spec, **kw)
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    kdagraph.build_indices(spec, storage, indices, slots=np.arange(N, dtype=np.int32), n_real=np.array([N], np.int32), rows=N)
    args = dict(x=np.zeros((N, T, C), np.float32), weight=np.zeros((C, 4), np.float32),
                q=np.zeros((N, T, H, K), np.float32), k=np.zeros((N, T, H, K), np.float32),
                v=np.zeros((N, T, HV, V), np.float32))
    kdagraph.conv_layer(spec, storage, indices, rows=N, layer=0, **args)
    args.update(change)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.conv_layer(spec, storage, indices, rows=N, layer=0, **args)
    assert e.value.argument == argument, str(e.value)


def test_the_gate_parameters_of_the_ops_are_checked():
    """verify_layer's A_log and dt_bias, and materialize's per-layer gates (one pair per layer: a shorter list
    was read past its end), are checked like recurrent_kda's."""
    spec = kdagraph.RoundSpec(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T, mode="replay",
                              gate="softplus")
    storage = kdagraph.SlotStorage(spec, pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32),
                                   scratch_steps=S, ring_kg=np.zeros((L, P, spec.ring_kg_row_stride), np.float32),
                                   ring_u=np.zeros((L, P, spec.ring_u_row_stride), np.float32),
                                   ring_pending=np.zeros(P, np.int32), ring_start=np.zeros(P, np.int32))
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    kdagraph.build_indices(spec, storage, indices, slots=np.arange(N, dtype=np.int32), n_real=np.array([N], np.int32), rows=N)
    z = lambda *shape: np.zeros(shape, np.float32)
    layer = dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, V), g=z(N, T, HV, K), beta=z(N, T, HV), o=z(N, T, HV, V))
    good = dict(A_log=z(HV), dt_bias=z(HV, K))
    kdagraph.verify_layer(spec, storage, indices, rows=N, layer=0, **layer, **good)
    # None is taken (zeros, docs/python.md), and so are the per query/key head forms ([H], [H * K]).
    for argument, bad in [("A_log", dict(A_log=np.zeros(HV, np.float64))),
                          ("A_log", dict(A_log=z(HV + 1))), ("dt_bias", dict(dt_bias=z(K, HV + 1)))]:
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


def test_the_runner_checks_each_layers_gate_and_conv_inputs():
    v = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S, max_rows=N,
                          tokens=T, gate="softplus", conv_width=4)
    z = lambda *shape: np.zeros(shape, np.float32)
    layer = lambda: dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, V), g=z(N, T, HV, K), beta=z(N, T, HV),
                         o=z(N, T, HV, V), A_log=z(HV), dt_bias=z(HV, K), x=z(N, T, C), weight=z(C, 4), bias=z(C))
    kdagraph.GraphRunner(v, [layer() for _ in range(L)])
    for argument, key, bad in [("inputs[1]['A_log']", "A_log", z(1, HV)), ("inputs[1]['dt_bias']", "dt_bias", z(K, HV)),
                               ("inputs[1]['x']", "x", z(N, T, C - 1)), ("inputs[1]['weight']", "weight", z(C, 3)),
                               ("inputs[1]['bias']", "bias", z(C, 1)), ("inputs[1]['x']", "x", None)]:
        inputs = [layer() for _ in range(L)]
        if bad is None:
            del inputs[1][key]
        else:
            inputs[1][key] = bad
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.GraphRunner(v, inputs)
        assert e.value.argument == argument, str(e.value)
    plain = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S,
                              max_rows=N, tokens=T, gate="softplus")
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.GraphRunner(plain, [layer() for _ in range(L)])
    assert e.value.argument == "inputs[0]['x']"


def test_the_verifier_conv_state_and_windows(rng):
    v = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S, max_rows=N,
                          tokens=T, conv_width=4)
    assert v.conv_window_shape == (L, 3, C) and v.conv_state.shape == (L, P, 2 * (4 - 1 + S), C)
    window = rng.uniform(-1, 1, (L, 3, C)).astype(np.float32)
    states = np.zeros((L, HV, V, K), np.float32)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        v.prefill(1, states)
    assert e.value.argument == "conv_window"
    with pytest.raises(kdagraph.InvalidArgument) as e:
        v.prefill(1, states, conv_window=window[:, :2].copy())
    assert e.value.argument == "conv_window"
    v.prefill(1, states, conv_window=window)
    assert np.array_equal(v.conv_state[:, 1, :3], window), "the prefill wrote columns [0, W - 1), zero-copy view"
    out = np.empty_like(window)
    v.read_conv_window(1, out)
    assert np.array_equal(out, window)
    plain = kdagraph.Verifier(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P, scratch_steps=S,
                              max_rows=N, tokens=T)
    assert plain.conv_state is None and plain.conv_width == 0
    with pytest.raises(kdagraph.InvalidArgument) as e:
        plain.prefill(1, states, conv_window=window)
    assert e.value.argument == "conv_window"
