"""Token trees (docs/trees.md) through the owning classes and the ops of a round: a Verifier(trees=True) and its
GraphRunner driven from Python, each round's tree given by set_tree (or written into Verifier.parent, as a
drafter on the device would) and its accepted paths by accept_path_from_host or GraphRunner.accept_path,
bitwise equal to the C++ host engine drafting the same hashed top-K trees (--tree K), outputs every round
and states and conv windows after materialize; top-1 trees bitwise the chain engine, and replay's engine
bitwise fused accept's. Bad trees and paths
are refused by name with nothing changed. (The ops of a round with trees: test_ops_trees.py.)
On CUDA (skipped without one) the runner's captured rounds match the CPU backend."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import rel_error
from kdagraph._kdagraph import _reference as ref
from test_round_trip import OPTIONS, SHAPE
from test_round_trip import round_inputs as round_inputs_of
from test_short_conv_trees import random_path
from test_trees import chains, random_trees, same_bits

T, S, P, BATCH, ROUNDS = 5, 6, 5, 3, 24
L, H, HV, K, V = (SHAPE[x] for x in ("layers", "heads", "value_heads", "head_k", "head_v"))
C = 2 * H * K + HV * V


def round_inputs(seed, layer, N, conv_width):
    return round_inputs_of(seed, layer, N, conv_width, T)


def engine(seed, rate, mode, conv_width, tree, rounds=ROUNDS):
    return ref.run_host_engine(backend="cpu", **SHAPE, tokens=T, slots=P, scratch_steps=S, batch=BATCH, mode=mode,
                               accept_rate=rate, seed=seed, rounds=rounds, conv_width=conv_width, tree=tree,
                               **OPTIONS)


def round_trees(seed, r, slots, top_k, rate):
    """The host engine's drafted trees [n, T] and accepted paths [n, T] of round r."""
    trees = np.array([ref.synthetic_tree(seed, r, s, T, top_k) for s in slots], np.int32)
    paths = np.array([ref.synthetic_path(seed, r, s, rate, list(p)) for s, p in zip(slots, trees)], np.int32)
    return trees, paths


@pytest.mark.parametrize("top_k", [1, 3])
@pytest.mark.parametrize("conv_width", [0, 4], ids=["no-conv", "conv4"])
@pytest.mark.parametrize("mode", ["fused-accept", "two-phase", "replay"])
def test_python_tree_rounds_equal_the_cpp_host_engine_bitwise(rng, mode, conv_width, top_k):
    """Each round's tree goes in through set_tree, or (rounds 2, 6, 10, ...) straight into Verifier.parent;
    its paths through GraphRunner.accept_path (even rounds) or Verifier.accept_path_from_host (odd, a list
    of lists, then the commit in two-phase; it checks paths against set_tree's trees, so never after a tree
    written into Verifier.parent). The runner replays its CPU graph, built before any tree was set: the tree
    is data the graph reads."""
    seed = int(rng.integers(1, 2**62))
    rate = float(rng.uniform(0.5, 0.95))
    outputs, batches, retired = engine(seed, rate, mode, conv_width, top_k)
    assert len(outputs) == ROUNDS and all(b == list(range(BATCH)) for b in batches)
    if top_k == 1:  # docs/trees.md: a chain given as a tree is bitwise the chain
        chain_outputs, _, chain_retired = engine(seed, rate, mode, conv_width, 0)
        assert all(same_bits(a, b) for a, b in zip(outputs, chain_outputs))
        assert all(same_bits(a[2], b[2]) for a, b in zip(retired, chain_retired))
    if mode == "replay":  # docs/modes.md: the ring gives fused accept's outputs and states bitwise, trees included
        fused_outputs, _, fused_retired = engine(seed, rate, "fused-accept", conv_width, top_k)
        assert all(same_bits(a, b) for a, b in zip(outputs, fused_outputs))
        assert all(same_bits(a[2], b[2]) for a, b in zip(retired, fused_retired))
        assert not conv_width or all(same_bits(a[3], b[3]) for a, b in zip(retired, fused_retired))

    verifier = kdagraph.Verifier(backend="cpu", **SHAPE, slots=P, scratch_steps=S, max_rows=BATCH, tokens=T,
                                 mode=mode, conv_width=conv_width, trees=True, **OPTIONS)
    assert verifier.trees and verifier.parent.shape == (BATCH, T)
    assert same_bits(verifier.parent, chains(BATCH, T)), "the trees start as chains"
    inputs = [round_inputs(seed, layer, BATCH, conv_width) for layer in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs)
    slots = list(range(BATCH))
    for request, slot in enumerate(slots):
        window = ref.synthetic_conv_window(seed, request, L, conv_width, C) if conv_width else None
        verifier.prefill(slot, ref.synthetic_state(seed, request, L, HV, V, K), conv_window=window)
    runner.capture()
    runner.set_batch(slots)
    for r in range(ROUNDS):
        trees, paths = round_trees(seed, r, slots, top_k, rate)
        if r % 4 == 2:
            verifier.parent[:BATCH] = trees
        else:
            verifier.set_tree(trees)
            assert same_bits(verifier.parent[:BATCH], trees), "set_tree writes the tree the index build reads"
        for layer in range(L):
            fresh = ref.synthetic_inputs(seed, r, slots, layer, T, H, HV, K, V, True, True, conv=bool(conv_width))
            for name, x in fresh.items():
                inputs[layer][name][...] = x
            inputs[layer]["o"][...] = np.nan
        runner.run_round()
        if r % 2 == 0:
            runner.accept_path(paths)
        else:
            verifier.accept_path_from_host(paths.tolist())
            if mode == "two-phase":
                verifier.commit(BATCH)
        got = np.stack([inputs[layer]["o"] for layer in range(L)])
        assert same_bits(got, outputs[r]), f"round {r}: outputs differ"
    verifier.materialize(slots)
    state = np.empty((L, HV, V, K), np.float32)
    window = np.empty(verifier.conv_window_shape, np.float32)
    for _, slot, want, want_window in retired:
        verifier.read_pool(slot, state)
        assert same_bits(state, want), f"slot {slot}: materialized state differs"
        if conv_width:
            verifier.read_conv_window(slot, window)
            assert same_bits(window, want_window), f"slot {slot}: conv window differs"
    assert verifier.device_errors()["count"] == 0


def test_accepting_the_wrong_path_is_seen(rng):
    """The comparison above can fail: one path replaced by another of the same tree changes later outputs."""
    seed, rate, top_k = int(rng.integers(1, 2**62)), 1.0, 3  # every path runs to a leaf: two nodes or more
    outputs, _, _ = engine(seed, rate, "fused-accept", 4, top_k, rounds=3)
    verifier = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=S, max_rows=BATCH, tokens=T, conv_width=4,
                                 trees=True, **OPTIONS)
    inputs = [round_inputs(seed, layer, BATCH, 4) for layer in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs, exec="eager")
    slots = list(range(BATCH))
    for request, slot in enumerate(slots):
        verifier.prefill(slot, ref.synthetic_state(seed, request, L, HV, V, K),
                         conv_window=ref.synthetic_conv_window(seed, request, L, 4, C))
    runner.set_batch(slots)
    same = []
    for r in range(3):
        trees, paths = round_trees(seed, r, slots, top_k, rate)
        verifier.set_tree(trees)
        for layer in range(L):
            for name, x in ref.synthetic_inputs(seed, r, slots, layer, T, H, HV, K, V, True, True, conv=True).items():
                inputs[layer][name][...] = x
        runner.run_round()
        if r == 0:  # another path of the same tree: row 0's root alone
            paths[0, 1:] = -1
        runner.accept_path(paths)
        same.append(same_bits(np.stack([i["o"] for i in inputs]), outputs[r]))
    assert same[0] and not same[1] and not same[2]


def tree_verifier(**changes):
    kw = dict(SHAPE, slots=P, scratch_steps=S, max_rows=BATCH, tokens=T, trees=True)
    kw.update(changes)
    verifier = kdagraph.Verifier(**kw)
    values = np.random.default_rng(0)
    states = values.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    windows = values.uniform(-1, 1, (P,) + verifier.conv_window_shape).astype(np.float32)
    for slot in range(P):
        verifier.prefill(slot, states[slot], conv_window=windows[slot] if verifier.conv_width else None)
    return verifier


def expect_refused(call, argument):
    with pytest.raises(kdagraph.InvalidArgument) as e:
        call()
    assert e.value.argument == argument and argument in str(e.value), str(e.value)


BAD_TREES = [  # (the argument named, a bad tree for a batch of BATCH rows)
    ("parent[0][0]", lambda t: t.__setitem__((0, 0), 0)),
    ("parent[1][3]", lambda t: t.__setitem__((1, 3), 3)),
    ("parent[2][2]", lambda t: t.__setitem__((2, 2), 4)),
    ("parent[2][4]", lambda t: t.__setitem__((2, 4), -2)),
]


@pytest.mark.parametrize("argument,spoil", BAD_TREES, ids=[a for a, _ in BAD_TREES])
def test_set_tree_refuses_a_bad_parent_by_name_and_changes_nothing(rng, argument, spoil):
    verifier = tree_verifier()
    verifier.set_batch([3, 0, 1])
    good = random_trees(rng, BATCH, T)
    verifier.set_tree(good)
    bad = random_trees(rng, BATCH, T)
    spoil(bad)
    for given in (bad, bad.tolist()):
        expect_refused(lambda: verifier.set_tree(given), argument)
        assert same_bits(verifier.parent, good), "a refused set_tree changed the tree"


def test_set_tree_refuses_bad_shapes_and_verifiers_without_trees_by_name(rng):
    verifier = tree_verifier()
    verifier.set_batch([3, 0, 1])
    tree = random_trees(rng, BATCH, T)
    for argument, given in [("parent", tree[:, :-1].copy()), ("parent", tree[:-1].copy()),
                            ("parent", tree.astype(np.float32)), ("parent", tree.reshape(-1).copy()),
                            ("parent[1]", [list(tree[0]), list(tree[1, :-1]), list(tree[2])]),
                            ("parent", torch.from_numpy(tree).long())]:
        expect_refused(lambda: verifier.set_tree(given), argument)
    assert same_bits(verifier.parent, chains(BATCH, T))
    plain = tree_verifier(trees=False)
    plain.set_batch([0])
    assert not plain.trees and plain.parent is None
    expect_refused(lambda: plain.set_tree(chains(1, T)), "parent")
    expect_refused(lambda: plain.accept_path_from_host(chains(1, T)), "accept_index")
    runner = kdagraph.GraphRunner(plain, [round_inputs(1, layer, BATCH, 0) for layer in range(L)], exec="eager")
    runner.set_batch([0])
    expect_refused(lambda: runner.accept_path(np.full((1, T), -1, np.int32)), "accept_index")


BAD_PATHS = [  # (the argument named, a bad path of row 1, whose tree is [-1, 0, 0, 1, -1])
    ("accept_index[1][0]", [1, -1, -1, -1, -1]),   # not a child of the seed
    ("accept_index[1][1]", [0, 3, -1, -1, -1]),    # 3 is a grandchild
    ("accept_index[1][1]", [4, 0, -1, -1, -1]),
    ("accept_index[1][2]", [0, 1, 1, -1, -1]),
    ("accept_index[1][3]", [0, 1, -1, 3, -1]),     # after the path's end
    ("accept_index[1][0]", [-2, -1, -1, -1, -1]),
    ("accept_index[1][0]", [5, -1, -1, -1, -1]),
]


@pytest.mark.parametrize("argument,path", BAD_PATHS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_PATHS)])
def test_accept_path_from_host_refuses_a_path_off_the_tree_by_name_and_changes_nothing(rng, argument, path):
    verifier = tree_verifier(conv_width=3)  # fused-accept with a conv: the slots' paths are kept too
    inputs = [round_inputs(1, layer, BATCH, 3) for layer in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs, exec="eager")
    runner.set_batch([3, 0, 1])
    trees = random_trees(rng, BATCH, T)
    trees[1] = [-1, 0, 0, 1, -1]
    verifier.set_tree(trees)
    runner.run_round()
    paths = np.stack([random_path(rng, p) for p in trees])
    paths[1] = path
    accept_len, state = verifier.accept_len.copy(), verifier.conv_state.copy()
    expect_refused(lambda: verifier.accept_path_from_host(paths), argument)
    assert same_bits(verifier.accept_len, accept_len) and same_bits(verifier.conv_state, state)
    expect_refused(lambda: verifier.accept_path_from_host(paths[:2].copy()), "accept_index")
    expect_refused(lambda: runner.accept_path(paths[:, :-1].copy()), "accept_index")
    expect_refused(lambda: runner.accept_path(paths.astype(np.int64)), "accept_index")
    assert same_bits(verifier.accept_len, accept_len)
    paths[1] = [0, 1, 3, -1, -1]
    verifier.accept_path_from_host(paths)
    assert verifier.accept_len[0] == 4, "row 1's slot: the accept length is the path's last node + 1"


def test_a_path_off_the_tree_in_backend_memory_is_cut_and_recorded(rng):
    verifier = tree_verifier()
    runner = kdagraph.GraphRunner(verifier, [round_inputs(1, layer, BATCH, 0) for layer in range(L)], exec="eager")
    runner.set_batch([3, 0, 1])
    trees = chains(BATCH, T)
    trees[1] = [-1, 0, 0, 1, -1]
    verifier.set_tree(trees)
    runner.run_round()
    verifier.clear_device_errors()
    runner.accept_path(np.array([[0, 1, -1, -1, -1], [0, 2, 3, -1, -1], [0, 1, 2, 3, 4]], np.int32))
    assert verifier.accept_len[[3, 0, 1]].tolist() == [2, 3, 5], "row 1's path cut after node 2"
    errors = verifier.device_errors()
    assert errors["count"] >= 1 and errors["code"] == "path_invalid" and errors["row"] == 1, errors


# ---- CUDA ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.tree
def test_captured_tree_rounds_on_cuda_match_the_cpu_backend(rng):
    """The runner's graphs on a torch stream, trees through set_tree and paths through accept_path (CUDA
    int32 tensors), against the same rounds on the CPU backend: outputs every round, then the materialized
    states and conv windows; K = V = 64 as the CUDA verify needs."""
    shape = dict(layers=2, heads=1, value_heads=2, head_k=64, head_v=64)
    Cg = 4 * 64
    weights = [rng.uniform(-0.6, 0.6, (Cg, 4)).astype(np.float32) for _ in range(2)]
    gates = [(rng.uniform(-1, 0.5, 2).astype(np.float32), rng.uniform(-0.5, 0.5, 128).astype(np.float32))
             for _ in range(2)]
    states = rng.uniform(-0.5, 0.5, (P, 2, 2, 64, 64)).astype(np.float32)
    windows = rng.uniform(-1, 1, (P, 2, 3, Cg)).astype(np.float32)
    slots = [4, 1, 2]
    stream = torch.cuda.Stream()
    place = {"cpu": torch.from_numpy, "cuda": lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()}
    verifiers, runners, inputs = {}, {}, {}
    with torch.cuda.stream(stream):  # kdagraph enqueues on torch's current stream
        for backend, to in place.items():
            verifiers[backend] = kdagraph.Verifier(backend=backend, **shape, slots=P, scratch_steps=S, max_rows=BATCH,
                                                   tokens=T, conv_width=4, trees=True, **OPTIONS)
            zeros = lambda *dims: to(np.zeros(dims, np.float32))
            inputs[backend] = [dict(q=zeros(BATCH, T, 1, 64), k=zeros(BATCH, T, 1, 64), v=zeros(BATCH, T, 2, 64),
                                    g=zeros(BATCH, T, 2, 64), beta=zeros(BATCH, T, 2), o=zeros(BATCH, T, 2, 64),
                                    x=zeros(BATCH, T, Cg), weight=to(weights[l]), A_log=to(gates[l][0]),
                                    dt_bias=to(gates[l][1])) for l in range(2)]
            runners[backend] = kdagraph.GraphRunner(verifiers[backend], inputs[backend])
            for slot in range(P):
                verifiers[backend].prefill(slot, states[slot], conv_window=windows[slot])
            runners[backend].capture()
            runners[backend].set_batch(slots)
        for r in range(6):
            trees = random_trees(rng, BATCH, T)
            paths = np.stack([random_path(rng, p) for p in trees])
            fresh = [dict(g=rng.uniform(-3, 3, (BATCH, T, 2, 64)), beta=rng.uniform(-3, 3, (BATCH, T, 2)),
                          x=rng.uniform(-1, 1, (BATCH, T, Cg))) for _ in range(2)]
            out = {}
            for backend, to in place.items():
                for l in range(2):
                    for name, x in fresh[l].items():
                        inputs[backend][l][name].copy_(torch.from_numpy(x.astype(np.float32)))
                verifiers[backend].set_tree(trees)
                runners[backend].run_round()
                runners[backend].accept_path(to(paths))
                stream.synchronize()
                out[backend] = np.stack([inputs[backend][l]["o"].cpu().numpy() for l in range(2)])
            assert rel_error(out["cuda"], out["cpu"]) <= 1e-5, f"round {r}"
        got = {backend: [] for backend in verifiers}
        for backend, verifier in verifiers.items():
            verifier.materialize(slots)
            for slot in slots:
                state, window = np.empty((2, 2, 64, 64), np.float32), np.empty(verifier.conv_window_shape, np.float32)
                verifier.read_pool(slot, state)
                verifier.read_conv_window(slot, window)
                got[backend].append((state, window))
    for (state, window), (want_state, want_window) in zip(got["cuda"], got["cpu"]):
        assert rel_error(state, want_state) <= 1e-5
        assert np.array_equal(window, want_window), "the windows are the same inputs, moved"
    assert verifiers["cuda"].device_errors()["count"] == 0
