"""flash-linear-attention's call forms through recurrent_kda (docs/python.md, *What engines really pass*), with
torch CPU tensors as FLA passes them (cu_seqlens int64):

- the plain form: T tokens from initial_state[b], no ssm_state_indices, only the final state written back
  (in place, returned) with output_final_state=True and nothing written without it;
- cu_seqlens of different lengths (FLA's varlen form): each sequence as if called alone, bitwise, on views
  of the caller's arrays; with FLA's rows (sequence b from row b) and with spec-decode indices;
- fp16 and bf16 q, k, v, with g and beta in that dtype or in fp32 beside it (vLLM's decode), fp32 state;
- FLA's default state layout [N, HV, K, V] (state_v_first=False, or transpose_state_layout=False) in those
  forms, numpy and torch: bitwise the call on the V-major state, K != V and K = V; refused for a pool.

Against the fp64 recurrence of docs/math.md (helpers.reference_verify) within the bar FLA's own tests set
(tests/ops/test_kda.py: RMS error / RMS of the reference below 0.005) and, in fp32, within 1e-5."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kdagraph
from helpers import FLA_RATIO, expect_refused_unchanged, fla_err_ratio, reference_verify, rel_error


@pytest.fixture(autouse=True)
def clear_cpu_error_word():
    """These calls make the CPU backend record clamped lengths: the word is cleared before each test and
    after it, so that no other test reads what these recorded."""
    kdagraph.clear_device_errors("cpu")
    yield
    kdagraph.clear_device_errors("cpu")

# FLA's test_fused_recurrent shapes (B, T, H, D, scale, gate_logit_normalizer, use_qk_l2norm_in_kernel),
# shortened in T to keep the CPU suite quick, and grouped value heads (HV = 2 H) beside them.
PLAIN = [(1, 64, 1, 64, 1.0, 1, False, 1), (2, 37, 3, 60, 1.0, 1, False, 1), (3, 29, 4, 100, 0.1, 1, True, 1),
         (2, 16, 2, 32, 0.1, 10, True, 2)]


def fla_inputs(gen, B, T, H, D, normalizer, l2norm_in_kernel, G=1, V=None):
    """FLA's test inputs: q, k, v uniform in [0, 1), g = logsigmoid(randn) / normalizer, beta a sigmoid,
    h0 randn; q and k normalized by the caller unless the kernel does it. K = D, V = D unless given; h0
    in kdagraph's [V, K]."""
    HV, V = H * G, V or D
    q, k = torch.rand(B, T, H, D, generator=gen), torch.rand(B, T, H, D, generator=gen)
    if not l2norm_in_kernel:
        q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    v = torch.rand(B, T, HV, V, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, HV, D, generator=gen)) / normalizer
    beta = torch.randn(B, T, HV, generator=gen).sigmoid()
    h0 = torch.randn(B, HV, V, D, generator=gen)
    return q, k, v, g, beta, h0


def reference(q, k, v, g, beta, h0, *, scale, l2norm=True):
    """fp64 (outputs [B, T, HV, V], final states [B, HV, V, K]) of docs/math.md, one sequence per row."""
    outs, finals = [], []
    for b in range(q.shape[0]):
        o, posts = reference_verify(h0[b].numpy(), *(x[b].numpy() for x in (q, k, v, g, beta)), l2norm=l2norm,
                                    scale=scale)
        outs.append(o)
        finals.append(posts[-1])
    return np.stack(outs), np.stack(finals)


def close(name, got, want):
    got = got.numpy() if isinstance(got, torch.Tensor) else got
    assert fla_err_ratio(want, got) < FLA_RATIO, f"{name}: beyond FLA's own bar"
    assert rel_error(got, want) <= 1e-5, f"{name}: fp32 against fp64"


@pytest.mark.parametrize("B,T,H,D,scale,normalizer,l2norm_in_kernel,G", PLAIN,
                         ids=[f"B{c[0]}-T{c[1]}-H{c[2]}-D{c[3]}-scale{c[4]}-G{c[7]}" for c in PLAIN])
def test_the_plain_form_writes_only_the_final_state_back(B, T, H, D, scale, normalizer, l2norm_in_kernel, G):
    gen = torch.Generator().manual_seed(42)
    q, k, v, g, beta, h0 = fla_inputs(gen, B, T, H, D, normalizer, l2norm_in_kernel, G)
    want_o, want_final = reference(q, k, v, g, beta, h0, scale=scale, l2norm=l2norm_in_kernel)
    kw = dict(scale=scale, use_qk_l2norm_in_kernel=l2norm_in_kernel)

    state = h0.clone()
    address = state.data_ptr()
    o, final = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=state, output_final_state=True, **kw)
    assert final is state and state.data_ptr() == address, "the final state is written back in place and returned"
    close("o", o, want_o)
    close("final state", final, want_final)

    state = h0.clone()
    o2, final = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=state, **kw)
    assert final is None and torch.equal(state, h0), "without output_final_state nothing is written"
    assert torch.equal(o2, o)

    o3, final = kdagraph.recurrent_kda(q, k, v, g, beta, output_final_state=True, **kw)  # FLA: no state is zeros
    want_o, want_final = reference(q, k, v, g, beta, torch.zeros_like(h0), scale=scale, l2norm=l2norm_in_kernel)
    assert final.shape == h0.shape and final.dtype == torch.float32
    close("o from zeros", o3, want_o)
    close("final state from zeros", final, want_final)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_sixteen_bit_io_with_its_own_or_fp32_gates(dtype):
    """FLA's test_fused_recurrent runs fp16 and bf16 inputs; vLLM's decode passes g and beta in fp32 beside
    them. Against fp64 of the rounded inputs within FLA's bar; fp32 gates holding the 16-bit gates' values
    give the same bits as those gates, and fp32 gates of full precision still stay within the bar."""
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(1 << 31)))
    B, T, H, D, G = 2, 9, 2, 32, 2
    q, k, v, g, beta, h0 = fla_inputs(gen, B, T, H, D, 1, True, G)
    low = [x.to(dtype) for x in (q, k, v, g, beta)]

    def run(q_, k_, v_, g_, beta_):
        state = h0.clone()
        o, final = kdagraph.recurrent_kda(q_, k_, v_, g_, beta_, initial_state=state, output_final_state=True,
                                          scale=0.1, use_qk_l2norm_in_kernel=True)
        assert o.dtype == dtype and final.dtype == torch.float32
        return o, final

    o, final = run(*low)
    want_o, want_final = reference(*(x.float() for x in low), h0, scale=0.1)
    assert fla_err_ratio(want_o, o.float().numpy()) < FLA_RATIO and fla_err_ratio(want_final, final.numpy()) < FLA_RATIO

    def same(a, b):
        return a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))

    o32, final32 = run(*low[:3], low[3].float(), low[4].float())
    assert same(o32, o) and same(final32, final), "fp32 gates of the same values: the same bits"

    o_full, final_full = run(*low[:3], g, beta)
    want_o, want_final = reference(*(x.float() for x in low[:3]), g, beta, h0, scale=0.1)
    assert fla_err_ratio(want_o, o_full.float().numpy()) < FLA_RATIO
    assert fla_err_ratio(want_final, final_full.numpy()) < FLA_RATIO
    assert not same(final_full, final), "full-precision gates change the state"

    h0_16 = h0.to(torch.float16)  # an fp16 state (docs/low_precision.md): rounded to nearest at the final store
    state16 = h0_16.clone()
    o16, final16 = kdagraph.recurrent_kda(*low, initial_state=state16, output_final_state=True, scale=0.1)
    want_o, want_final = reference(*(x.float() for x in low), h0_16.float(), scale=0.1)
    assert final16 is state16 and final16.dtype == torch.float16
    assert fla_err_ratio(want_o, o16.float().numpy()) < FLA_RATIO
    assert fla_err_ratio(want_final, final16.float().numpy()) < FLA_RATIO

    with pytest.raises(kdagraph.InvalidArgument) as e:  # g in fp32, beta not: refused by name
        kdagraph.recurrent_kda(*low[:3], g, low[4], initial_state=h0.clone(), output_final_state=True)
    assert e.value.argument in ("g", "beta") and "float32" in str(e.value)


def test_the_verifier_takes_a_state_rounding_and_names_a_bad_one():
    """docs/low_precision.md: Verifier(rounding=...) over a 16-bit state; another name is refused by name."""
    kw = dict(layers=1, heads=1, value_heads=2, head_k=16, head_v=16, slots=4, scratch_steps=4, max_rows=2, tokens=2)
    for state in ("bfloat16", "float16"):
        kdagraph.Verifier(state_dtype=state, rounding="stochastic", **kw)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.Verifier(state_dtype="float16", rounding="up", **kw)
    assert e.value.argument == "rounding" and "stochastic" in str(e.value)


def varlen_inputs(gen, lengths, H=2, G=2, D=32, rows=None):
    total = int(sum(lengths))
    q, k, v, g, beta, _ = fla_inputs(gen, 1, total, H, D, 1, True, G)
    h0 = torch.randn(rows if rows is not None else len(lengths), H * G, D, D, generator=gen)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
    return q, k, v, g, beta, h0, cu


# Lengths with runs of one length (one launch each), a single token, and an empty sequence.
LENGTHS = [[15, 25, 1, 23], [3, 3, 3, 5, 0, 5, 1, 1], [7, 4]]


@pytest.mark.parametrize("lengths", LENGTHS, ids=["-".join(map(str, x)) for x in LENGTHS])
def test_sequences_of_different_lengths_run_as_each_alone(lengths):
    """FLA's varlen form: sequence b is tokens [cu[b], cu[b + 1]), runs from initial_state[b] and leaves
    its final state there; the same as calling it alone, bitwise, and the fp64 recurrence within FLA's
    bar. The output is the caller's array, written through views; an empty sequence's row is unchanged."""
    gen = torch.Generator().manual_seed(7)
    q, k, v, g, beta, h0, cu = varlen_inputs(gen, lengths)
    state = h0.clone()
    out = torch.full(v.shape, float("nan"))
    got, final = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                        cu_seqlens=cu, output=out)
    assert got is out and final is state
    for b, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        if s == e:
            assert torch.equal(state[b], h0[b]), f"sequence {b} has no tokens: its state stays"
            continue
        alone = h0[b:b + 1].clone()
        o, _ = kdagraph.recurrent_kda(*(x[:, s:e] for x in (q, k, v, g, beta)), initial_state=alone,
                                      output_final_state=True)
        assert torch.equal(out[:, s:e], o), f"sequence {b}: outputs of the varlen call and of the call alone"
        assert torch.equal(state[b], alone[0]), f"sequence {b}: final states"
        want_o, want_final = reference(*(x[:, s:e] for x in (q, k, v, g, beta)), h0[b:b + 1], scale=None)
        close(f"sequence {b} o", o, want_o)
        close(f"sequence {b} final state", alone, want_final)

    state = h0.clone()
    again, final = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=state, cu_seqlens=cu)
    assert final is None and torch.equal(state, h0), "without output_final_state no state is written"
    assert torch.equal(again, out)


def test_sequences_of_different_lengths_with_spec_decode_indices(rng):
    """ssm_state_indices [B, W >= the longest] (sequence b uses its first T_b columns) and
    num_accepted_tokens, lengths outside [1, T_b] clamped (FlashInfer's rule): each sequence as called
    alone with its own columns and the clamped length, bitwise, and the fp64 recurrence from its seed."""
    lengths, W, HV, D = [2, 4, 4, 3], 5, 4, 16
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    q, k, v, g, beta, _, cu = varlen_inputs(gen, lengths, H=2, G=2, D=D)
    N = 3 * W * len(lengths)
    pool = torch.randn(N, HV, D, D, generator=gen)
    indices = torch.tensor(rng.permutation(N)[: len(lengths) * W].reshape(len(lengths), W), dtype=torch.int32)
    accepted = torch.tensor([0, 4, 7, 2], dtype=torch.int32)  # 0 and 7 (> T_b = 4) are clamped to 1 and 4
    before = pool.clone()
    kdagraph.clear_device_errors("cpu")
    out, _ = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, ssm_state_indices=indices,
                                    num_accepted_tokens=accepted)
    errors = kdagraph.device_errors("cpu")
    # Each run of sequences is its own launch: the word's row is the row in that launch (here 0, both alone).
    assert errors["code"] == "accept_out_of_range" and errors["value"] in (0, 7) and errors["count"] >= 2
    for b, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        T = e - s
        alone = before.clone()
        a = min(max(int(accepted[b]), 1), T)
        o, _ = kdagraph.recurrent_kda(*(x[:, s:e].reshape((1, T) + x.shape[2:]) for x in (q, k, v, g, beta)),
                                      initial_state=alone, ssm_state_indices=indices[b:b + 1, :T].clone(),
                                      num_accepted_tokens=torch.tensor([a], dtype=torch.int32))
        assert torch.equal(out[:, s:e], o), f"sequence {b}"
        rows = indices[b, :T].tolist()
        assert torch.equal(pool[rows], alone[rows]), f"sequence {b}: its post-states"
        want_o, want_posts = reference_verify(before[indices[b, a - 1]].numpy(),
                                              *(x[0, s:e].numpy() for x in (q, k, v, g, beta)))
        close(f"sequence {b} o", o[0], want_o)
        close(f"sequence {b} post-states", pool[rows], want_posts)
    untouched = sorted(set(range(N)) - {r for b, T in enumerate(lengths) for r in indices[b, :T].tolist()})
    assert torch.equal(pool[untouched], before[untouched]), "rows no sequence names stay (columns past T_b too)"


def test_what_a_varlen_call_cannot_do_is_refused_before_any_sequence_runs(rng):
    lengths, D = [2, 4, 3], 16
    gen = torch.Generator().manual_seed(3)
    q, k, v, g, beta, h0, cu = varlen_inputs(gen, lengths, H=1, G=2, D=D, rows=20)
    io = (q, k, v, g, beta)
    indices = torch.arange(3 * 4, dtype=torch.int32).reshape(3, 4)
    shared = indices.clone()
    shared[2, 2] = int(indices[0, 1])  # sequence 2 writes a row sequence 0 also writes
    seeded = indices.clone()
    seeded[2, 1] = int(indices[1, 0])  # sequence 2 writes the row sequence 1 seeds from
    calls = {
        "ssm_state_indices": [dict(ssm_state_indices=shared), dict(ssm_state_indices=seeded),
                              dict(ssm_state_indices=indices[:, :3].clone()),
                              dict(ssm_state_indices=indices[:, 0].clone()),
                              dict(ssm_state_indices=indices.to(torch.int16))],
        "num_spec_tokens": [dict(ssm_state_indices=indices, num_spec_tokens=3)],
        "cu_seqlens": [dict(cu_seqlens=torch.tensor([0, 4, 2, 9])), dict(cu_seqlens=torch.tensor([0, 2, 6, 8])),
                       dict(cu_seqlens=torch.tensor([0, 2.0, 6, 9]))],
        "initial_state": [dict(initial_state=h0[:2].clone())],
        "parent_indices": [dict(parent_indices=torch.full((3, 4), -1, dtype=torch.int32))],
        "beta": [dict(beta=beta[:, :-1].clone())],
    }
    state, out = h0.clone(), torch.zeros(v.shape)
    for argument, variants in calls.items():
        for kw in variants:
            kw = {"cu_seqlens": cu, "initial_state": state, "output": out, "output_final_state": True, **kw}
            args = [kw.pop(n) if n in kw else x for n, x in zip(("q", "k", "v", "g", "beta"), io)]
            expect_refused_unchanged(lambda: kdagraph.recurrent_kda(*args, **kw), argument, state=state.numpy(),
                                     output=out.numpy())


def test_flas_k_v_state_layout_is_refused_by_name_unless_asked_for():
    """FLA keeps its state [N, HV, K, V]; kdagraph's is V-major [N, HV, V, K] (docs/math.md). Where K != V
    the layout shows in the shape, and the refusal names it and the keyword that takes it (where K = V
    only the caller knows: state_v_first says)."""
    gen = torch.Generator().manual_seed(5)
    B, T, H, K, V = 2, 3, 2, 16, 8
    q, k = torch.rand(B, T, H, K, generator=gen), torch.rand(B, T, H, K, generator=gen)
    v, g, beta = torch.rand(B, T, H, V, generator=gen), -torch.rand(B, T, H, K, generator=gen), torch.rand(B, T, H)
    fla_state = torch.randn(B, H, K, V, generator=gen)
    with pytest.raises(kdagraph.InvalidArgument, match=r"FLA's \[N, HV, K, V\] layout") as e:
        kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=fla_state, output_final_state=True)
    assert e.value.argument == "initial_state" and "[2, 2, 16, 8]" in str(e.value)
    assert "state_v_first=False" in str(e.value)


# state_v_first=False: FLA's default [N, HV, K, V] state. Where K != V the layout shows in the shapes;
# where K = V a state read untransposed would pass every shape check.
KV = [(32, 64), (32, 32)]


def same_bits(a, b):
    a, b = np.ascontiguousarray(np.asarray(a)), np.ascontiguousarray(np.asarray(b))
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("K,V", KV, ids=[f"K{k}-V{v}" for k, v in KV])
@pytest.mark.parametrize("lengths", [None, [4, 1, 6]], ids=["dense", "varlen"])
def test_flas_k_v_state_runs_as_its_transpose(rng, framework, K, V, lengths):
    """state_v_first=False, or its old spelling transpose_state_layout=False, in FLA's plain and varlen
    forms: outputs and states bitwise those of the same call on the V-major state the test transposes,
    the final state written back into the caller's array (returned), a row the call does not read
    untouched; the fp64 recurrence within FLA's bar; without output_final_state nothing is written; with
    no state, zeros, returned in FLA's layout."""
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    B, T = (3, 5) if lengths is None else (len(lengths), sum(lengths))
    q, k, v, g, beta, _ = fla_inputs(gen, 1 if lengths else B, T, 2, K, 1, True, 2, V=V)
    h0 = torch.randn(B + 1, 4, V, K, generator=gen)  # V-major; the call reads rows [0, B)
    as_framework = (lambda x: x.numpy()) if framework == "numpy" else (lambda x: x)
    io = [as_framework(x) for x in (q, k, v, g, beta)]
    cu = None if lengths is None else as_framework(torch.tensor(np.cumsum([0] + lengths)))
    fla_layout = lambda x: as_framework(x.transpose(-1, -2).contiguous())

    v_major = as_framework(h0.clone())
    want_o, _ = kdagraph.recurrent_kda(*io, initial_state=v_major, output_final_state=True, cu_seqlens=cu)
    for spelling in ("state_v_first", "transpose_state_layout"):
        state = fla_layout(h0)
        o, final = kdagraph.recurrent_kda(*io, initial_state=state, output_final_state=True, cu_seqlens=cu,
                                          **{spelling: False})
        assert final is state, "the final state is the caller's array"
        assert same_bits(o, want_o), f"{spelling}: outputs"
        assert same_bits(state, np.swapaxes(np.asarray(v_major), -1, -2)), f"{spelling}: states"
        assert same_bits(state[B], h0[B].transpose(-1, -2)), "a row the call does not read"

    if lengths is None:
        ref_o, ref_final = reference(q, k, v, g, beta, h0[:B], scale=None)
    else:
        bounds = np.cumsum([0] + lengths)
        parts = [reference(*(x[:, s:e] for x in (q, k, v, g, beta)), h0[b:b + 1], scale=None)
                 for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
        ref_o, ref_final = np.concatenate([o for o, _ in parts], axis=1), np.concatenate([f for _, f in parts])
    close("o", np.asarray(o), ref_o)
    close("final state", np.swapaxes(np.asarray(state)[:B], -1, -2), ref_final)

    state = fla_layout(h0)
    o, final = kdagraph.recurrent_kda(*io, initial_state=state, cu_seqlens=cu, state_v_first=False)
    assert final is None and same_bits(state, h0.transpose(-1, -2)), "without output_final_state nothing is written"
    assert same_bits(o, want_o)

    o, final = kdagraph.recurrent_kda(*io, output_final_state=True, cu_seqlens=cu, state_v_first=False)
    zeros = as_framework(torch.zeros(B, 4, V, K))
    want_o, _ = kdagraph.recurrent_kda(*io, initial_state=zeros, output_final_state=True, cu_seqlens=cu)
    assert same_bits(o, want_o) and same_bits(final, np.swapaxes(np.asarray(zeros), -1, -2)), "from zeros"


def test_flas_k_v_state_is_refused_for_a_pool_and_beside_its_old_spelling(rng):
    """A state pool is updated in place and never copied: every pool form refuses state_v_first=False
    (either spelling) by name. Both spellings at once are refused naming the old one, as FLA refuses
    them. Each with nothing changed."""
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    B, T, K, V = 2, 3, 16, 32
    q, k, v, g, beta, _ = (x.numpy() for x in fla_inputs(gen, B, T, 1, K, 1, True, 2, V=V))
    pool = torch.randn(B * T, 2, K, V, generator=gen).numpy()
    source = pool.copy()
    rows = np.arange(B * T, dtype=np.int32).reshape(B, T)
    out = np.zeros(v.shape, np.float32)
    k_major = dict(state_v_first=False)
    calls = {
        "state_v_first": [dict(k_major, ssm_state_indices=rows), dict(k_major, num_spec_tokens=T - 1),
                          dict(k_major, initial_state_source=source, initial_state_indices=rows[:, 0].copy()),
                          dict(k_major, disable_state_update=True),
                          dict(transpose_state_layout=False, ssm_state_indices=rows)],
        "transpose_state_layout": [dict(state_v_first=False, transpose_state_layout=False),
                                   dict(state_v_first=True, transpose_state_layout=True)],
    }
    for argument, variants in calls.items():
        for kw in variants:
            expect_refused_unchanged(lambda: kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=pool, output=out,
                                                                    **kw),
                                     argument, pool=pool, source=source, output=out)


@pytest.mark.parametrize("logit", [True, False])
def test_allow_neg_eigval_doubles_a_logits_sigmoid(logit):
    """FLA's allow_neg_eigval: beta = 2 * sigmoid(beta) "only together with use_beta_sigmoid_in_kernel"
    (kdagraph's beta_is_logit); without a logit it changes nothing, as in FLA."""
    gen = torch.Generator().manual_seed(13)
    q, k, v, g, _, h0 = fla_inputs(gen, 2, 9, 2, 32, 1, True, 2)
    beta = torch.randn(2, 9, 4, generator=gen) if logit else torch.rand(2, 9, 4, generator=gen)
    state = h0.clone()
    o, final = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                      beta_is_logit=logit, allow_neg_eigval=True)
    if logit:
        want_o, want_final = reference(q, k, v, g, 2 * torch.sigmoid(beta.double()).float(), h0, scale=None)
        assert (2 * torch.sigmoid(beta) > 1).any(), "some betas above 1: the negative eigenvalues FLA allows"
        close("o", o, want_o)
        close("final state", final, want_final)
    else:
        plain_state = h0.clone()
        want, _ = kdagraph.recurrent_kda(q, k, v, g, beta, initial_state=plain_state, output_final_state=True)
        assert torch.equal(o, want) and torch.equal(state, plain_state)


def test_split_qkv_views_run_in_place_in_the_packed_forms():
    """SGLang splits q, k and v from one projection: views whose last dim is contiguous and whose token
    stride is the projection's. In the packed forms (one length, and FLA's varlen) they stay views of
    that memory, bitwise the call on contiguous copies."""
    gen = torch.Generator().manual_seed(17)
    lengths, H, HV, D = [5, 5, 2, 6], 2, 4, 16
    total = sum(lengths)
    qkv = torch.rand(1, total, (2 * H + HV) * D, generator=gen)
    q, k, v = (x.unflatten(-1, (-1, D)) for x in qkv.split([H * D, H * D, HV * D], dim=-1))
    assert not q.is_contiguous() and q.data_ptr() == qkv.data_ptr()
    g = F.logsigmoid(torch.randn(1, total, HV, D, generator=gen))
    beta = torch.rand(1, total, HV, generator=gen)
    h0 = torch.randn(len(lengths), HV, D, D, generator=gen)
    for cu in (torch.tensor([0, 5, 10, 12, 18]), torch.tensor([0, 5, 10])):
        n = len(cu) - 1
        used = int(cu[-1])
        args = [x[:, :used] for x in (q, k, v, g, beta)]
        states = [h0[:n].clone(), h0[:n].clone()]
        outs = []
        for i, inputs in enumerate((args, [x.contiguous() for x in args])):
            o, _ = kdagraph.recurrent_kda(*inputs, initial_state=states[i], output_final_state=True, cu_seqlens=cu)
            outs.append(o)
        assert torch.equal(outs[0], outs[1]) and torch.equal(states[0], states[1])
