"""short_conv (docs/conv.md, docs/python.md) on numpy arrays and the CPU backend, against an independent fp64 numpy
reference written from the formula: the window at column max(a - 1, 0), the in-place advance of the conv
state, padded rows zero and untouched, several rounds of one request's input sequence, zero copy, and
every bad argument refused by name before any work."""

import numpy as np
import pytest

import kdagraph
from helpers import as_f64, expect_refused_unchanged, rel_error

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # the bf16 cases skip; the test extra installs ml_dtypes
    BF16 = None

TOL = {"float32": 1e-5, "bfloat16": 1e-2}


def io_type(name):
    if name == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes is not installed: no numpy bfloat16 here")
    return np.float32 if name == "float32" else BF16


def reference(x, state, weight, bias, indices, accepted, silu):
    """docs/conv.md in fp64: y [B, T, C] and the conv state after the call, from x [B, T, C] and the state
    [N, W - 2 + S, C] before it."""
    x, state = as_f64(x), as_f64(state)
    B, T, C = x.shape
    W = weight.shape[1]
    w = np.asarray(weight, np.float64)
    y = np.zeros((B, T, C))
    after = state.copy()
    for b in range(B):
        r = int(indices[b])
        if r < 0:
            continue
        o = max(int(accepted[b]) - 1, 0)
        seq = np.concatenate([state[r, o:o + W - 1], x[b]])  # the W - 1 inputs before x_1, then x_1..x_T
        for t in range(T):
            z = sum(w[:, j] * seq[t + j] for j in range(W))
            if bias is not None:
                z = z + np.asarray(bias, np.float64)
            y[b, t] = z / (1.0 + np.exp(-z)) if silu else z
        after[r, :W - 2] = state[r, o + 1:o + W - 1]
        after[r, W - 2:W - 2 + T] = x[b]
    return y, after


class ConvCase:
    """B rows of T tokens over a conv state of N rows of W - 2 + S columns; row `padded` is padded and the
    real rows' accept lengths cover 0 (just prefilled), 1..T and S."""

    def __init__(self, rng, *, W=4, C=200, S=5, T=3, io="float32", bias=True, activation="silu"):
        self.W, self.C, self.S, self.T, self.io = W, C, S, T, io
        t = io_type(io)
        accepts = sorted(set([0, *range(1, T + 1), S]))
        self.B = len(accepts) + 1
        self.N = self.B + 3
        u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape)
        self.x = u(-2, 2, self.B, T, C).astype(t)
        self.state = u(-2, 2, self.N, W - 2 + S, C).astype(t)
        self.weight = u(-0.8, 0.8, C, W).astype(np.float32)
        self.bias = u(-0.3, 0.3, C).astype(np.float32) if bias else None
        self.padded = 1
        rows = rng.permutation(self.N)[: self.B].astype(np.int32)
        rows[self.padded] = -1
        self.indices = rows
        a = np.array(accepts[:1] + [0] + accepts[1:], np.int32)  # the padded row's length is never read
        self.accepted = a
        self.activation = activation
        self.output = np.full((self.B, T, C), np.nan, dtype=t)

    def run(self, **changes):
        kw = dict(state_indices=self.indices, num_accepted_tokens=self.accepted, activation=self.activation,
                  output=self.output)
        kw.update(changes)
        return kdagraph.short_conv(self.x, self.state, self.weight, self.bias, **kw)

    def want(self, state_before):
        return reference(self.x, state_before, self.weight, self.bias, self.indices, self.accepted,
                         self.activation == "silu")


SHAPES = [  # (W, C, S): C a multiple of no block size; rows of (W - 2 + S) * C elements fill 16 bytes
    (2, 37, 8), (3, 37, 7), (4, 37, 6), (4, 200, 5), (3, 136, 4), (2, 200, 3),
]


@pytest.mark.parametrize("io", ["float32", "bfloat16"])
@pytest.mark.parametrize("W,C,S", SHAPES, ids=[f"W{w}-C{c}-S{s}" for w, c, s in SHAPES])
def test_short_conv_matches_the_fp64_reference_in_place(rng, W, C, S, io):
    c = ConvCase(rng, W=W, C=C, S=S, T=min(3, S), io=io)
    before = c.state.copy()
    y = c.run()
    assert y is c.output, "output= is written and returned"
    assert not np.isnan(as_f64(y)).any(), "an output element was not written"
    want_y, want_state = c.want(before)
    for b in range(c.B):
        if c.indices[b] < 0:
            assert (as_f64(y[b]) == 0).all(), f"padded row {b} must output zeros"
        else:
            assert rel_error(y[b], want_y[b]) <= TOL[io], f"row {b} (a = {c.accepted[b]})"
    # The state moves inputs, it computes nothing: its new columns are exact copies, in either dtype.
    assert np.array_equal(as_f64(c.state), want_state), "the conv state advanced in place as docs/conv.md says"
    for r in set(range(c.N)) - set(int(i) for i in c.indices if i >= 0):
        assert np.array_equal(c.state[r].view(np.uint8), before[r].view(np.uint8)), f"row {r} is nobody's, yet changed"


@pytest.mark.parametrize("activation,bias", [("silu", False), ("linear", True), (None, False), ("none", True)])
def test_activation_and_bias(rng, activation, bias):
    c = ConvCase(rng, W=3, C=136, S=4, T=2, bias=bias, activation=activation)
    before = c.state.copy()
    y = c.run()
    want_y, _ = reference(c.x, before, c.weight, c.bias, c.indices, c.accepted, activation == "silu")
    assert rel_error(y, want_y) <= 1e-5


def test_output_is_allocated_like_x_and_int64_indices_are_taken(rng):
    c = ConvCase(rng, W=4, C=200, S=5, T=3)
    before = c.state.copy()
    y = kdagraph.short_conv(c.x, c.state, c.weight, c.bias, state_indices=c.indices.astype(np.int64),
                            num_accepted_tokens=c.accepted)
    assert y.shape == c.x.shape and y.dtype == c.x.dtype
    want_y, want_state = c.want(before)
    assert rel_error(y, want_y) <= 1e-5 and np.array_equal(c.state, want_state)


def test_rounds_of_one_sequence_see_the_accepted_inputs(rng):
    """The point of the offset window: after a round that accepted a of its T inputs, the next call with
    num_accepted_tokens = a convolves the request's true last W - 1 inputs, whatever the layout."""
    W, C, S, T, B = 4, 200, 5, 4, 3
    weight = rng.uniform(-0.8, 0.8, (C, W)).astype(np.float32)
    state = rng.uniform(-5, 5, (B + 2, W - 2 + S, C)).astype(np.float32)  # columns past the window: garbage
    rows = np.array([4, 0, 2], np.int32)
    history = [rng.uniform(-2, 2, (W - 1, C)).astype(np.float32) for _ in range(B)]
    for b in range(B):
        state[rows[b], :W - 1] = history[b]  # a prefill: the window at column 0, accept length 0
    accepted = np.zeros(B, np.int32)
    for r in range(6):
        x = rng.uniform(-2, 2, (B, T, C)).astype(np.float32)
        y = kdagraph.short_conv(x, state, weight, state_indices=rows, num_accepted_tokens=accepted)
        for b in range(B):
            seq = np.concatenate([history[b], x[b]]).astype(np.float64)
            z = np.stack([sum(weight[:, j].astype(np.float64) * seq[t + j] for j in range(W)) for t in range(T)])
            assert rel_error(y[b], z / (1 + np.exp(-z))) <= 1e-5, f"round {r} row {b}"
        accepted = rng.integers(1, T + 1, B).astype(np.int32)  # the sampler's lengths
        history = [np.concatenate([history[b], x[b, :accepted[b]]])[-(W - 1):] for b in range(B)]


def spoil(**kw):
    return lambda c: kw


BAD = [
    ("x", lambda c: dict(x=c.x[0])),
    ("x", lambda c: dict(x=c.x.astype(np.float64))),
    ("x", lambda c: dict(x=np.asfortranarray(c.x))),
    ("x", lambda c: dict(x=c.x.tolist())),
    ("conv_state", lambda c: dict(conv_state=c.state[:, :, :-1].copy())),
    ("conv_state", lambda c: dict(conv_state=c.state[:, : c.W - 2 + c.T - 1].copy())),  # S < T
    ("conv_state", lambda c: dict(conv_state=c.state.astype(io_type("bfloat16")))),
    ("conv_state", lambda c: dict(conv_state=c.state[:, :, ::2])),
    ("weight", lambda c: dict(weight=c.weight.astype(np.float64))),
    ("weight", lambda c: dict(weight=np.zeros((c.C, 5), np.float32))),
    ("weight", lambda c: dict(weight=np.zeros((c.C, 1), np.float32))),
    ("weight", lambda c: dict(weight=c.weight[:-1].copy())),
    ("bias", lambda c: dict(bias=np.zeros(c.C + 1, np.float32))),
    ("bias", lambda c: dict(bias=np.zeros(c.C, np.float64))),
    ("state_indices", lambda c: dict(state_indices=c.indices[:-1].copy())),
    ("state_indices", lambda c: dict(state_indices=c.indices.astype(np.float32))),
    ("state_indices", lambda c: dict(state_indices=np.where(np.arange(c.B) == 0, c.N, c.indices).astype(np.int32))),
    ("state_indices", lambda c: dict(state_indices=np.where(np.arange(c.B) == 2, c.indices[0], c.indices).astype(np.int32))),
    ("num_accepted_tokens", lambda c: dict(num_accepted_tokens=c.accepted.astype(np.float32))),
    ("num_accepted_tokens", lambda c: dict(num_accepted_tokens=np.where(np.arange(c.B) == 0, 2**33, c.accepted.astype(np.int64)))),
    ("num_accepted_tokens", lambda c: dict(num_accepted_tokens=c.accepted[:-1].copy())),
    ("num_accepted_tokens", lambda c: dict(num_accepted_tokens=np.full(c.B, c.S + 1, np.int32))),
    ("num_accepted_tokens", lambda c: dict(num_accepted_tokens=np.full(c.B, -1, np.int32))),
    ("output", lambda c: dict(output=c.output[:, :1].copy())),
    ("output", lambda c: dict(output=c.output.astype(np.float64))),
    ("activation", lambda c: dict(activation="relu")),
    ("activation", lambda c: dict(activation=1)),
]


@pytest.mark.parametrize("argument,bad", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_a_bad_argument_is_refused_by_name_and_changes_nothing(rng, argument, bad):
    c = ConvCase(rng, W=4, C=200, S=5, T=3)
    kw = dict(x=c.x, conv_state=c.state, weight=c.weight, bias=c.bias, state_indices=c.indices,
              num_accepted_tokens=c.accepted, activation="silu", output=c.output)
    kw.update(bad(c))
    expect_refused_unchanged(lambda: kdagraph.short_conv(**kw), argument, state=c.state, output=c.output)


def envelope_view(rows, columns, C, dtype, extra_bytes=16):
    """[rows, columns, C] compact inside a row, each row at the start of a per-slot envelope whose stride
    is a 16-byte multiple with room to spare (the round's layout, docs/ops.md), and the envelope itself."""
    per16 = 16 // np.dtype(dtype).itemsize
    stride = -(-columns * C // per16) * per16 + extra_bytes // np.dtype(dtype).itemsize
    envelope = np.zeros((rows, stride), dtype)
    view = envelope[:, : columns * C].reshape(rows, columns, C)
    assert np.shares_memory(view, envelope), "a view, not a copy"
    return view, envelope


@pytest.mark.parametrize("io", ["float32", "bfloat16"])
@pytest.mark.parametrize("W", [2, 3, 4])
def test_any_channel_count_over_30_rounds_of_random_acceptance(rng, W, io):
    """docs/python.md: any C >= 1, rows that do not fill 16 bytes included (a compact state whose base is one
    element off any 16-byte boundary), against fp64 over 30 rounds of random accept lengths per C; the same
    calls on 16-byte rows in per-slot envelopes give the same bits, and the envelopes' spare bytes stay."""
    t = io_type(io)
    B, N, rounds = 3, 5, 30
    for C in range(1, 68):
        S = int(rng.integers(1, 6))
        T = int(rng.integers(1, S + 1))
        columns = W - 2 + S
        weight = rng.uniform(-0.8, 0.8, (C, W)).astype(np.float32)
        bias = rng.uniform(-0.3, 0.3, C).astype(np.float32) if C % 2 else None
        compact = np.zeros(N * columns * C + 1, t)[1:].reshape(N, columns, C)
        padded, envelope = envelope_view(N, columns, C, t)
        compact[...] = rng.uniform(-2, 2, compact.shape).astype(t)  # columns past the window: garbage
        history = [as_f64(compact[r, : W - 1]) for r in range(N)]  # a prefill: the window at column 0
        padded[...] = compact
        spare = envelope[:, columns * C:].copy()
        accepted_of = np.zeros(N, np.int32)  # per state row
        for r in range(rounds):
            rows = rng.permutation(N)[:B].astype(np.int32)
            rows[rng.integers(0, B)] = -1
            accepted = np.where(rows >= 0, accepted_of[np.maximum(rows, 0)], 0).astype(np.int32)
            x = rng.uniform(-2, 2, (B, T, C)).astype(t)
            before = compact.copy()
            y = kdagraph.short_conv(x, compact, weight, bias, state_indices=rows, num_accepted_tokens=accepted)
            y2 = kdagraph.short_conv(x, padded, weight, bias, state_indices=rows, num_accepted_tokens=accepted)
            where = f"C = {C}, S = {S}, T = {T}, round {r}"
            assert np.array_equal(y.view(np.uint8), y2.view(np.uint8)), f"{where}: compact and 16-byte rows differ"
            assert np.array_equal(compact.view(np.uint8), padded.view(np.uint8)), f"{where}: states differ"
            _, want_state = reference(x, before, weight, bias, rows, accepted, True)
            assert np.array_equal(as_f64(compact), want_state), f"{where}: the state did not advance as docs/conv.md says"
            for b in range(B):
                if rows[b] < 0:
                    assert (as_f64(y[b]) == 0).all(), f"{where}: padded row {b}"
                    continue
                seq = np.concatenate([history[rows[b]], as_f64(x[b])])
                w = weight.astype(np.float64)
                terms = np.stack([[w[:, j] * seq[u + j] for j in range(W)] for u in range(T)])  # [T, W, C]
                z, size = terms.sum(axis=1), abs(terms).sum(axis=1)
                if bias is not None:
                    z, size = z + bias.astype(np.float64), size + abs(bias.astype(np.float64))
                # At C = 1 one element is the whole norm: where the terms cancel (z near 0), fp32's rounding
                # of terms of size 1 is all that is left, so the error is measured against the terms' size.
                err = np.linalg.norm(as_f64(y[b]) - z / (1 + np.exp(-z))) / np.linalg.norm(size)
                assert err <= TOL[io], f"{where}, row {b}: error {err:.3g} of the terms' size"
                a = int(rng.integers(1, T + 1))  # the sampler's length for this slot
                accepted_of[rows[b]] = a
                history[rows[b]] = np.concatenate([history[rows[b]], as_f64(x[b, :a])])[-(W - 1):]
        assert np.array_equal(envelope[:, columns * C:], spare), f"C = {C}: an envelope's spare bytes changed"


def test_conv_state_strides_that_would_need_a_copy_are_refused_by_name(rng):
    """Only dimension 0 of the conv state may have a free stride (at least a row); inside a row it is
    compact, and the message names the dimension and the stride."""
    c = ConvCase(rng, W=4, C=37, S=6, T=3)
    wide = np.zeros((c.N, c.W - 2 + c.S, 2 * c.C), c.state.dtype)
    for bad, where in [(wide[:, :, ::2], "dimension 2"), (wide[:, :, : c.C], "dimension 1"),
                       (np.zeros((2 * c.N, c.W - 2 + c.S, c.C), c.state.dtype)[::-2], "row stride")]:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.short_conv(c.x, bad, c.weight, state_indices=c.indices, num_accepted_tokens=c.accepted)
        assert e.value.argument == "conv_state" and where in str(e.value), str(e.value)
