"""The CUDA backend from Python: skipped (honestly) without a GPU; torch, a test dependency, makes the
device arrays. recurrent_kda on CUDA tensors against the CPU backend within the kernels' tolerance, on
torch's current stream, a GraphRunner captured on a torch stream against the host engine, int64 indices
on both sides of a capture, and a slot-strided state pool."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import rel_error
from test_recurrent_kda import Case

pytestmark = pytest.mark.gpu


def test_recurrent_kda_on_cuda_matches_the_cpu_backend(rng):
    c = Case(rng, K=64, V=64, H=2, HV=4, gate="softplus", beta_is_logit=True)
    cpu_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=cpu_pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted, **c.kwargs())
    d = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    pool = d(c.pool)
    kw = {k: (d(v) if isinstance(v, np.ndarray) else v) for k, v in c.kwargs().items()}
    kdagraph.clear_device_errors("cuda")  # what a test before this one in the process recorded is not ours
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out, _ = kdagraph.recurrent_kda(d(c.q), d(c.k), d(c.v), d(c.g), d(c.beta), initial_state=pool,
                                        ssm_state_indices=d(c.indices), num_accepted_tokens=d(c.accepted), **kw)
    stream.synchronize()
    assert rel_error(out.cpu().numpy(), want) <= 1e-5
    assert rel_error(pool.cpu().numpy(), cpu_pool) <= 1e-5
    assert kdagraph.device_errors("cuda")["count"] == 0


def test_graph_runner_on_cuda_matches_the_host_engine(rng):
    from kdagraph._kdagraph import _reference as ref

    L, H, HV, K, T, S, P, N = 2, 2, 2, 64, 3, 4, 4, 2
    seed, rate = int(rng.integers(1, 2**62)), 0.7
    opts = dict(l2norm_qk=True, gate="softplus", beta_is_logit=True)
    outputs, _, _ = ref.run_host_engine(backend="cpu", layers=L, heads=H, value_heads=HV, head_k=K, head_v=K,
                                        tokens=T, slots=P, scratch_steps=S, batch=N, mode="fused-accept",
                                        accept_rate=rate, seed=seed, rounds=6, **opts)
    v = kdagraph.Verifier(backend="cuda", layers=L, heads=H, value_heads=HV, head_k=K, head_v=K, slots=P,
                          scratch_steps=S, max_rows=N, tokens=T, **opts)
    z = lambda *shape: torch.zeros(shape, dtype=torch.float32, device="cuda")
    inputs = []
    for layer in range(L):
        a_log, dt_bias = ref.synthetic_gate(seed, layer, HV, K)
        inputs.append(dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, K), g=z(N, T, HV, K), beta=z(N, T, HV),
                           o=z(N, T, HV, K), A_log=torch.from_numpy(a_log).cuda(), dt_bias=torch.from_numpy(dt_bias).cuda()))
    runner = kdagraph.GraphRunner(v, inputs)
    stream = torch.cuda.Stream()
    for slot in range(N):
        v.prefill(slot, ref.synthetic_state(seed, slot, L, HV, K, K), stream=stream)
    runner.capture(stream=stream)
    runner.set_batch(list(range(N)), stream=stream)
    accepted = torch.zeros(N, dtype=torch.int32, device="cuda")
    stream.wait_stream(torch.cuda.current_stream())  # the zeros above, before the round's copies on `stream`
    for r in range(6):
        with torch.cuda.stream(stream):
            for layer in range(L):
                for name, x in ref.synthetic_inputs(seed, r, list(range(N)), layer, T, H, HV, K, K, True, True).items():
                    inputs[layer][name].copy_(torch.from_numpy(x))
            runner.run_round()
            accepted.copy_(torch.tensor([ref.synthetic_accept_length(seed, r, s, T, rate) for s in range(N)], dtype=torch.int32))
            runner.accept(accepted)
        stream.synchronize()
        got = torch.stack([i["o"] for i in inputs]).cpu().numpy()
        assert rel_error(got, outputs[r]) <= 1e-5, f"round {r}"


def test_the_cuda_host_engine_matches_the_cpu_one(rng):
    """No device arrays needed: the reference engine on both backends, through the binding."""
    from kdagraph._kdagraph import _reference as ref

    kw = dict(layers=2, heads=2, value_heads=4, head_k=64, head_v=64, tokens=4, slots=6, scratch_steps=4, batch=3,
              mode="fused-accept", l2norm_qk=True, gate="softplus", beta_is_logit=True, accept_rate=0.7,
              seed=int(rng.integers(1, 2**62)), rounds=8)
    cpu_out, _, cpu_states = ref.run_host_engine(backend="cpu", **kw)
    gpu_out, _, gpu_states = ref.run_host_engine(backend="cuda", **kw)
    for r, (a, b) in enumerate(zip(gpu_out, cpu_out)):
        assert rel_error(a, b) <= 1e-5, f"round {r}"
    for (_, _, a, _), (_, _, b, _) in zip(gpu_states, cpu_states):
        assert rel_error(a, b) <= 1e-5


def test_short_conv_on_cuda_matches_the_cpu_backend(rng):
    """The same conv arithmetic on both backends (docs/conv.md), on torch's current stream, state in place."""
    from test_short_conv import ConvCase

    c = ConvCase(rng, W=4, C=200, S=5, T=3)
    d = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    state, x, weight, bias = d(c.state), d(c.x), d(c.weight), d(c.bias)
    indices, accepted = d(c.indices), d(c.accepted)
    want = c.run()
    kdagraph.clear_device_errors("cuda")  # what a test before this one in the process recorded is not ours
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = kdagraph.short_conv(x, state, weight, bias, state_indices=indices, num_accepted_tokens=accepted)
    stream.synchronize()
    assert rel_error(y.cpu().numpy(), want) <= 1e-6
    assert np.array_equal(state.cpu().numpy(), c.state), "the state moves the same inputs on both backends"
    assert kdagraph.device_errors("cuda")["count"] == 0

CAPTURE_SCRIPT = r"""
import torch, kdagraph
slots = torch.tensor([1, 0], dtype=torch.int32, device="cuda")
pool = torch.ones(4, dtype=torch.int32, device="cuda")
stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
kw = dict(slots=slots, scratch_steps=4, draft_token_num=3, accept_lens_pool=pool)
with torch.cuda.graph(graph, stream=stream):
    try:  # the first kdagraph call of this process, inside a capture: refused, the capture unharmed
        kdagraph.build_fused_accept_indices(**kw)
        print("first-in-capture: accepted")
    except kdagraph.InvalidArgument as e:
        print("first-in-capture:", e.argument)
rows, _ = kdagraph.build_fused_accept_indices(**kw)  # outside: allocates the word
torch.cuda.synchronize()
print("outside:", rows.tolist())
graph2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph2, stream=stream):
    rows2, _ = kdagraph.build_fused_accept_indices(**kw)  # the word exists: capturable
graph2.replay()
torch.cuda.synchronize()
print("captured:", rows2.tolist())
"""


@pytest.mark.cuda_graph
def test_the_first_call_inside_a_capture_is_refused_naming_the_stream():
    """The drop-ins' device error word is allocated by the first call outside a capture; a first call inside
    one is refused (InvalidArgument naming "stream") and leaves the capture valid. A fresh process, so no
    earlier test has allocated the word."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", CAPTURE_SCRIPT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "first-in-capture: stream" in lines, run.stdout
    assert "outside: [[4, 5, 6], [0, 1, 2]]" in lines and "captured: [[4, 5, 6], [0, 1, 2]]" in lines, run.stdout


@pytest.mark.cuda_graph
def test_int64_indices_are_converted_on_the_calls_stream_but_refused_inside_a_capture(rng):
    """Outside a capture int64 indices (torch's default) give the int32 results bitwise, converted on the
    stream the call names; inside one they are refused by name (the copy would be an allocation in the
    capture) and the capture goes on: int32 indices in the same capture replay to the same results."""
    c = Case(rng, K=64, V=64, H=2, HV=4, gate="softplus", beta_is_logit=True)
    d = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    args = [d(x) for x in (c.q, c.k, c.v, c.g, c.beta)]
    kw = {k: (d(v) if isinstance(v, np.ndarray) else v) for k, v in c.kwargs().items()}
    rows, accepted = d(c.indices), d(c.accepted)
    want_pool = d(c.pool)
    want, _ = kdagraph.recurrent_kda(*args, initial_state=want_pool, ssm_state_indices=rows,
                                     num_accepted_tokens=accepted, **kw)
    rows64, accepted64 = rows.long(), accepted.long()  # on the current stream, which `side` then waits for
    pool = d(c.pool)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    got, _ = kdagraph.recurrent_kda(*args, initial_state=pool, ssm_state_indices=rows64,
                                    num_accepted_tokens=accepted64, stream=side, **kw)
    torch.cuda.synchronize()
    assert torch.equal(got, want) and torch.equal(pool, want_pool)

    pool = d(c.pool)
    graph, refused = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        try:
            kdagraph.recurrent_kda(*args, initial_state=pool, ssm_state_indices=rows64, num_accepted_tokens=accepted64, **kw)
        except kdagraph.InvalidArgument as e:
            refused = e.argument
        out, _ = kdagraph.recurrent_kda(*args, initial_state=pool, ssm_state_indices=rows,
                                        num_accepted_tokens=accepted, **kw)
    assert refused == "ssm_state_indices"
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want) and torch.equal(pool, want_pool)


def test_a_slot_strided_pool_on_cuda_is_updated_in_place(rng):
    """SGLang's per-slot envelopes on the device: the [N, HV, V, K] view is written in place, the rest of
    each envelope is not, and the results are the compact pool's."""
    c = Case(rng, K=64, V=64, H=2, HV=4)
    d = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    args = [d(x) for x in (c.q, c.k, c.v, c.g, c.beta)]
    compact = d(c.pool)
    want, _ = kdagraph.recurrent_kda(*args, initial_state=compact, ssm_state_indices=d(c.indices),
                                     num_accepted_tokens=d(c.accepted))
    row = c.HV * c.V * c.K
    envelope = torch.randn(c.N, row + 64, device="cuda")
    envelope[:, 16:16 + row] = d(c.pool).reshape(c.N, row)
    spare = torch.cat([envelope[:, :16], envelope[:, 16 + row:]], dim=1).clone()
    pool = envelope[:, 16:16 + row].view(c.N, c.HV, c.V, c.K)
    got, _ = kdagraph.recurrent_kda(*args, initial_state=pool, ssm_state_indices=d(c.indices),
                                    num_accepted_tokens=d(c.accepted))
    torch.cuda.synchronize()
    assert torch.equal(got, want) and torch.equal(pool, compact)
    assert torch.equal(torch.cat([envelope[:, :16], envelope[:, 16 + row:]], dim=1), spare)


def test_clamped_accept_lengths_and_the_varlen_form_on_cuda_match_the_cpu_backend(rng):
    """docs/python.md: num_accepted_tokens of 0 and T + 1 are clamped on CUDA as on the CPU, and recorded in the
    CUDA error word; cu_seqlens of different lengths (int64 on the device, read by the host) run as on the
    CPU, FLA's plain form per sequence."""
    c = Case(rng, K=64, V=64, H=2, HV=4, padded=1)
    d = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    wild = c.accepted.copy()
    wild[0], wild[2] = 0, c.T + 1
    cpu_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=cpu_pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=wild)
    kdagraph.clear_device_errors("cpu")
    pool = d(c.pool)
    kdagraph.clear_device_errors("cuda")
    out, _ = kdagraph.recurrent_kda(*(d(x) for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=pool,
                                    ssm_state_indices=d(c.indices), num_accepted_tokens=d(wild))
    torch.cuda.synchronize()
    assert rel_error(out.cpu().numpy(), want) <= 1e-5 and rel_error(pool.cpu().numpy(), cpu_pool) <= 1e-5
    errors = kdagraph.device_errors("cuda")
    assert errors["code"] == "accept_out_of_range" and errors["count"] >= 1
    kdagraph.clear_device_errors("cuda")

    pack = lambda x: np.ascontiguousarray(x.reshape((1, c.B * c.T) + x.shape[2:]))
    cu = np.array([0, 3, 4, 8, 12], np.int64)
    cpu_state = c.pool[:4].copy()
    want, _ = kdagraph.recurrent_kda(*(pack(x) for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=cpu_state,
                                     output_final_state=True, cu_seqlens=cu)
    state = d(c.pool[:4])
    got, final = kdagraph.recurrent_kda(*(d(pack(x)) for x in (c.q, c.k, c.v, c.g, c.beta)), initial_state=state,
                                        output_final_state=True, cu_seqlens=d(cu))
    torch.cuda.synchronize()
    assert final is state
    assert rel_error(got.cpu().numpy(), want) <= 1e-5 and rel_error(state.cpu().numpy(), cpu_state) <= 1e-5
