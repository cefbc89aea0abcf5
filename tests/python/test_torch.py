"""torch tensors (CPU here; CUDA in test_gpu.py): the same results as numpy, bitwise, zero-copy, and
bfloat16 from torch. Skipped where torch is not installed."""

import numpy as np
import pytest

import kdagraph
from helpers import torch_or_skip
from test_recurrent_kda import Case


def test_torch_cpu_tensors_give_the_numpy_results_in_place(rng):
    torch = torch_or_skip()
    c = Case(rng, gate="softplus", beta_is_logit=True)
    want_pool = c.pool.copy()
    want, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=want_pool, ssm_state_indices=c.indices,
                                     num_accepted_tokens=c.accepted, **c.kwargs())
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x))
    pool = t(c.pool.copy())
    kw = {k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in c.kwargs().items()}
    out, final = kdagraph.recurrent_kda(t(c.q), t(c.k), t(c.v), t(c.g), t(c.beta), initial_state=pool,
                                        output_final_state=True, ssm_state_indices=t(c.indices),
                                        num_accepted_tokens=t(c.accepted), **kw)
    assert isinstance(out, torch.Tensor) and final is pool
    assert np.array_equal(out.numpy(), want) and np.array_equal(pool.numpy(), want_pool)


def test_torch_bfloat16_inputs_are_taken(rng):
    torch = torch_or_skip()
    c = Case(rng)
    b = lambda x: torch.from_numpy(x).to(torch.bfloat16)
    pool = torch.from_numpy(c.pool.copy())
    out, _ = kdagraph.recurrent_kda(b(c.q), b(c.k), b(c.v), b(c.g), b(c.beta), initial_state=pool,
                                    ssm_state_indices=torch.from_numpy(c.indices),
                                    num_accepted_tokens=torch.from_numpy(c.accepted))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_torch_sglang_indices(rng):
    torch = torch_or_skip()
    slots = torch.tensor([2, -1, 0], dtype=torch.int64)
    rows, acc = kdagraph.build_fused_accept_indices(slots=slots, scratch_steps=4, draft_token_num=3,
                                                    accept_lens_pool=torch.tensor([3, 1, 2], dtype=torch.int32))
    assert rows.tolist() == [[8, 9, 10], [-1, -1, -1], [0, 1, 2]] and acc.tolist() == [2, 3, 3]
