"""The layouts engines hand the drop-ins (docs/ops.md, docs/python.md): state pools whose slot stride exceeds a state
(SGLang's per-slot envelopes), used in place through the library's views, and int64 index arrays (torch's
default integer type), taken on the host as int32 copies; what would need a copy of a state is refused
by name, saying which stride is wrong. numpy and torch CPU tensors alike."""

import ml_dtypes
import numpy as np
import pytest
import torch

import kdagraph
from helpers import expect_refused_unchanged
from test_recurrent_kda import Case
from test_short_conv import ConvCase

BF16 = ml_dtypes.bfloat16


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def envelope_pool(rng, c, dtype, spare_elems, offset_elems):
    """SGLang's per-slot envelopes: [N, E] with each slot's state [HV, V, K] at elements [offset, offset +
    HV V K) of its envelope, the other elements random. Returns (envelope, the [N, HV, V, K] view)."""
    row = c.HV * c.V * c.K
    envelope = rng.uniform(-9, 9, (c.N, row + spare_elems)).astype(dtype)
    view = envelope[:, offset_elems:offset_elems + row].reshape(c.N, c.HV, c.V, c.K)
    assert np.shares_memory(view, envelope), "a view, not a copy"
    view[...] = c.pool
    return envelope, view


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("state", [np.float32, BF16], ids=["f32", "bf16"])
def test_an_sglang_envelope_view_is_updated_in_place_and_nothing_else(rng, state, framework):
    """A [N, HV, V, K] view into a larger per-slot envelope: its rows take the compact pool's results bit
    for bit, and every other byte of the envelopes stays as it was."""
    c = Case(rng, state=state)
    compact = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=compact, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted)
    per16 = 16 // np.dtype(state).itemsize
    envelope, view = envelope_pool(rng, c, state, spare_elems=5 * per16, offset_elems=2 * per16)
    before = envelope.copy()
    pool = view if framework == "numpy" else torch.from_numpy(view.view(np.uint16) if state == BF16 else view)
    if state == BF16 and framework == "torch":
        pool = pool.view(torch.bfloat16)
    out, final = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, output_final_state=True,
                                        ssm_state_indices=c.indices, num_accepted_tokens=c.accepted)
    assert final is pool
    assert same_bits(out, want) and same_bits(view, compact), "the envelope's states are the compact pool's"
    row = c.HV * c.V * c.K
    outside = np.ones(envelope.shape, bool)
    outside[:, 2 * per16:2 * per16 + row] = False
    assert same_bits(envelope[outside], before[outside]), "bytes outside the states changed"
    assert not same_bits(envelope, before), "the states were written"


def test_a_strided_source_is_read_in_place(rng):
    c = Case(rng)
    source = rng.uniform(-1, 1, (5, c.HV, c.V, c.K)).astype(np.float32)
    seed_rows = rng.permutation(5)[: c.B].astype(np.int32)
    pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=c.indices,
                                     initial_state_source=source, initial_state_indices=seed_rows)
    row = c.HV * c.V * c.K
    envelope = rng.uniform(-9, 9, (5, row + 12)).astype(np.float32)
    envelope[:, 4:4 + row] = source.reshape(5, row)
    before = envelope.copy()
    strided = torch.from_numpy(envelope)[:, 4:4 + row].view(5, c.HV, c.V, c.K)
    pool = torch.from_numpy(c.pool.copy())
    got, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool, ssm_state_indices=c.indices,
                                    initial_state_source=strided, initial_state_indices=seed_rows)
    assert same_bits(got, want) and same_bits(envelope, before)


def test_a_strided_conv_state_is_updated_in_place(rng):
    c = ConvCase(rng, W=4, C=37, S=5, T=3)
    columns, C = c.W - 2 + c.S, c.C
    envelope = rng.uniform(-9, 9, (c.N, columns * C + 7)).astype(np.float32)
    envelope[:, 3:3 + columns * C] = c.state.reshape(c.N, -1)
    before = envelope.copy()
    state = torch.from_numpy(envelope)[:, 3:3 + columns * C].view(c.N, columns, C)
    y = kdagraph.short_conv(torch.from_numpy(c.x), state, torch.from_numpy(c.weight), torch.from_numpy(c.bias),
                            state_indices=torch.from_numpy(c.indices), num_accepted_tokens=torch.from_numpy(c.accepted))
    want = c.run()
    assert same_bits(y.numpy(), want) and same_bits(state.numpy(), c.state)
    assert same_bits(envelope[:, :3], before[:, :3]) and same_bits(envelope[:, 3 + columns * C:], before[:, 3 + columns * C:])


def test_strides_that_would_need_a_copy_are_refused_naming_the_stride(rng):
    c = Case(rng)
    row = c.HV * c.V * c.K
    odd = np.zeros((c.N, row + 1), np.float32)[:, :row].reshape(c.N, c.HV, c.V, c.K)  # 4 bytes past a row
    overlapping = np.lib.stride_tricks.as_strided(c.pool, shape=c.pool.shape,
                                                  strides=(row * 2,) + c.pool.strides[1:])  # half a row apart
    inner = np.zeros((c.N, c.HV, c.V, 2 * c.K), np.float32)[..., ::2]
    kw = dict(ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, output=c.output)
    for bad, says in [(odd, "a multiple of 16 bytes"), (overlapping, "holds one row"), (inner, "dimension 3")]:
        expect_refused_unchanged(lambda: kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=bad, **kw),
                                 "initial_state", pool=c.pool, output=c.output)
        with pytest.raises(kdagraph.InvalidArgument, match=says):
            kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=bad, **kw)
    # q, k and v are read through their strides but for the last dimension; the other inputs, the outputs
    # and the ops' storage stay C-contiguous. What would need a copy is refused, naming its dimension.
    gapped_q = np.zeros((c.B, c.T, c.H, 2 * c.K), np.float32)[..., ::2]
    with pytest.raises(kdagraph.InvalidArgument, match="dimension 3") as e:
        kdagraph.recurrent_kda(gapped_q, c.k, c.v, c.g, c.beta, initial_state=c.pool, **kw)
    assert e.value.argument == "q"
    wide_g = np.zeros((c.B, c.T, c.HV, 2 * c.K), np.float32)[..., : c.K]
    with pytest.raises(kdagraph.InvalidArgument, match="dimension 2") as e:
        kdagraph.recurrent_kda(c.q, c.k, c.v, wide_g, c.beta, initial_state=c.pool, **kw)
    assert e.value.argument == "g"
    spec = kdagraph.RoundSpec(layers=1, heads=c.H, value_heads=c.HV, head_k=c.K, head_v=c.V, tokens=c.T)
    strided_pool = np.zeros((1, c.N, row + 4), np.float32)[:, :, :row].reshape(1, c.N, c.HV, c.V, c.K)
    with pytest.raises(kdagraph.InvalidArgument, match="dimension 1") as e:
        kdagraph.SlotStorage(spec, pool=strided_pool, accept_len=np.zeros(c.N, np.int32), scratch_steps=c.T,
                             scratch=np.zeros((1, c.N * c.T, c.HV, c.V, c.K), np.float32))
    assert e.value.argument == "pool"


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_int64_indices_give_the_int32_results_on_the_host(rng, framework):
    """As FlashInfer takes them: converted to int32 (on the host there is no capture to hide a copy in;
    on CUDA inside a capture they are refused, test_gpu.py)."""
    wide = (lambda a: a.astype(np.int64)) if framework == "numpy" else (lambda a: torch.from_numpy(a.astype(np.int64)))
    c = Case(rng, gate="softplus")
    source = rng.uniform(-1, 1, (5, c.HV, c.V, c.K)).astype(np.float32)
    seed_rows = rng.permutation(5)[: c.B].astype(np.int32)
    for kw in (dict(num_accepted_tokens=c.accepted), dict(initial_state_source=source, initial_state_indices=seed_rows)):
        pool32, pool64 = c.pool.copy(), c.pool.copy()
        want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool32, ssm_state_indices=c.indices,
                                         **kw, **c.kwargs())
        kw64 = {k: (wide(v) if k in ("num_accepted_tokens", "initial_state_indices") else v) for k, v in kw.items()}
        got, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=pool64,
                                        ssm_state_indices=wide(c.indices), **kw64, **c.kwargs())
        assert same_bits(got, want) and same_bits(pool64, pool32)

    cc = ConvCase(rng, W=3, C=20, S=4, T=2)
    state32 = cc.state.copy()
    want = kdagraph.short_conv(cc.x, state32, cc.weight, state_indices=cc.indices, num_accepted_tokens=cc.accepted)
    got = kdagraph.short_conv(cc.x, cc.state, cc.weight, state_indices=wide(cc.indices),
                              num_accepted_tokens=wide(cc.accepted))
    assert same_bits(got, want) and same_bits(cc.state, state32)

    rows, acc = kdagraph.build_fused_accept_indices(slots=wide(np.array([2, -1, 0], np.int32)), scratch_steps=4,
                                                    draft_token_num=3, accept_lens_pool=wide(np.array([3, 1, 2], np.int32)))
    assert np.asarray(rows).tolist() == [[8, 9, 10], [-1, -1, -1], [0, 1, 2]] and np.asarray(acc).tolist() == [2, 3, 3]
    assert str(rows.dtype).endswith("int32") and type(rows).__module__.split(".")[0] == framework
