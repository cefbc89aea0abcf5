"""Every bad argument of the drop-ins is refused before any work, as kdagraph.InvalidArgument (a
ValueError) naming it, and leaves every array as it was; library errors that are not the caller's become
RuntimeError with the library's message."""

import ml_dtypes
import numpy as np
import pytest

import kdagraph
from helpers import expect_refused_unchanged
from test_recurrent_kda import Case


def base(rng):
    c = Case(rng)
    kw = dict(initial_state=c.pool, ssm_state_indices=c.indices, num_accepted_tokens=c.accepted, output=c.output)
    return c, kw


def spoil(name):
    """Each entry: (argument named, how to spoil a good call)."""
    return name


BAD = [
    ("num_accepted_tokens", lambda c, a, kw: kw.update(num_accepted_tokens=c.accepted.astype(np.float32))),
    ("num_accepted_tokens", lambda c, a, kw: kw.update(num_accepted_tokens=np.where(np.arange(c.B) == 0, -2**40, c.accepted.astype(np.int64)))),
    ("num_accepted_tokens", lambda c, a, kw: kw.update(num_accepted_tokens=c.accepted[:2].copy())),
    ("ssm_state_indices", lambda c, a, kw: kw["ssm_state_indices"].__setitem__((0, 0), c.N)),
    ("ssm_state_indices", lambda c, a, kw: kw["ssm_state_indices"].__setitem__((2, 1), c.indices[0, 2])),
    ("ssm_state_indices", lambda c, a, kw: kw["ssm_state_indices"].__setitem__((2, 1), c.indices[0, c.accepted[0] - 1])),
    ("ssm_state_indices", lambda c, a, kw: kw.update(ssm_state_indices=c.indices[:, :2].copy())),
    ("ssm_state_indices", lambda c, a, kw: kw.update(ssm_state_indices=c.indices.astype(np.float32))),
    ("ssm_state_indices", lambda c, a, kw: kw.update(ssm_state_indices=np.where(c.indices == c.indices.max(), 2**31, c.indices.astype(np.int64)))),
    ("ssm_state_indices", lambda c, a, kw: kw.update(ssm_state_indices=np.asfortranarray(c.indices))),
    ("initial_state", lambda c, a, kw: kw.update(initial_state=None)),
    ("initial_state", lambda c, a, kw: kw.update(initial_state=c.pool[:, :2])),
    ("initial_state", lambda c, a, kw: kw.update(initial_state=c.pool.astype(np.float64))),
    ("initial_state", lambda c, a, kw: kw.update(initial_state=c.pool.tolist())),
    ("q", lambda c, a, kw: a.__setitem__(0, np.asfortranarray(c.q))),
    ("q", lambda c, a, kw: a.__setitem__(0, c.q[0])),
    ("q", lambda c, a, kw: a.__setitem__(0, c.q.tolist())),
    ("k", lambda c, a, kw: a.__setitem__(1, c.k[:, :, :1].copy())),
    ("k", lambda c, a, kw: a.__setitem__(1, c.k.astype(ml_dtypes.bfloat16))),
    ("k", lambda c, a, kw: a.__setitem__(1, c.k.astype(np.float64))),
    ("v", lambda c, a, kw: a.__setitem__(2, c.v[:2].copy())),
    ("g", lambda c, a, kw: a.__setitem__(3, c.g[:, :, :1].copy())),
    ("beta", lambda c, a, kw: a.__setitem__(4, c.beta[..., None].copy())),
    ("output", lambda c, a, kw: kw.update(output=c.output[:, :2].copy())),
    ("output", lambda c, a, kw: kw.update(output=c.output.astype(ml_dtypes.bfloat16))),
    ("num_spec_tokens", lambda c, a, kw: kw.update(num_spec_tokens=c.T)),
    ("lower_bound", lambda c, a, kw: kw.update(lower_bound=-3.0)),
    ("lower_bound", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log, dt_bias=c.dt_bias, lower_bound=1.0)),
    ("A_log", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log[:3].copy(), dt_bias=c.dt_bias)),
    ("dt_bias", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log, dt_bias=c.dt_bias[:c.H * c.K].copy())),
    ("dt_bias", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log, dt_bias=c.dt_bias.astype(np.float64))),
    ("A_log", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log.reshape(1, c.HV), dt_bias=c.dt_bias)),
    ("A_log", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log.astype(ml_dtypes.bfloat16), dt_bias=c.dt_bias)),
    ("dt_bias", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log, dt_bias=c.dt_bias.reshape(c.K, c.HV))),
    ("dt_bias", lambda c, a, kw: kw.update(use_gate_in_kernel=True, A_log=c.A_log, dt_bias=c.dt_bias.reshape(1, c.HV * c.K))),
    ("scale", lambda c, a, kw: kw.update(scale=0.0)),
    ("initial_state_indices", lambda c, a, kw: kw.update(initial_state_source=c.pool.copy())),
    ("initial_state_source", lambda c, a, kw: kw.update(initial_state_indices=np.zeros(c.B, np.int32))),
    ("initial_state_indices", lambda c, a, kw: kw.update(initial_state_source=c.pool[:2].copy(), num_accepted_tokens=None,
                                                         initial_state_indices=np.array([0, 2, 1], np.int32))),
    ("initial_state_indices", lambda c, a, kw: kw.update(initial_state_source=c.pool.copy(), num_accepted_tokens=None,
                                                         initial_state_indices=np.zeros(c.B + 1, np.int32))),
    ("initial_state_source", lambda c, a, kw: kw.update(initial_state_source=c.pool[:, :, :, :2].copy(), num_accepted_tokens=None,
                                                        initial_state_indices=np.zeros(c.B, np.int32))),
]


@pytest.mark.parametrize("argument,bad", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_a_bad_argument_is_refused_by_name_and_changes_nothing(rng, argument, bad):
    c, kw = base(rng)
    arrays = [c.q, c.k, c.v, c.g, c.beta]
    bad(c, arrays, kw)
    expect_refused_unchanged(lambda: kdagraph.recurrent_kda(*arrays, **kw), argument, pool=c.pool, output=c.output)


def test_one_index_per_sequence_with_more_than_one_token_is_refused(rng):
    c = Case(rng)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, initial_state=c.pool, ssm_state_indices=c.indices[:, 0].copy())
    assert e.value.argument == "ssm_state_indices"


def test_library_errors_that_are_not_the_callers_become_runtime_errors():
    if kdagraph.cuda_available():
        pytest.skip("a CUDA device is visible here, so asking for CUDA memory succeeds")
    with pytest.raises(RuntimeError, match="kdagraph") as e:
        kdagraph.device_errors("cuda")  # host-mapped CUDA memory: there is no CUDA here to give it
    assert not isinstance(e.value, ValueError)


def test_dt_bias_per_head_is_the_flat_one(rng):
    """dt_bias [HV, K] (vLLM's) is taken like [HV * K], bit for bit."""
    c = Case(rng, gate="softplus")
    outs = []
    for dt_bias in (c.dt_bias, c.dt_bias.reshape(c.HV, c.K)):
        pool = c.pool.copy()
        o, _ = kdagraph.recurrent_kda(c.q, c.k, c.v, c.g, c.beta, A_log=c.A_log, dt_bias=dt_bias, initial_state=pool,
                                      use_gate_in_kernel=True, ssm_state_indices=c.indices, num_accepted_tokens=c.accepted)
        outs.append((o, pool))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
