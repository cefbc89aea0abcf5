"""recurrent_kda against flash-linear-attention's own torch reference (fla-core, a test dependency):
fla.ops.kda.naive.naive_recurrent_kda for the recurrence, and fla's naive gate functions for the gate in
the kernel, over golden shapes: grouped value heads (GVA) and equal heads, the gate precomputed, in the
kernel (softplus) and lower-bounded, T = 1 to 8. fla's reference takes q and k already normalized, beta
already a sigmoid and the state [B, HV, K, V]; kdagraph does both in the kernel and stores [V, K]."""

import sys

import numpy as np
import pytest
import torch

if sys.version_info < (3, 10):  # the test extra installs fla-core from Python 3.10 on, as it requires
    pytest.skip("fla-core needs Python 3.10 or later", allow_module_level=True)

from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate  # noqa: E402
from fla.ops.kda.naive import naive_recurrent_kda  # noqa: E402

import kdagraph
from helpers import rel_error

GOLDEN = [  # (H, HV, K, V): GVA as Kimi-Linear's value heads grouped, and equal heads
    (2, 4, 64, 64), (1, 4, 32, 48), (4, 4, 128, 128),
]
GATES = ["precomputed", "softplus", "lower-bound"]


def l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("H,HV,K,V", GOLDEN, ids=[f"H{h}-HV{hv}-K{k}-V{v}" for h, hv, k, v in GOLDEN])
def test_recurrent_kda_matches_flas_naive_reference(rng, H, HV, K, V, gate):
    B = 2
    for T in range(1, 9):
        u = lambda lo, hi, *shape: torch.from_numpy(rng.uniform(lo, hi, shape).astype(np.float32))
        q, k, v = u(-1, 1, B, T, H, K), u(-1, 1, B, T, H, K), u(-1, 1, B, T, HV, V)
        g = u(-3, 3, B, T, HV, K) if gate != "precomputed" else u(-0.6, -0.01, B, T, HV, K)
        beta_logit = u(-3, 3, B, T, HV)
        A_log, dt_bias = u(-1, 0.5, HV), u(-0.5, 0.5, HV * K)
        seed = u(-1, 1, B, HV, K, V)  # fla's [K, V] layout

        if gate == "softplus":
            decay = naive_kda_gate(g, A_log, dt_bias)
        elif gate == "lower-bound":
            decay = naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound=-4.0)
        else:
            decay = g
        want_o, want_state = naive_recurrent_kda(l2norm(q), l2norm(k), v, decay, torch.sigmoid(beta_logit),
                                                 initial_state=seed, output_final_state=True)

        # kdagraph: rows b * T + t of a state pool (num_spec_tokens), the seed at row b * T.
        pool = torch.zeros(B * T, HV, V, K)
        pool[::T] = seed.transpose(-1, -2)
        kw = dict(use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                  lower_bound=-4.0 if gate == "lower-bound" else None) if gate != "precomputed" else {}
        out, _ = kdagraph.recurrent_kda(q, k, v, g, beta_logit, initial_state=pool, beta_is_logit=True,
                                        num_spec_tokens=T - 1 if T > 1 else None, **kw)
        final = pool[T - 1::T].transpose(-1, -2)
        assert rel_error(out.numpy(), want_o.numpy()) <= 1e-5, f"T = {T}: outputs"
        assert rel_error(final.numpy(), want_state.numpy()) <= 1e-5, f"T = {T}: final states"
