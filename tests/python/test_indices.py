"""build_fused_accept_indices (SGLang's signature) and the five required behaviours of docs/indices.md, on
numpy and the CPU backend."""

import numpy as np
import pytest

import kdagraph
from test_recurrent_kda import Case


def random_batch(rng, P, N, padded):
    slots = rng.permutation(P)[:N].astype(np.int32)
    slots[list(padded)] = -1
    return slots


def build(slots, S, T, pool):
    return kdagraph.build_fused_accept_indices(slots=slots, scratch_steps=S, draft_token_num=T, accept_lens_pool=pool)


@pytest.mark.parametrize("P,S,T", [(7, 4, 4), (9, 6, 3), (3, 1, 1), (20, 8, 2)])
def test_real_rows_address_exactly_their_own_scratch_rows(rng, P, S, T):
    N = min(P, 5)
    slots = random_batch(rng, P, N, padded=[N - 1])
    pool = rng.integers(1, T + 1, P).astype(np.int32)
    rows, accepted = build(slots, S, T, pool)
    assert rows.shape == (N, T) and rows.dtype == np.int32 and accepted.shape == (N,) and accepted.dtype == np.int32
    for n, slot in enumerate(slots):
        if slot >= 0:
            assert rows[n].tolist() == [slot * S + t for t in range(T)]
            assert all(slot * S <= r < (slot + 1) * S for r in rows[n]), "only its own slot's rows"


def test_padded_rows_are_fully_negative(rng):
    P, S, T = 8, 5, 4
    slots = random_batch(rng, P, 6, padded=[1, 4, 5])
    rows, _ = build(slots, S, T, rng.integers(1, T + 1, P).astype(np.int32))
    assert (rows[[1, 4, 5]] < 0).all()
    assert (rows[[0, 2, 3]] >= 0).all()


def test_the_accept_length_gather_reads_the_pool_and_padded_rows_stay_in_range(rng):
    P, S, T = 11, 4, 4
    slots = random_batch(rng, P, 7, padded=[0, 6])
    pool = rng.integers(1, T + 1, P).astype(np.int32)
    _, accepted = build(slots, S, T, pool)
    assert accepted.tolist() == [int(pool[max(s, 0)]) for s in slots], "real rows gather their slot, padded rows slot 0"
    pool2 = (pool % T + 1).astype(np.int32)  # a different pool gives different lengths: they are read, not kept
    assert not np.array_equal(pool2, pool)
    _, accepted2 = build(slots, S, T, pool2)
    assert accepted2.tolist() == [int(pool2[max(s, 0)]) for s in slots]


def test_one_build_shared_by_every_layer_equals_a_build_per_layer(rng):
    P, S, T, L = 6, 4, 4, 3
    slots = random_batch(rng, P, 3, padded=[1])
    lens = rng.integers(1, T + 1, P).astype(np.int32)
    layers = [Case(rng, B=3, T=T, N=P * S, padded=None) for _ in range(L)]
    shared_rows, shared_acc = build(slots, S, T, lens)
    pools = [c.pool.copy() for c in layers]
    outs_shared, outs_each = [], []
    for c, pool in zip(layers, pools):
        o, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=shared_rows,
                                      num_accepted_tokens=shared_acc)
        outs_shared.append(o)
    for c in layers:
        rows, acc = build(slots, S, T, lens)
        o, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=rows,
                                      num_accepted_tokens=acc)
        outs_each.append(o)
    for l in range(L):
        assert np.array_equal(outs_shared[l], outs_each[l]), f"layer {l} outputs"
        assert np.array_equal(pools[l], layers[l].pool), f"layer {l} states"


def test_a_different_batch_builds_different_rows_nothing_stale(rng):
    P, S, T = 9, 4, 3
    pool = rng.integers(1, T + 1, P).astype(np.int32)
    first = random_batch(rng, P, 4, padded=[])
    second = first[::-1].copy()
    second[0] = -1
    rows1, acc1 = build(first, S, T, pool)
    rows2, acc2 = build(second, S, T, pool)
    assert not np.array_equal(rows1, rows2)
    expect = lambda s: [[x * S + t if x >= 0 else -1 for t in range(T)] for x in s]
    assert rows2.tolist() == expect(second) and acc2.tolist() == [int(pool[max(x, 0)]) for x in second]
    assert rows1.tolist() == expect(first), "the earlier build is untouched by the later one"


@pytest.mark.parametrize("slots,argument", [([0, 9], "slots"), ([0, -2], "slots"), ([3, 3], "slots")])
def test_bad_slots_are_refused_on_the_host(slots, argument):
    with pytest.raises(kdagraph.InvalidArgument) as e:
        build(np.array(slots, np.int32), 4, 4, np.ones(9, np.int32))
    assert e.value.argument == argument


@pytest.mark.parametrize("S,T,argument", [(4, 5, "draft_token_num"), (0, 1, "scratch_steps"), (4, 0, "draft_token_num")])
def test_bad_sizes_are_refused(S, T, argument):
    with pytest.raises(kdagraph.InvalidArgument) as e:
        build(np.array([0, 1], np.int32), S, T, np.ones(4, np.int32))
    assert e.value.argument == argument


def test_bad_arrays_are_refused():
    with pytest.raises(kdagraph.InvalidArgument) as e:
        build(np.array([0, 1], np.int32), 4, 2, np.ones(4, np.float32))
    assert e.value.argument == "accept_lens_pool"
    with pytest.raises(kdagraph.InvalidArgument) as e:
        build(np.array([[0, 1]], np.int32), 4, 2, np.ones(4, np.int32))
    assert e.value.argument == "slots"


def test_int64_slots_as_engines_keep_them_are_taken():
    rows, acc = build(np.array([2, -1], np.int64), 3, 2, np.array([1, 2, 3], np.int32))
    assert rows.tolist() == [[6, 7], [-1, -1]] and acc.tolist() == [3, 1]
