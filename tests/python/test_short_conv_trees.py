"""short_conv with token trees (docs/trees.md's Python line: parent_indices, accept_index) over calls of one
batch, against an fp64 reference written from the formula: token t's window is the inputs of its nearest
W - 1 ancestors after the row's history, and after a call the history grows by the inputs of the path
the sampler accepted, which the next call names in accept_index. Fresh random inputs, outputs poisoned
before each call; chains given as trees (and chain paths given as accept_index) are bitwise the plain
call; on host arrays a bad tree or path is refused by name with nothing changed; on CUDA (skipped without
one) the same calls match the CPU backend and a bad device parent is read as t - 1 and recorded."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import as_f64, expect_refused_unchanged, rel_error
from test_short_conv import TOL, io_type
from test_trees import chains, random_trees, same_bits


def random_path(rng, parent):
    """[T] int32: a root-to-node path down `parent` [T] (from a child of the seed, each step to a child of
    the node before, stopping at random or at a leaf), then -1."""
    T = len(parent)
    path = np.full(T, -1, np.int32)
    node, i = int(rng.choice(np.flatnonzero(parent == -1))), 0
    while True:
        path[i] = node
        i += 1
        children = np.flatnonzero(parent == node)
        if len(children) == 0 or rng.random() < 0.3:
            return path
        node = int(rng.choice(children))


def chain_path(T, a):
    """The accept_index of a chain that accepted its first a tokens."""
    return np.where(np.arange(T) < a, np.arange(T), -1).astype(np.int32)


def tree_window_reference(x, history, weight, bias, parent, silu):
    """One row's y [T, C] in fp64: token t convolves the last W - 1 inputs of `history` (fp64, oldest
    first) followed by its ancestors' inputs (nearest W - 1, oldest first), then x_t."""
    T = x.shape[0]
    W = weight.shape[1]
    w = np.asarray(weight, np.float64)
    y = np.empty(x.shape)
    for t in range(T):
        ancestors, node = [], int(parent[t])
        while node >= 0 and len(ancestors) < W - 1:
            ancestors.append(x[node])
            node = int(parent[node])
        window = (list(history) + ancestors[::-1])[-(W - 1):]
        z = sum(w[:, j] * window[j] for j in range(W - 1)) + w[:, W - 1] * x[t]
        if bias is not None:
            z = z + np.asarray(bias, np.float64)
        y[t] = z / (1.0 + np.exp(-z)) if silu else z
    return y


class TreeCalls:
    """B rows over a conv state of N rows (row `padded` of the batch padded, its trees and paths garbage that
    must never be read), each real row with its own history: the W - 1 inputs a prefill left at column 0."""

    def __init__(self, rng, *, W=4, C=40, S=6, T=5, io="float32", bias=True, B=4, padded=2):
        self.rng, self.W, self.C, self.S, self.T, self.B = rng, W, C, S, T, B
        self.t = io_type(io)
        self.io = io
        self.N = B + 3
        self.weight = rng.uniform(-0.8, 0.8, (C, W)).astype(np.float32)
        self.bias = rng.uniform(-0.3, 0.3, C).astype(np.float32) if bias else None
        self.state = rng.uniform(-2, 2, (self.N, W - 2 + S, C)).astype(self.t)  # past the window: garbage
        self.rows = rng.permutation(self.N)[:B].astype(np.int32)
        self.padded = padded
        self.rows[padded] = -1
        self.history = [as_f64(self.state[r, :W - 1]) if r >= 0 else None for r in self.rows]
        self.accepted = np.zeros(B, np.int32)         # a prefill: accept length 0 ...
        self.accept_index = np.full((B, T), -1, np.int32)  # ... and no path yet

    def call(self, parent, **kw):
        """One call with fresh inputs and `parent` [B, T] (None: chains); returns (x, y)."""
        x = self.rng.uniform(-2, 2, (self.B, self.T, self.C)).astype(self.t)
        y = np.full(x.shape, np.nan, self.t)
        kdagraph.short_conv(x, self.state, self.weight, self.bias, state_indices=self.rows,
                            num_accepted_tokens=self.accepted, output=y, parent_indices=parent,
                            accept_index=self.accept_index, **kw)
        return x, y

    def check(self, x, y, parent, where):
        for b in range(self.B):
            if self.rows[b] < 0:
                assert (as_f64(y[b]) == 0).all(), f"{where}: padded row {b} outputs zeros"
                continue
            want = tree_window_reference(as_f64(x[b]), self.history[b], self.weight, self.bias, parent[b], True)
            assert rel_error(y[b], want) <= TOL[self.io], f"{where}: row {b}, tree {parent[b].tolist()}"
            # The state keeps the inputs in token order after the window's last W - 2 inputs, bit for bit.
            r = self.rows[b]
            assert np.array_equal(as_f64(self.state[r, self.W - 2:self.W - 2 + self.T]), as_f64(x[b])), where

    def accept(self, x, parent):
        """The sampler: a random root-to-node path per real row; the history grows by its inputs."""
        for b in range(self.B):
            if self.rows[b] < 0:
                self.accept_index[b] = self.rng.integers(-5, 9, self.T)  # never read
                self.accepted[b] = -7
                continue
            path = random_path(self.rng, parent[b])
            self.accept_index[b] = path
            nodes = path[path >= 0]
            self.accepted[b] = nodes[-1] + 1  # SGLang's num_accepted_tokens: the last node + 1
            self.history[b] = np.concatenate([self.history[b], as_f64(x[b, nodes])])[-(self.W - 1):]


@pytest.mark.parametrize("io", ["float32", "bfloat16"])
@pytest.mark.parametrize("W", [2, 3, 4])
def test_tree_windows_run_along_ancestors_and_the_next_call_reads_the_accepted_path(rng, W, io):
    """Six calls of random trees (chain steps and branches); each call's window reads the previous call's
    accepted path through accept_index, whatever branch it took."""
    c = TreeCalls(rng, W=W, io=io, bias=W != 3)
    kdagraph.clear_device_errors("cpu")
    for call in range(6):
        parent = random_trees(rng, c.B, c.T)
        parent[c.padded] = rng.integers(-5, 9, c.T)  # a padded row's tree is never read
        untouched = {r: c.state[r].copy() for r in set(range(c.N)) - set(c.rows.tolist())}
        x, y = c.call(parent)
        c.check(x, y, parent, f"W = {W}, call {call}")
        for r, before in untouched.items():
            assert same_bits(c.state[r], before), f"call {call}: row {r} is nobody's, yet changed"
        c.accept(x, parent)
    assert kdagraph.device_errors("cpu")["count"] == 0


def test_a_chain_call_after_a_tree_call_reads_the_path_and_a_tree_call_after_a_chain_reads_the_offset(rng):
    """accept_index alone (the call's own tokens a chain) and parent_indices alone (the previous call's
    accepted tokens a chain, given by num_accepted_tokens) each do their half."""
    c = TreeCalls(rng, W=4, T=4, S=4)
    parent = random_trees(rng, c.B, c.T)
    x, y = c.call(parent)
    c.check(x, y, parent, "tree call")
    c.accept(x, parent)
    x, y = c.call(None)  # accept_index given, no tree: a chain
    c.check(x, y, chains(c.B, c.T), "chain call after a tree")
    real = c.rows >= 0
    c.accepted[real] = rng.integers(1, c.T + 1, int(real.sum()))
    for b in np.flatnonzero(real):
        c.history[b] = np.concatenate([c.history[b], as_f64(x[b, :c.accepted[b]])])[-(c.W - 1):]
    c.accept_index = None  # the offset window of num_accepted_tokens
    parent = random_trees(rng, c.B, c.T)
    x, y = c.call(parent)
    c.check(x, y, parent, "tree call after a chain")


@pytest.mark.parametrize("io", ["float32", "bfloat16"])
def test_chains_given_as_trees_and_chain_paths_as_accept_index_are_bitwise_the_plain_call(rng, io):
    """Three calls each way: the plain offset-window call, then with parent_indices t - 1 and with
    accept_index the chain's first a tokens (a = num_accepted_tokens), int32 and int64."""
    W, C, S, T, B = 4, 24, 5, 4, 3
    t = io_type(io)
    weight = rng.uniform(-0.8, 0.8, (C, W)).astype(np.float32)
    start = rng.uniform(-2, 2, (B + 1, W - 2 + S, C)).astype(t)
    rows = np.array([3, -1, 0], np.int32)
    xs = [rng.uniform(-2, 2, (B, T, C)).astype(t) for _ in range(3)]
    lengths = [np.zeros(B, np.int32)] + [rng.integers(1, T + 1, B).astype(np.int32) for _ in range(2)]
    runs = []
    for given in ("plain", "int32", "int64"):
        state, ys = start.copy(), []
        for call in range(3):
            a = lengths[call]
            kw = {}
            if given != "plain":
                cast = (lambda v: v) if given == "int32" else (lambda v: v.astype(np.int64))
                kw = dict(parent_indices=cast(chains(B, T)),
                          accept_index=cast(np.stack([chain_path(T, n) for n in a])))
            ys.append(kdagraph.short_conv(xs[call], state, weight, state_indices=rows, num_accepted_tokens=a, **kw))
        runs.append((ys, state))
    for ys, state in runs[1:]:
        assert all(same_bits(y, want) for y, want in zip(ys, runs[0][0])) and same_bits(state, runs[0][1])


def test_an_empty_path_reads_the_offset_window(rng):
    """A row whose accept_index is all -1 (a request just prefilled) reads column max(a - 1, 0) as without it."""
    c = TreeCalls(rng, W=3, T=3, S=4)
    state = c.state.copy()
    x = rng.uniform(-2, 2, (c.B, c.T, c.C)).astype(np.float32)
    want = kdagraph.short_conv(x, state, c.weight, c.bias, state_indices=c.rows, num_accepted_tokens=c.accepted)
    got = kdagraph.short_conv(x, c.state, c.weight, c.bias, state_indices=c.rows, num_accepted_tokens=c.accepted,
                              accept_index=np.full((c.B, c.T), -1, np.int32))
    assert same_bits(got, want) and same_bits(c.state, state)


def test_torch_cpu_tensors_take_int64_trees_and_paths(rng):
    c = TreeCalls(rng, W=4, T=4, S=4)
    parent = random_trees(rng, c.B, c.T)
    x, _ = c.call(parent)
    c.accept(x, parent)
    parent = random_trees(rng, c.B, c.T)
    state = c.state.copy()
    x = rng.uniform(-2, 2, (c.B, c.T, c.C)).astype(np.float32)
    want = kdagraph.short_conv(x, state, c.weight, c.bias, state_indices=c.rows, num_accepted_tokens=c.accepted,
                               parent_indices=parent, accept_index=c.accept_index)
    t = torch.from_numpy
    torch_state = t(c.state)  # the same memory
    got = kdagraph.short_conv(t(x), torch_state, t(c.weight), t(c.bias), state_indices=t(c.rows).long(),
                              num_accepted_tokens=t(c.accepted).long(), parent_indices=t(parent).long(),
                              accept_index=t(c.accept_index).long())
    assert same_bits(got.numpy(), want) and same_bits(c.state, state)


def spoil(name, b, i, value):
    return lambda kw: kw[name].__setitem__((b, i), value)


BAD = [  # (the argument named, how to spoil a good call's keywords); row 2 of the batch is padded
    ("parent_indices", spoil("parent_indices", 0, 0, 0)),     # the first token hangs from the seed
    ("parent_indices", spoil("parent_indices", 1, 3, 3)),     # a token is not its own parent
    ("parent_indices", spoil("parent_indices", 3, 2, 4)),     # nor a later token's child
    ("parent_indices", spoil("parent_indices", 0, 4, -2)),
    ("parent_indices", lambda kw: kw.update(parent_indices=kw["parent_indices"][:, :-1].copy())),
    ("parent_indices", lambda kw: kw.update(parent_indices=kw["parent_indices"].reshape(-1).copy())),
    ("parent_indices", lambda kw: kw.update(parent_indices=kw["parent_indices"].astype(np.float32))),
    ("parent_indices", lambda kw: kw.update(parent_indices=np.where(np.arange(5) == 1, 2**31,
                                                                    kw["parent_indices"].astype(np.int64)))),
    ("accept_index", spoil("accept_index", 0, 1, 5)),         # outside [-1, T)
    ("accept_index", spoil("accept_index", 1, 0, -2)),
    ("accept_index", lambda kw: kw["accept_index"].__setitem__((3, slice(None)), [2, 1, -1, -1, -1])),  # back up
    ("accept_index", lambda kw: kw["accept_index"].__setitem__((0, slice(None)), [0, 0, -1, -1, -1])),  # repeats
    ("accept_index", lambda kw: kw["accept_index"].__setitem__((1, slice(None)), [0, -1, 2, -1, -1])),  # after the end
    ("accept_index", lambda kw: kw["accept_index"].__setitem__((1, slice(None)), [-1, 3, -1, -1, -1])),
    ("accept_index", lambda kw: kw.update(accept_index=kw["accept_index"][:-1].copy())),
    ("accept_index", lambda kw: kw.update(accept_index=kw["accept_index"].astype(np.float64))),
    ("accept_index", lambda kw: kw.update(accept_index=torch.from_numpy(kw["accept_index"]).short())),
]


@pytest.mark.parametrize("argument,bad", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_a_bad_tree_or_path_is_refused_by_name_and_changes_nothing(rng, argument, bad):
    c = TreeCalls(rng, W=4, T=5, S=5)
    parent = random_trees(rng, c.B, c.T)
    x, _ = c.call(parent)
    c.accept(x, parent)
    c.accept_index[c.padded] = -1  # a good call throughout, the padded row included
    c.accepted[c.padded] = 0
    output = np.full((c.B, c.T, c.C), np.nan, np.float32)
    kw = dict(state_indices=c.rows, num_accepted_tokens=c.accepted, output=output,
              parent_indices=random_trees(rng, c.B, c.T), accept_index=c.accept_index.copy())
    bad(kw)
    expect_refused_unchanged(lambda: kdagraph.short_conv(x, c.state, c.weight, c.bias, **kw), argument,
                             state=c.state, output=output)


def test_a_padded_rows_tree_and_path_are_never_read(rng):
    c = TreeCalls(rng, W=4, T=5, S=5)
    parent = random_trees(rng, c.B, c.T)
    x, _ = c.call(parent)
    c.accept(x, parent)  # the padded row's path and length: garbage
    parent = random_trees(rng, c.B, c.T)
    x = rng.uniform(-2, 2, (c.B, c.T, c.C)).astype(np.float32)
    good = dict(parent_indices=parent.copy(), accept_index=c.accept_index.copy())
    good["parent_indices"][c.padded] = chains(1, c.T)
    good["accept_index"][c.padded] = -1
    state = c.state.copy()
    want = kdagraph.short_conv(x, state, c.weight, c.bias, state_indices=c.rows, num_accepted_tokens=c.accepted,
                               **good)
    parent[c.padded] = 99
    got = kdagraph.short_conv(x, c.state, c.weight, c.bias, state_indices=c.rows, num_accepted_tokens=c.accepted,
                              parent_indices=parent, accept_index=c.accept_index)
    assert same_bits(got, want) and same_bits(c.state, state)


# ---- CUDA ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.tree
def test_tree_calls_on_cuda_match_the_cpu_backend(rng):
    c = TreeCalls(rng, W=4, C=200, T=5, S=6)
    d = lambda v: torch.from_numpy(np.ascontiguousarray(v)).cuda()
    device_state = d(c.state)
    kdagraph.clear_device_errors("cuda")
    for call in range(4):
        parent = random_trees(rng, c.B, c.T)
        parent[c.padded] = chains(1, c.T)
        x = rng.uniform(-2, 2, (c.B, c.T, c.C)).astype(np.float32)
        kw = dict(state_indices=c.rows, num_accepted_tokens=c.accepted, parent_indices=parent,
                  accept_index=c.accept_index)
        want = kdagraph.short_conv(x, c.state, c.weight, c.bias, **kw)
        got = kdagraph.short_conv(d(x), device_state, d(c.weight), d(c.bias), **{k: d(v) for k, v in kw.items()})
        torch.cuda.synchronize()
        assert rel_error(got.cpu().numpy(), want) <= 1e-6, f"call {call}"
        assert np.array_equal(device_state.cpu().numpy(), c.state), f"call {call}: the states moved alike"
        c.accept(x, parent)
        c.accept_index[c.padded] = -1
        c.accepted[c.padded] = 0
    assert kdagraph.device_errors("cuda")["count"] == 0


@pytest.mark.gpu
@pytest.mark.tree
def test_a_bad_parent_in_device_memory_is_read_as_the_chains_and_recorded_by_short_conv(rng):
    c = TreeCalls(rng, W=4, C=64, T=5, S=5, padded=1)
    clamped = random_trees(rng, c.B, c.T)
    clamped[0, 3] = 2
    bad = clamped.copy()
    bad[0, 3] = 6
    d = lambda v: torch.from_numpy(np.ascontiguousarray(v)).cuda()
    x = rng.uniform(-2, 2, (c.B, c.T, c.C)).astype(np.float32)
    runs = []
    for parent in (clamped, bad):
        kdagraph.clear_device_errors("cuda")
        state = d(c.state)
        y = kdagraph.short_conv(d(x), state, d(c.weight), d(c.bias), state_indices=d(c.rows),
                                num_accepted_tokens=d(c.accepted), parent_indices=d(parent))
        torch.cuda.synchronize()
        runs.append((y.cpu().numpy(), state.cpu().numpy(), kdagraph.device_errors("cuda")))
    assert same_bits(runs[1][0], runs[0][0]) and same_bits(runs[1][1], runs[0][1])
    assert runs[0][2]["count"] == 0
    recorded = runs[1][2]
    assert recorded["count"] >= 1 and recorded["code"] == "parent_out_of_range"
    assert (recorded["row"], recorded["value"]) == (0, 6)
