"""The ops of a round with token trees over caller arrays (docs/ops.md, docs/trees.md): RoundSpec(trees=True),
build_indices(parent=), conv_layer then verify_layer, accept_path (and commit), SlotStorage's accept_path,
bitwise equal to a Verifier(trees=True) running the same random trees and paths, in every mode, with and
without the short convolution; a tree or a path where the spec has none, and a
missing or unwanted accept_path, refused by name."""

import numpy as np
import pytest

import kdagraph
from test_short_conv_trees import random_path
from test_trees import chains, random_trees, same_bits
from test_verifier_trees import BATCH, C, H, HV, K, L, OPTIONS, P, S, SHAPE, T, V, expect_refused, round_inputs


@pytest.mark.parametrize("conv_width", [0, 3], ids=["no-conv", "conv3"])
@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_ops_with_trees_equal_the_verifier_bitwise(rng, mode, conv_width):
    """Eight rounds of random trees and paths, fresh inputs, outputs poisoned: build_indices(parent=),
    conv_layer then verify_layer, accept_path (and commit), bitwise the Verifier's eager rounds; a retirement
    midway and at the end, materialized states and conv windows bitwise."""
    W, N = conv_width, BATCH
    spec = kdagraph.RoundSpec(**SHAPE, tokens=T, mode=mode, conv_width=W, trees=True, **OPTIONS)
    assert spec.trees and spec.keeps_accept_path == (W > 0 and mode != "two-phase")
    verifier = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=S, max_rows=N, tokens=T, mode=mode, conv_width=W,
                                 trees=True, **OPTIONS)
    buffers = [round_inputs(1, layer, N, W) for layer in range(L)]
    gates = [(b["A_log"], b["dt_bias"]) for b in buffers]
    weights = [rng.uniform(-0.6, 0.6, (C, W)).astype(np.float32) for _ in range(L)] if W else []
    for l, w in enumerate(weights):
        buffers[l]["weight"] = w
    runner = kdagraph.GraphRunner(verifier, buffers, exec="eager")

    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    windows = rng.uniform(-1, 1, (P, L, max(W - 1, 1), C)).astype(np.float32)
    pool = np.stack([states[:, l] for l in range(L)])
    extra = {}
    if W:
        columns = spec.conv_state_row_elems(S) // C
        extra["conv_state"] = np.zeros((L, P, columns, C), np.float32)
        extra["conv_state"][:, :, :W - 1] = windows.transpose(1, 0, 2, 3)
        if mode == "two-phase":
            extra["conv_scratch"] = np.zeros((L, P * S, W - 1, C), np.float32)
        else:
            extra["round_parity"] = np.zeros(P, np.int32)
            extra["accept_path"] = np.full((P, T), 99, np.int32)  # not read before a slot's first accept
    if mode == "replay":  # the ring (docs/modes.md): the accepted path's records become the pending ones
        extra.update(ring_kg=np.full((L, P, spec.ring_kg_row_stride), np.nan, np.float32),
                     ring_u=np.full((L, P, spec.ring_u_row_stride), np.nan, np.float32),
                     ring_pending=np.zeros(P, np.int32), ring_start=np.zeros(P, np.int32))
    else:
        extra["scratch"] = np.zeros((L, P * S, HV, V, K), np.float32)
    accept_len = np.zeros(P, np.int32)
    storage = kdagraph.SlotStorage(spec, pool=pool, accept_len=accept_len, scratch_steps=S, **extra)
    offsets = kdagraph.round_index_offsets(N, T)
    assert offsets["parent"][1] == N * T
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    for slot in range(P):
        verifier.prefill(slot, states[slot], conv_window=windows[slot] if W else None)

    outputs = [np.zeros((N, T, HV, V), np.float32) for _ in range(L)]
    conv_out = [{name: np.zeros_like(buffers[l][name]) for name in ("q", "k", "v")} for l in range(L)]
    for r in range(8):
        batch = rng.permutation(P)[:N].astype(np.int32)
        runner.set_batch(batch.tolist())
        trees = random_trees(rng, N, T)
        verifier.set_tree(trees)
        fresh = [dict(g=rng.uniform(-3, 3, (N, T, HV, K)), beta=rng.uniform(-3, 3, (N, T, HV)),
                      **({"x": rng.uniform(-1, 1, (N, T, C))} if W else
                         {"q": rng.uniform(-1, 1, (N, T, H, K)), "k": rng.uniform(-1, 1, (N, T, H, K)),
                          "v": rng.uniform(-1, 1, (N, T, HV, V))})) for _ in range(L)]
        for l in range(L):
            for name, x in fresh[l].items():
                buffers[l][name][...] = x
        runner.run_round()
        kdagraph.build_indices(spec, storage, indices, slots=batch, n_real=np.array([N], np.int32), rows=N,
                               parent=trees)
        for l in range(L):
            outputs[l][...] = np.nan
            layer_in = {name: buffers[l][name] for name in ("g", "beta", "q", "k", "v")}
            if W:
                for a in conv_out[l].values():
                    a[...] = np.nan
                kdagraph.conv_layer(spec, storage, indices, rows=N, layer=l, x=buffers[l]["x"], weight=weights[l],
                                    **conv_out[l])
                layer_in.update(conv_out[l])
            kdagraph.verify_layer(spec, storage, indices, rows=N, layer=l, o=outputs[l], A_log=gates[l][0],
                                  dt_bias=gates[l][1], **layer_in)
            assert same_bits(outputs[l], buffers[l]["o"]), f"round {r} layer {l}"
        paths = np.stack([random_path(rng, p) for p in trees])
        runner.accept_path(paths)
        kdagraph.accept_path(spec, storage, indices, rows=N, accept_index=paths)
        if mode == "two-phase":
            kdagraph.commit(spec, storage, indices, rows=N)
        assert same_bits(accept_len, verifier.accept_len), f"round {r}: accept lengths"
        if r == 4:
            kdagraph.materialize(spec, storage, slots=batch[:1].copy(), gates=gates)
            verifier.materialize(batch[:1].tolist())
    kdagraph.materialize(spec, storage, slots=np.arange(P, dtype=np.int32), gates=gates)
    verifier.materialize(list(range(P)))
    want = np.empty((L, HV, V, K), np.float32)
    want_window = np.empty(verifier.conv_window_shape, np.float32)
    for slot in range(P):
        verifier.read_pool(slot, want)
        assert same_bits(pool[:, slot], want), f"slot {slot}"
        if W:
            verifier.read_conv_window(slot, want_window)
            assert same_bits(extra["conv_state"][:, slot, :W - 1], want_window), f"slot {slot}: conv window"
    assert kdagraph.device_errors("cpu")["count"] == 0 and verifier.device_errors()["count"] == 0


def test_the_ops_refuse_trees_by_name_where_the_spec_has_none_and_paths_where_the_storage_needs_them():
    def storage_args(spec, **changes):
        columns = spec.conv_state_row_elems(S) // C
        kw = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32), scratch_steps=S,
                  scratch=np.zeros((L, P * S, HV, V, K), np.float32), conv_state=np.zeros((L, P, columns, C), np.float32),
                  round_parity=np.zeros(P, np.int32), accept_path=np.zeros((P, T), np.int32))
        kw.update(changes)
        return kw

    trees = kdagraph.RoundSpec(**SHAPE, tokens=T, conv_width=4, trees=True)
    for argument, change in [("accept_path", dict(accept_path=None)),
                             ("accept_path", dict(accept_path=np.zeros((P, T - 1), np.int32))),
                             ("accept_path", dict(accept_path=np.zeros((P, T), np.int64)))]:
        expect_refused(lambda: kdagraph.SlotStorage(trees, **storage_args(trees, **change)), argument)
    chain = kdagraph.RoundSpec(**SHAPE, tokens=T, conv_width=4)
    assert not chain.trees and not chain.keeps_accept_path
    expect_refused(lambda: kdagraph.SlotStorage(chain, **storage_args(chain)), "accept_path")
    storage = kdagraph.SlotStorage(chain, **storage_args(chain, accept_path=None))
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(BATCH, T), np.int32), BATCH, T)
    batch = dict(slots=np.arange(BATCH, dtype=np.int32), n_real=np.array([BATCH], np.int32), rows=BATCH)
    expect_refused(lambda: kdagraph.build_indices(chain, storage, indices, parent=chains(BATCH, T), **batch), "parent")
    expect_refused(lambda: kdagraph.accept_path(chain, storage, indices, rows=BATCH,
                                                accept_index=np.zeros((BATCH, T), np.int32)), "accept_index")
    storage = kdagraph.SlotStorage(trees, **storage_args(trees))
    for bad in (chains(BATCH, T - 1), chains(BATCH, T).astype(np.float32)):
        expect_refused(lambda: kdagraph.build_indices(trees, storage, indices, parent=bad, **batch), "parent")
    expect_refused(lambda: kdagraph.accept_path(trees, storage, indices, rows=BATCH,
                                                accept_index=np.zeros((BATCH, T + 1), np.int32)), "accept_index")


