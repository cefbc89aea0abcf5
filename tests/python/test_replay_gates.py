"""Replay mode with the gate in the kernel from Python (docs/modes.md, docs/errors.md): a round folds each slot's pending
records, which hold the raw gate an earlier round was given, with its own A_log and dt_bias, the layer's
weights. A round whose gate arrays moved while records verified with the old ones may pend is refused as
kdagraph.InvalidArgument (a ValueError) naming the argument, and changes nothing; once every slot is
materialized or prefilled they may move."""

import numpy as np
import pytest

import kdagraph
from helpers import expect_refused_unchanged

L, H, HV, K, V, T, P, N = 2, 1, 2, 16, 16, 3, 4, 2


def layer_inputs(rng, a_log, dt_bias):
    f = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)
    return dict(q=f(N, T, H, K), k=f(N, T, H, K), v=f(N, T, HV, V), g=f(N, T, HV, K), beta=f(N, T, HV),
                o=np.full((N, T, HV, V), np.nan, np.float32), A_log=a_log, dt_bias=dt_bias)


def gates(rng):
    """Every layer's own (A_log, dt_bias)."""
    return [(rng.uniform(-1, 0.5, HV).astype(np.float32), rng.uniform(-0.5, 0.5, HV * K).astype(np.float32))
            for _ in range(L)]


def test_moved_gates_are_refused_by_name_until_every_slot_is_settled(rng):
    verifier = kdagraph.Verifier(backend="cpu", layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, slots=P,
                                 scratch_steps=T, max_rows=N, tokens=T, mode="replay", l2norm_qk=True,
                                 gate="softplus", beta_is_logit=True)
    for slot in range(P):
        verifier.prefill(slot, rng.uniform(-1, 1, (L, HV, V, K)).astype(np.float32))
    weights = gates(rng)
    inputs = [layer_inputs(rng, *weights[l]) for l in range(L)]
    runner = kdagraph.GraphRunner(verifier, inputs, exec="eager")
    runner.set_batch([2, 0])
    runner.run_round()
    runner.accept(np.array([2, 3], np.int32))

    # Layer 1's A_log copied: the same values elsewhere. The Verifier sees where the weights are, not
    # their values, and the pending records of layer 1 were verified with the old array.
    moved = [dict(layer, o=np.full_like(layer["o"], np.nan)) for layer in inputs]
    moved[1]["A_log"] = weights[1][0].copy()
    other = kdagraph.GraphRunner(verifier, moved, exec="eager")
    other.set_batch([2, 0])
    watched = dict(pool=verifier.pool, accept_len=verifier.accept_len, o0=moved[0]["o"], o1=moved[1]["o"])
    expect_refused_unchanged(other.run_round, "A_log", **watched)
    with pytest.raises(kdagraph.InvalidArgument, match="layer 1"):
        other.run_round()

    verifier.materialize(list(range(P)))
    other.run_round()
    assert not np.isnan(moved[1]["o"]).any(), "the round with the moved weights ran"
    assert verifier.device_errors()["count"] == 0
