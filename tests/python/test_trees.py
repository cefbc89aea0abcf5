"""Token trees through recurrent_kda (docs/trees.md's Python line, parent_indices): token t of a sequence
updates the post-state of its parent (-1: the seed) and outputs from its own, against an fp64 reference
that runs each token as a one-token verify from its parent's post-state; every post-state lands in its
ssm_state_indices row; a chain given as a tree is bitwise the call without; the frozen verify outputs the
tree and writes nothing; on host arrays a bad parent or shape is refused by name with nothing changed;
on CUDA the tree matches the CPU backend, and a bad parent is read as t - 1 and recorded."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import expect_refused_unchanged, rel_error
from test_recurrent_kda import BF16, TOL, Case, check_round


def random_trees(rng, B, T):
    """[B, T] int32 parents: each token after the first a chain step (t - 1) or a branch (any of
    [-1, t - 1)) at random; a tree of two or more tokens has at least one branch."""
    parent = np.empty((B, T), np.int32)
    for b in range(B):
        for t in range(T):
            parent[b, t] = t - 1 if t == 0 or rng.random() < 0.5 else rng.integers(-1, t - 1)
        if T >= 2 and (parent[b] == np.arange(-1, T - 1)).all():
            parent[b, T - 1] = rng.integers(-1, T - 2)
    return parent


def chains(B, T):
    return np.tile(np.arange(-1, T - 1, dtype=np.int32), (B, 1))


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def inputs(c):
    return c.q, c.k, c.v, c.g, c.beta


def spec_decode(c, **kw):
    return dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, **kw)


def seeds_of(c, before):
    return [None if b == c.padded else before[c.indices[b, c.accepted[b] - 1]] for b in range(c.B)]


DTYPES = [(np.float32, np.float32), (np.float32, BF16), (BF16, np.float32), (BF16, BF16)]


@pytest.mark.parametrize("gate", ["precomputed", "softplus"])
@pytest.mark.parametrize("io,state", DTYPES, ids=lambda p: getattr(p, "__name__", str(p)))
def test_each_token_updates_its_parents_post_state_and_outputs_from_its_own(rng, io, state, gate):
    c = Case(rng, T=6, io=io, state=state, gate=gate, beta_is_logit=gate != "precomputed")
    parent = random_trees(rng, c.B, c.T)
    before = c.pool.copy()
    kdagraph.clear_device_errors("cpu")
    out, final = kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, output_final_state=True, output=c.output,
                                        **spec_decode(c, parent_indices=parent), **c.kwargs())
    assert out is c.output and final is c.pool
    check_round(c, out, before, seeds_of(c, before), c.indices, max(TOL[io], TOL[state]), parent)
    assert kdagraph.device_errors("cpu")["count"] == 0


def test_the_other_spec_decode_forms_take_a_tree(rng):
    """Rows b * T + t without indices (num_spec_tokens), a seed from initial_state_source, and the packed
    cu_seqlens form (parent_indices stays [B, T])."""
    c = Case(rng, T=5, N=15, padded=None)
    parent = random_trees(rng, c.B, c.T)
    rows = np.arange(c.B * c.T).reshape(c.B, c.T)
    before = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, num_spec_tokens=c.T - 1,
                                    num_accepted_tokens=c.accepted, output=c.output, parent_indices=parent)
    check_round(c, out, before, [before[rows[b, c.accepted[b] - 1]] for b in range(c.B)], rows, 1e-5, parent)

    c = Case(rng, T=5)
    parent = random_trees(rng, c.B, c.T)
    source = rng.uniform(-1, 1, (4, c.HV, c.V, c.K)).astype(np.float32)
    seed_rows = np.array([2, -1, 0], np.int32)  # Case pads row 1
    before = c.pool.copy()
    out, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, initial_state_source=source,
                                    initial_state_indices=seed_rows, output=c.output,
                                    **spec_decode(c, parent_indices=parent))
    check_round(c, out, before, [None if r < 0 else source[r] for r in seed_rows], c.indices, 1e-5, parent)

    dense_pool = before.copy()
    dense, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=dense_pool, **spec_decode(c, parent_indices=parent))
    pack = lambda x: x.reshape((1, c.B * c.T) + x.shape[2:])
    packed_pool = before.copy()
    packed, _ = kdagraph.recurrent_kda(*(pack(x) for x in inputs(c)), initial_state=packed_pool,
                                       cu_seqlens=np.arange(0, c.B * c.T + 1, c.T, dtype=np.int32),
                                       **spec_decode(c, parent_indices=parent))
    assert same_bits(packed.reshape(dense.shape), dense) and same_bits(packed_pool, dense_pool)


@pytest.mark.parametrize("io,state", DTYPES, ids=lambda p: getattr(p, "__name__", str(p)))
def test_a_chain_given_as_a_tree_is_bitwise_the_chain(rng, io, state):
    c = Case(rng, T=5, io=io, state=state, gate="softplus", beta_is_logit=True)
    runs = []
    for parent in (None, chains(c.B, c.T), chains(c.B, c.T).astype(np.int64)):
        pool = c.pool.copy()
        out, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=pool, **spec_decode(c, parent_indices=parent),
                                       **c.kwargs())
        runs.append((out, pool))
    for out, pool in runs[1:]:
        assert same_bits(out, runs[0][0]) and same_bits(pool, runs[0][1])


def test_a_one_token_spec_decode_takes_the_one_token_tree(rng):
    """ssm_state_indices [B, 1] (num_spec_tokens 0) is spec decode: the tree [-1] is the chain."""
    c = Case(rng, T=1)
    runs = []
    for parent in (None, np.full((c.B, 1), -1, np.int32)):
        pool = c.pool.copy()
        out, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=pool, num_spec_tokens=0,
                                       **spec_decode(c, parent_indices=parent))
        runs.append((out, pool))
    assert same_bits(runs[1][0], runs[0][0]) and same_bits(runs[1][1], runs[0][1])


def test_a_frozen_verify_outputs_the_tree_and_writes_no_state(rng):
    """disable_state_update with a tree: the updating call's outputs bitwise, from the seed it would use
    (ssm_state_indices [B, T] with num_accepted_tokens, or FlashInfer's frozen [B] of seed rows)."""
    c = Case(rng, T=6)
    parent = random_trees(rng, c.B, c.T)
    updating, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool.copy(), **spec_decode(c, parent_indices=parent))
    seed_rows = c.indices[np.arange(c.B), np.maximum(c.accepted, 1) - 1].copy()  # the padded row's are all -1
    for kw in (spec_decode(c), dict(ssm_state_indices=seed_rows)):
        pool = c.pool.copy()
        frozen, final = kdagraph.recurrent_kda(*inputs(c), initial_state=pool, disable_state_update=True,
                                               parent_indices=parent, **kw)
        assert final is None
        assert same_bits(frozen, updating), f"{list(kw)}: the frozen outputs are the updating call's"
        assert same_bits(pool, c.pool), f"{list(kw)}: a frozen verify wrote a state row"


def test_a_padded_rows_parents_are_never_read(rng):
    c = Case(rng, T=4)  # row 1 padded
    parent = random_trees(rng, c.B, c.T)
    want_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=want_pool, **spec_decode(c, parent_indices=parent))
    parent[c.padded] = 99
    out, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, **spec_decode(c, parent_indices=parent))
    assert same_bits(out, want) and same_bits(c.pool, want_pool)


def spoil_entry(b, t, value):
    return lambda c, kw: kw["parent_indices"].__setitem__((b, t), value)


BAD = [  # (how to spoil a good call's parent_indices), each refused naming parent_indices
    spoil_entry(0, 0, 0),                      # the root's parent is the seed
    spoil_entry(2, 0, 1),
    spoil_entry(2, 3, 3),                      # a token is not its own parent
    spoil_entry(0, 2, 4),                      # nor a later token's child
    spoil_entry(2, 5, -2),
    lambda c, kw: (kw["parent_indices"].__setitem__((0, 1), 7), kw.update(disable_state_update=True)),
    lambda c, kw: kw.update(parent_indices=kw["parent_indices"][:, :-1].copy()),
    lambda c, kw: kw.update(parent_indices=kw["parent_indices"].reshape(-1).copy()),
    lambda c, kw: kw.update(parent_indices=np.concatenate([kw["parent_indices"], chains(1, c.T)])),
    lambda c, kw: kw.update(parent_indices=kw["parent_indices"].astype(np.float32)),
    lambda c, kw: kw.update(parent_indices=np.where(chains(c.B, c.T) == 2, 2**31, chains(c.B, c.T).astype(np.int64))),
]


@pytest.mark.parametrize("bad", BAD, ids=[f"parent_indices-{i}" for i in range(len(BAD))])
def test_a_bad_parent_or_shape_is_refused_by_name_and_changes_nothing(rng, bad):
    c = Case(rng, T=6)
    kw = spec_decode(c, parent_indices=random_trees(rng, c.B, c.T), output=c.output)
    bad(c, kw)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, **kw), "parent_indices",
                             pool=c.pool, output=c.output)


def test_a_decode_refuses_a_tree_by_name(rng):
    """One token per sequence updating its own row (ssm_state_indices [B], or none) has nothing to branch."""
    c = Case(rng, T=1)
    root = np.full((c.B, 1), -1, np.int32)
    for kw in (dict(ssm_state_indices=c.indices[:, 0].copy()), dict()):
        expect_refused_unchanged(lambda: kdagraph.recurrent_kda(*inputs(c), initial_state=c.pool, output=c.output,
                                                                parent_indices=root, **kw),
                                 "parent_indices", pool=c.pool, output=c.output)


def test_torch_cpu_tensors_take_int64_parents_and_refuse_bad_ones(rng):
    c = Case(rng, T=5)
    parent = random_trees(rng, c.B, c.T)
    want_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=want_pool, **spec_decode(c, parent_indices=parent))
    t = torch.from_numpy
    pool = t(c.pool.copy())
    kw = dict(initial_state=pool, ssm_state_indices=t(c.indices).long(), num_accepted_tokens=t(c.accepted).long())
    out, _ = kdagraph.recurrent_kda(*(t(x) for x in inputs(c)), parent_indices=t(parent).long(), **kw)
    assert same_bits(out.numpy(), want) and same_bits(pool.numpy(), want_pool)
    bad = t(parent).long()
    bad[2, 1] = 1
    before = pool.clone()
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.recurrent_kda(*(t(x) for x in inputs(c)), parent_indices=bad, **kw)
    assert e.value.argument == "parent_indices" and torch.equal(pool, before)


# ---- CUDA ------------------------------------------------------------------------------------------

def cuda(x):
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def cuda_call(c, pool, parent, **kw):
    """recurrent_kda of case c on CUDA tensors (state `pool`, a CUDA tensor), synchronized."""
    gate = {k: (cuda(v) if isinstance(v, np.ndarray) else v) for k, v in c.kwargs().items()}
    out, _ = kdagraph.recurrent_kda(*(cuda(x) for x in inputs(c)), initial_state=pool, ssm_state_indices=cuda(c.indices),
                                    num_accepted_tokens=cuda(c.accepted), parent_indices=cuda(parent), **gate, **kw)
    torch.cuda.synchronize()
    return out.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.tree
def test_a_tree_on_cuda_matches_the_cpu_backend(rng):
    c = Case(rng, T=6, K=64, V=64, gate="softplus", beta_is_logit=True)
    parent = random_trees(rng, c.B, c.T)
    cpu_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(*inputs(c), initial_state=cpu_pool, **spec_decode(c, parent_indices=parent),
                                     **c.kwargs())
    kdagraph.clear_device_errors("cuda")
    pool = cuda(c.pool)
    got = cuda_call(c, pool, parent.astype(np.int64))
    assert rel_error(got, want) <= 1e-5
    assert rel_error(pool.cpu().numpy(), cpu_pool) <= 1e-5
    assert kdagraph.device_errors("cuda")["count"] == 0


@pytest.mark.gpu
@pytest.mark.tree
def test_a_bad_parent_in_device_memory_is_read_as_the_chains_and_recorded(rng):
    c = Case(rng, T=6, K=64, V=64)  # row 1 padded, row 0 real
    clamped = random_trees(rng, c.B, c.T)
    clamped[0, 4] = 3
    bad = clamped.copy()
    bad[0, 4] = 7
    runs = []
    for parent in (clamped, bad):
        kdagraph.clear_device_errors("cuda")
        pool = cuda(c.pool)
        runs.append((cuda_call(c, pool, parent), pool.cpu().numpy(), kdagraph.device_errors("cuda")))
    assert same_bits(runs[1][0], runs[0][0]) and same_bits(runs[1][1], runs[0][1])
    assert runs[0][2]["count"] == 0
    recorded = runs[1][2]
    assert recorded["count"] >= 1 and recorded["code"] == "parent_out_of_range"
    assert (recorded["row"], recorded["value"]) == (0, 7)


@pytest.mark.gpu
@pytest.mark.tree
def test_more_than_the_cuda_trees_tokens_is_refused_by_name(rng):
    c = Case(rng, T=17, K=64, V=64)
    pool = cuda(c.pool)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        cuda_call(c, pool, chains(c.B, c.T))
    assert e.value.argument == "parent_indices"
    assert torch.equal(pool.cpu(), torch.from_numpy(c.pool))
