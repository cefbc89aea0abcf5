"""Helpers of the Python tests: an independent fp64 numpy implementation of docs/math.md (sharing no code
with the library), error measures, and the check that a refused call changes nothing. The GPU tests'
honest skips are conftest.py's marker `gpu` (torch is a test dependency: nothing skips for want of it)."""

import numpy as np
import pytest

import kdagraph


def rel_error(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    den = np.linalg.norm(want)
    err = np.linalg.norm(got - want)
    return float(err / den) if den > 0 else float(err)


# flash-linear-attention's own bar for its recurrent and chunked KDA against its naive reference
# (tests/ops/test_kda.py: assert_close(..., 0.005) on o and the final state), with its measure.
FLA_RATIO = 0.005


def fla_err_ratio(want, got):
    """fla.utils.testing.get_err_ratio: RMS of the difference over RMS of the reference."""
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    return float(np.sqrt(np.mean((want - got) ** 2)) / (np.sqrt(np.mean(want ** 2)) + 1e-8))


def softplus(z):
    return np.where(z > 20.0, z, np.log1p(np.exp(np.minimum(z, 20.0))))


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference_verify(state, q, k, v, g, beta, *, l2norm=True, scale=None, gate="precomputed", A_log=None,
                     dt_bias=None, lower_bound=-5.0, beta_is_logit=False):
    """docs/math.md in fp64 for one sequence: state [HV, V, K] (V-major), q, k [T, H, K], v [T, HV, V],
    g [T, HV, K], beta [T, HV]. Returns (outputs [T, HV, V], post-states [T, HV, V, K])."""
    s = np.array(state, dtype=np.float64)
    T, H, K = q.shape
    HV = v.shape[1]
    G = HV // H
    q = np.array(q, dtype=np.float64)
    k = np.array(k, dtype=np.float64)
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q = q * (1.0 / np.sqrt(K) if scale is None else scale)
    x = np.array(g, dtype=np.float64)
    if gate == "softplus":
        decay = -np.exp(np.asarray(A_log, np.float64))[None, :, None] * softplus(x + np.asarray(dt_bias, np.float64).reshape(HV, K))
    elif gate == "lower-bound":
        decay = lower_bound * sigmoid(np.exp(np.asarray(A_log, np.float64))[None, :, None] * (x + np.asarray(dt_bias, np.float64).reshape(HV, K)))
    else:
        decay = x
    b = np.array(beta, dtype=np.float64)
    if beta_is_logit:
        b = sigmoid(b)
    outs = np.zeros((T, HV, v.shape[2]))
    posts = np.zeros((T,) + s.shape)
    for t in range(T):
        for h in range(HV):
            kk, qq = k[t, h // G], q[t, h // G]
            s[h] *= np.exp(decay[t, h])[None, :]          # S'[j][i] = a[i] S[j][i]
            p = s[h] @ kk                                  # p[j] = sum_i S'[j][i] k[i]
            u = b[t, h] * (np.asarray(v[t, h], np.float64) - p)
            s[h] += u[:, None] * kk[None, :]               # S[j][i] = S'[j][i] + k[i] u[j]
            outs[t, h] = s[h] @ qq                         # o[j] = sum_i S[j][i] q[i]
        posts[t] = s
    return outs, posts


def as_f64(x):
    """Values of a float32 or bfloat16 numpy array as fp64."""
    return np.asarray(x).astype(np.float64)


def expect_refused_unchanged(call, argument, **watched):
    """call() raises InvalidArgument (a ValueError) naming `argument`, and every watched array is bitwise
    what it was before (docs/errors.md: a refused call changes nothing)."""
    before = {name: a.copy() for name, a in watched.items()}
    with pytest.raises(kdagraph.InvalidArgument) as e:
        call()
    assert isinstance(e.value, ValueError)
    assert e.value.argument == argument, str(e.value)
    assert argument in str(e.value), "the message names the argument"
    for name, a in watched.items():
        assert np.array_equal(a.view(np.uint8), before[name].view(np.uint8)), f"a refused call changed {name}"
