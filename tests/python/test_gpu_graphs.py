"""The drop-ins as SGLang runs its verify step (docs/indices.md, docs/graphs.md, docs/python.md): one torch.cuda.graph holds the index
build (build_fused_accept_indices) and L recurrent_kda calls on static tensors; each round the engine
writes fresh inputs and accept lengths into those tensors, changes the batch now and then (padded rows
included), and replays. Every replay must be bitwise equal to the same calls made eagerly on a twin of the
state, outputs each round and states at the end; the first round also agrees with the CPU backend. The
same rounds through cupy arrays (zero-copy views, cupy's current stream) are bitwise torch's. Skipped
without a GPU (the cupy test also without cupy)."""

import numpy as np
import pytest
import torch

import kdagraph
from helpers import rel_error

L, H, HV, K, T, S, P, N = 3, 2, 4, 128, 3, 4, 7, 4  # layers, heads, T tokens of S scratch steps, P slots, bucket N
ROUNDS = 50

pytestmark = pytest.mark.gpu


class Engine:
    """An engine's static tensors: per-layer inputs (`io`: bf16 as engines run, or fp32), gate weights and
    outputs, the batch's slots (-1: padded). State pools, accept lengths and outputs are made per path
    (graph, eager) from the same start."""

    def __init__(self, torch, rng, io):
        self.torch, self.rng, self.io = torch, rng, io
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(int(rng.integers(1 << 62)))
        dev = dict(device="cuda")
        self.inputs = [dict(q=torch.empty(N, T, H, K, dtype=io, **dev),
                            k=torch.empty(N, T, H, K, dtype=io, **dev),
                            v=torch.empty(N, T, HV, K, dtype=io, **dev),
                            g=torch.empty(N, T, HV, K, dtype=io, **dev),
                            beta=torch.empty(N, T, HV, dtype=io, **dev)) for _ in range(L)]
        self.A_log = [self.uniform(-1.0, 0.5, HV) for _ in range(L)]
        self.dt_bias = [self.uniform(-0.5, 0.5, HV * K) for _ in range(L)]
        self.start = [self.uniform(-1.0, 1.0, P * S, HV, K, K) for _ in range(L)]
        self.slots = torch.empty(N, dtype=torch.int32, **dev)
        self.n_real = N

    def uniform(self, lo, hi, *shape):
        return self.torch.rand(shape, generator=self.gen, device="cuda") * (hi - lo) + lo

    def pools(self):
        return [p.clone() for p in self.start]

    def outputs(self):
        return [self.torch.full((N, T, HV, K), float("nan"), dtype=self.io, device="cuda")
                for _ in range(L)]

    def next_round(self, r):
        """Fresh inputs in the static tensors; every few rounds another batch of distinct slots, the rows
        after n_real padded. Returns the round's accept lengths [P] (the sampler's, on the device)."""
        for i in self.inputs:
            for name, (lo, hi) in (("q", (-1, 1)), ("k", (-1, 1)), ("v", (-1, 1)), ("g", (-4, 2)), ("beta", (-3, 3))):
                i[name].copy_(self.uniform(lo, hi, *i[name].shape))
        if r % 10 == 0:
            self.n_real = int(self.rng.integers(1, N + 1))
            slots = np.full(N, -1, dtype=np.int32)
            slots[: self.n_real] = self.rng.permutation(P)[: self.n_real]
            self.slots.copy_(self.torch.from_numpy(slots))
        return self.torch.randint(1, T + 1, (P,), generator=self.gen, device="cuda", dtype=self.torch.int32)

    def forward(self, pools, accept, outputs, view=lambda x: x):
        """SGLang's verify forward: indices once, then every layer. `view` maps each tensor to the array
        the drop-ins get (cupy's zero-copy view, say)."""
        idx, nat = kdagraph.build_fused_accept_indices(slots=view(self.slots), scratch_steps=S, draft_token_num=T,
                                                       accept_lens_pool=view(accept))
        for layer in range(L):
            i = {name: view(x) for name, x in self.inputs[layer].items()}
            kdagraph.recurrent_kda(i["q"], i["k"], i["v"], i["g"], i["beta"], A_log=view(self.A_log[layer]),
                                   dt_bias=view(self.dt_bias[layer]), initial_state=view(pools[layer]),
                                   use_gate_in_kernel=True, ssm_state_indices=idx, num_accepted_tokens=nat,
                                   output=view(outputs[layer]), beta_is_logit=True)
        return idx, nat


def bits(torch, x):
    """A tensor's bytes, so that equal means bitwise equal (NaNs and signed zeros included)."""
    return x.contiguous().view(torch.uint8)


def check_against_cpu(torch, engine, pools_before, outputs, idx, nat):
    """The first round's outputs against the CPU backend on the same values (fp32 copies of the bf16
    inputs), within the bf16 tolerance; padded rows zero."""
    host = lambda x: x.float().cpu().numpy()
    for layer in range(L):
        i = engine.inputs[layer]
        want, _ = kdagraph.recurrent_kda(host(i["q"]), host(i["k"]), host(i["v"]), host(i["g"]), host(i["beta"]),
                                         A_log=host(engine.A_log[layer]), dt_bias=host(engine.dt_bias[layer]),
                                         initial_state=pools_before[layer], use_gate_in_kernel=True,
                                         ssm_state_indices=idx.cpu().numpy(), num_accepted_tokens=nat.cpu().numpy(),
                                         beta_is_logit=True)
        got = host(outputs[layer])
        real = engine.n_real
        assert rel_error(got[:real], want[:real]) <= 1e-2, f"layer {layer} against the CPU backend"
        assert (got[real:] == 0).all(), f"layer {layer}: padded rows output zeros"


@pytest.mark.cuda_graph
def test_sglang_graph_of_indices_and_layers_replays_bitwise_as_eager(rng):
    engine = Engine(torch, rng, torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph_pools, eager_pools = engine.pools(), engine.pools()
    graph_out, eager_out = engine.outputs(), engine.outputs()
    graph_accept = torch.empty(P, dtype=torch.int32, device="cuda")
    eager_accept = torch.empty(P, dtype=torch.int32, device="cuda")
    with torch.cuda.stream(stream):
        engine.next_round(0)
        graph_accept.fill_(1)
        # Warm-up outside the capture on throwaway state (the drop-ins' error word, module loading).
        engine.forward(engine.pools(), graph_accept, engine.outputs())
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            engine.forward(graph_pools, graph_accept, graph_out)
        for r in range(ROUNDS):
            accept = engine.next_round(r)
            graph_accept.copy_(accept)
            eager_accept.copy_(accept)
            before = [p.cpu().numpy() for p in eager_pools] if r == 0 else None
            previous = graph_pools[0].clone()
            graph.replay()
            idx, nat = engine.forward(eager_pools, eager_accept, eager_out)
            stream.synchronize()
            if r == 0:
                check_against_cpu(torch, engine, before, eager_out, idx, nat)
            for layer in range(L):
                assert torch.equal(bits(torch, graph_out[layer]), bits(torch, eager_out[layer])), \
                    f"round {r}, layer {layer}: the replay's outputs differ from the eager call's"
                assert torch.isfinite(graph_out[layer].float()).all(), f"round {r}: an output was not written"
            assert not torch.equal(previous, graph_pools[0]), f"round {r}: the replay wrote no post-state"
    for layer in range(L):
        assert torch.equal(bits(torch, graph_pools[layer]), bits(torch, eager_pools[layer])), f"layer {layer} state"
    assert kdagraph.device_errors("cuda")["count"] == 0


@pytest.mark.cupy
def test_cupy_arrays_give_torchs_results_bitwise(rng):
    """The same rounds with every array a cupy view of the torch tensor (fp32 io), on a cupy stream:
    kdagraph takes cupy's current stream and the cupy arrays in place, and the results are bitwise torch's."""
    import cupy

    engine = Engine(torch, rng, torch.float32)  # fp32: the test does not rely on cupy knowing bfloat16
    torch_pools, cupy_pools = engine.pools(), engine.pools()
    torch_out, cupy_out = engine.outputs(), engine.outputs()
    accept_t = torch.empty(P, dtype=torch.int32, device="cuda")
    accept_c = torch.empty(P, dtype=torch.int32, device="cuda")
    stream = cupy.cuda.Stream(non_blocking=True)
    for r in range(10):
        accept = engine.next_round(r)
        accept_t.copy_(accept)
        accept_c.copy_(accept)
        torch.cuda.synchronize()
        engine.forward(torch_pools, accept_t, torch_out)
        torch.cuda.synchronize()
        with stream:
            engine.forward(cupy_pools, accept_c, cupy_out, view=cupy.from_dlpack)
        stream.synchronize()
        for layer in range(L):
            assert torch.equal(bits(torch, torch_out[layer]), bits(torch, cupy_out[layer])), f"round {r}, layer {layer}"
    for layer in range(L):
        assert torch.equal(bits(torch, torch_pools[layer]), bits(torch, cupy_pools[layer])), f"layer {layer} state"
