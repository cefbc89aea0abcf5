"""Replay's corrections ring from Python (docs/modes.md): one checkpoint a slot (its pool row) and a ring of R
records, folded into the next verify. Over rounds of random accept lengths, a replay Verifier (its CPU
graph) and the ops of a round over caller arrays give outputs bitwise those of fused accept, and after
materialize bitwise its pools, whatever flush_min (0: every round; T + 1; R - T, the latest); each slot's
pending count and each row's flush follow docs/modes.md's rule. A ring that cannot hold a round beside its
pending records is refused by name; ring_bytes and bytes_moved say what the ring costs."""

import numpy as np
import pytest

import kdagraph
from helpers import expect_refused_unchanged

L, H, HV, K, V, T, P, N, ROUNDS = 2, 1, 2, 16, 16, 3, 5, 3, 40
SHAPE = dict(layers=L, heads=H, value_heads=HV, head_k=K, head_v=V, tokens=T)
STATE_BYTES = HV * V * K * 4  # one slot's fp32 state of one layer


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def options(gate):
    return dict(l2norm_qk=True, gate=gate, beta_is_logit=gate != "precomputed")


def runner_buffers(rng, gate):
    """One layer's runner arrays (zeroed) per layer; with the gate in the kernel, the layer's weights."""
    z = lambda *shape: np.zeros(shape, np.float32)
    layers = []
    for _ in range(L):
        d = dict(q=z(N, T, H, K), k=z(N, T, H, K), v=z(N, T, HV, V), g=z(N, T, HV, K), beta=z(N, T, HV), o=z(N, T, HV, V))
        if gate != "precomputed":
            d.update(A_log=rng.uniform(-1, 0.5, HV).astype(np.float32),
                     dt_bias=rng.uniform(-0.5, 0.5, HV * K).astype(np.float32))
        layers.append(d)
    return layers


def fresh_inputs(rng, gate):
    u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape).astype(np.float32)
    g = u(-3, 3, N, T, HV, K) if gate != "precomputed" else u(-0.6, -0.01, N, T, HV, K)
    beta = u(-3, 3, N, T, HV) if gate != "precomputed" else u(0.05, 0.95, N, T, HV)
    return [dict(q=u(-1, 1, N, T, H, K), k=u(-1, 1, N, T, H, K), v=u(-1, 1, N, T, HV, V), g=g, beta=beta)
            for _ in range(L)]


class CallerStorage:
    """Replay's storage as an engine owns it: SGLang's pool [L, P + 1, ...] (slot P padding, never named),
    ring_kg as a list of per-layer arrays (vLLM's form), ring_u as one array, and the cursor."""

    def __init__(self, spec, states):
        self.pool = np.full((L, P + 1, HV, V, K), 7.0, np.float32)
        self.pool[:, :P] = states.transpose(1, 0, 2, 3, 4)
        self.accept_len = np.zeros(P, np.int32)
        self.ring_kg = [np.full((P, spec.ring_kg_row_stride), np.nan, np.float32) for _ in range(L)]
        self.ring_u = np.full((L, P, spec.ring_u_row_stride), np.nan, np.float32)
        self.ring_pending = np.zeros(P, np.int32)
        self.ring_start = np.zeros(P, np.int32)
        self.storage = kdagraph.SlotStorage(spec, pool=self.pool, accept_len=self.accept_len, scratch_steps=T,
                                            ring_kg=self.ring_kg, ring_u=self.ring_u, ring_pending=self.ring_pending,
                                            ring_start=self.ring_start)

    def prefill(self, slot, state):
        """What SlotStorage asks of a prefill: the checkpoint written, accept_len and the cursor 0."""
        self.pool[:, slot] = state
        self.accept_len[slot] = self.ring_pending[slot] = self.ring_start[slot] = 0


@pytest.mark.parametrize("gate", ["precomputed", "softplus"])
@pytest.mark.parametrize("ring_records,flush_min", [(0, 0), (0, T + 1), (0, 2 * T), (4 * T, 3 * T)],
                         ids=["R3T-flush0", "R3T-flushT+1", "R3T-flushR-T", "R4T-flushR-T"])
def test_replay_equals_fused_accept_bitwise_whatever_the_flush(rng, ring_records, flush_min, gate):
    """40 rounds, batches that change, a retirement and a new request midway: the fused-accept Verifier is
    the reference; the replay Verifier runs a captured CPU graph, the ops run eagerly on caller arrays.
    Outputs are poisoned before each round, so an unwritten one shows."""
    opts = options(gate)
    R = ring_records or 3 * T
    fused = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode="fused-accept", **opts)
    replay = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode="replay", ring_records=ring_records,
                               flush_min=flush_min, **opts)
    spec = kdagraph.RoundSpec(**SHAPE, mode="replay", ring_records=ring_records, flush_min=flush_min, **opts)
    assert (replay.ring_records, replay.flush_min) == (spec.ring_records, spec.flush_min) == (R, flush_min)
    assert spec.ring_kg_row_elems == R * (H * K + HV * K) and spec.ring_u_row_elems == R * HV * V

    fused_buffers, replay_buffers = runner_buffers(rng, gate), runner_buffers(rng, gate)
    for mine, theirs in zip(replay_buffers, fused_buffers):  # one model: the same weights
        mine.update({name: theirs[name] for name in ("A_log", "dt_bias") if name in theirs})
    fused_runner = kdagraph.GraphRunner(fused, fused_buffers, exec="eager")
    replay_runner = kdagraph.GraphRunner(replay, replay_buffers)
    gates = [(b["A_log"], b["dt_bias"]) for b in fused_buffers] if gate != "precomputed" else None

    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    caller = CallerStorage(spec, states)
    for slot in range(P):
        fused.prefill(slot, states[slot])
        replay.prefill(slot, states[slot])
    replay_runner.capture()
    index_storage = np.full(kdagraph.round_index_elems(N, T), 99, np.int32)
    indices = kdagraph.RoundIndices(index_storage, N, T)
    at, length = kdagraph.round_index_offsets(N, T)["ring_flush"]
    assert length == N
    outputs = [np.zeros((N, T, HV, V), np.float32) for _ in range(L)]

    hist = np.zeros(P, np.int64)  # docs/modes.md's pending count of each slot, as the rule says it moves
    flushes = []
    joined_with, moved = states.copy(), set()  # each slot's state when it joined; slots verified since
    batch = None
    for r in range(ROUNDS):
        if r % 8 == 0:  # slots leave and come back
            batch = rng.permutation(P)[:N].astype(np.int32)
            fused_runner.set_batch(batch.tolist())
            replay_runner.set_batch(batch.tolist())
        inputs = fresh_inputs(rng, gate)
        for buffers in (fused_buffers, replay_buffers):
            for layer, fresh in zip(buffers, inputs):
                for name, x in fresh.items():
                    layer[name][...] = x
                layer["o"][...] = np.nan
        fused_runner.run_round()
        replay_runner.run_round()
        kdagraph.build_indices(spec, caller.storage, indices, slots=batch, n_real=np.array([N], np.int32), rows=N)
        flush = (hist[batch] >= flush_min) | (hist[batch] + T > R - T)
        assert same_bits(index_storage[at:at + N], flush.astype(np.int32)), f"round {r}: ring_flush of rows {batch}"
        flushes.extend(flush.tolist())
        for l in range(L):
            want = fused_buffers[l]["o"]
            assert not np.isnan(want).any(), f"round {r} layer {l}: fused accept left an output unwritten"
            assert same_bits(replay_buffers[l]["o"], want), f"round {r} layer {l}: the replay Verifier's outputs differ"
            outputs[l][...] = np.nan
            gate_args = dict(A_log=gates[l][0], dt_bias=gates[l][1]) if gates else {}
            kdagraph.verify_layer(spec, caller.storage, indices, rows=N, layer=l, o=outputs[l], **inputs[l], **gate_args)
            assert same_bits(outputs[l], want), f"round {r} layer {l}: the ops' replay outputs differ"
        moved.update(batch.tolist())
        accepted = rng.integers(1, T + 1, N).astype(np.int32)
        fused_runner.accept(accepted)
        replay_runner.accept(accepted)
        kdagraph.accept(spec, caller.storage, indices, rows=N, accepted=accepted)
        hist[batch] = np.where(flush, 0, hist[batch]) + accepted
        assert same_bits(replay.ring_pending, hist.astype(np.int32)), f"round {r}: the Verifier's ring_pending"
        assert same_bits(caller.ring_pending, hist.astype(np.int32)), f"round {r}: the caller's ring_pending"
        if r == ROUNDS // 2:  # a request retires (its state compared), and a new one joins its slot
            slot = batch[:1].copy()
            fused.materialize(slot.tolist())
            replay.materialize(slot.tolist())
            kdagraph.materialize(spec, caller.storage, slots=slot, gates=gates)
            hist[slot] = 0
            want, got = np.empty((L, HV, V, K), np.float32), np.empty((L, HV, V, K), np.float32)
            fused.read_pool(int(slot[0]), want)
            replay.read_pool(int(slot[0]), got)
            assert same_bits(got, want), f"round {r}: slot {slot[0]} retired with a different state"
            assert same_bits(caller.pool[:, slot[0]], want), f"round {r}: slot {slot[0]}: the caller's pool differs"
            assert replay.ring_pending[slot[0]] == caller.ring_pending[slot[0]] == 0
            joined = rng.uniform(-0.5, 0.5, (L, HV, V, K)).astype(np.float32)
            fused.prefill(int(slot[0]), joined)
            replay.prefill(int(slot[0]), joined)
            caller.prefill(int(slot[0]), joined)
            joined_with[slot[0]] = joined
            moved.discard(int(slot[0]))

    assert any(flushes) and (flush_min == 0 or not all(flushes)), "the rounds flushed, and (flush_min > 0) waited"
    all_slots = list(range(P))
    fused.materialize(all_slots)
    replay.materialize(all_slots)
    kdagraph.materialize(spec, caller.storage, slots=np.arange(P, dtype=np.int32), gates=gates)
    want, got = np.empty((L, HV, V, K), np.float32), np.empty((L, HV, V, K), np.float32)
    for slot in all_slots:
        fused.read_pool(slot, want)
        replay.read_pool(slot, got)
        assert same_bits(got, want), f"slot {slot}: the replay Verifier's materialized pool differs"
        assert same_bits(caller.pool[:, slot], want), f"slot {slot}: the ops' materialized pool differs"
        assert (slot in moved) != same_bits(want, joined_with[slot]), f"slot {slot}: verified {slot in moved}"
    assert (caller.pool[:, P] == 7.0).all(), "the padding slot is never written"
    assert not replay.ring_pending.any() and not caller.ring_pending.any() and not caller.ring_start.any()
    for v in (fused, replay):
        assert v.device_errors()["count"] == 0
    assert kdagraph.device_errors("cpu")["count"] == 0


def test_the_comparison_can_fail(rng):
    """A replay that folded one record too few would differ: accepting one more token in replay than in
    fused accept changes the next round's outputs."""
    opts = options("precomputed")
    fused = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode="fused-accept", **opts)
    replay = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode="replay", **opts)
    runs = []
    for v in (fused, replay):
        buffers = runner_buffers(rng, "precomputed")
        runner = kdagraph.GraphRunner(v, buffers, exec="eager")
        runs.append((runner, buffers))
    states = rng.uniform(-0.5, 0.5, (P, L, HV, V, K)).astype(np.float32)
    for slot in range(P):
        fused.prefill(slot, states[slot])
        replay.prefill(slot, states[slot])
    same = []
    for r in range(2):
        inputs = fresh_inputs(rng, "precomputed")
        for runner, buffers in runs:
            runner.set_batch(list(range(N)))
            for layer, fresh in zip(buffers, inputs):
                for name, x in fresh.items():
                    layer[name][...] = x
            runner.run_round()
        same.append(all(same_bits(a["o"], b["o"]) for a, b in zip(runs[0][1], runs[1][1])))
        runs[0][0].accept(np.full(N, 1, np.int32))
        runs[1][0].accept(np.full(N, 2 if r == 0 else 1, np.int32))
    assert same == [True, False]


@pytest.mark.parametrize("maker", ["Verifier", "RoundSpec"])
def test_a_ring_that_cannot_hold_a_round_is_refused_by_name(maker):
    """docs/modes.md: 2 T <= R (a round's T records beside up to R - T pending) and 0 <= flush_min <= R - T."""
    def make(**ring):
        if maker == "Verifier":
            return kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode="replay", **ring)
        return kdagraph.RoundSpec(**SHAPE, mode="replay", **ring)

    for argument, ring in [("ring.records", dict(ring_records=2 * T - 1)),
                           ("ring.records", dict(ring_records=-1)),
                           ("ring.flush_min", dict(ring_records=3 * T, flush_min=2 * T + 1)),
                           ("ring.flush_min", dict(ring_records=2 * T, flush_min=T + 1)),
                           ("ring.flush_min", dict(flush_min=-2))]:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            make(**ring)
        assert isinstance(e.value, ValueError)
        assert e.value.argument == argument, str(e.value)
    edge = make(ring_records=2 * T, flush_min=T)  # the smallest ring, waiting as long as it can
    assert (edge.ring_records, edge.flush_min) == (2 * T, T)
    default = make()
    assert (default.ring_records, default.flush_min) == (3 * T, T + 1)
    # the default flush_min never passes R - T
    assert (make(ring_records=2 * T).ring_records, make(ring_records=2 * T).flush_min) == (2 * T, T)


def test_ring_bytes_are_the_replay_modes_and_smaller_than_its_scratch():
    sizes = {}
    for mode in ("two-phase", "fused-accept", "replay"):
        v = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode=mode)
        sizes[mode] = (v.ring_bytes, v.scratch_bytes)
        assert (v.ring_pending is None) == (mode != "replay")
    assert sizes["two-phase"][0] == sizes["fused-accept"][0] == 0
    ring, scratch = sizes["replay"]
    records = L * P * 3 * T * ((H * K + HV * K) * 4 + HV * V * 4)
    assert ring >= records + 2 * P * 4, "the records of every layer and the cursor"
    assert scratch == 0, "replay keeps no per-token states"
    assert 0 < ring < sizes["fused-accept"][1], "the ring is smaller than the scratch it replaces"


def test_bytes_moved_counts_the_state_traffic_when_asked(rng):
    """docs/shapes.md: a fused-accept verify moves 1 + T states a layer and row. Replay with flush_min 0, in its
    second round (the first round's records pending), reads the checkpoint, folds the records, writes the
    state back (a flush) and appends its records: more than two states, less than fused accept's 1 + T
    at this shape. Without count_bytes nothing is counted; clear_bytes_moved starts over."""
    counted = {}
    for name, mode, extra in (("fused-accept", "fused-accept", dict(count_bytes=True)),
                              ("replay", "replay", dict(count_bytes=True, flush_min=0)),
                              ("uncounted", "fused-accept", {})):
        v = kdagraph.Verifier(**SHAPE, slots=P, scratch_steps=T, max_rows=N, mode=mode, **extra)
        assert v.count_bytes == (name != "uncounted")
        buffers = runner_buffers(rng, "precomputed")
        runner = kdagraph.GraphRunner(v, buffers, exec="eager")
        runner.set_batch(list(range(N)))
        assert v.bytes_moved() == 0
        for r in range(2):
            for layer, fresh in zip(buffers, fresh_inputs(rng, "precomputed")):
                for key, x in fresh.items():
                    layer[key][...] = x
            v.clear_bytes_moved()
            assert v.bytes_moved() == 0
            runner.run_round()
            runner.accept(np.full(N, T, np.int32))
        counted[name] = v.bytes_moved()
    assert counted["uncounted"] == 0
    assert counted["fused-accept"] == L * N * (1 + T) * STATE_BYTES
    assert L * N * 2 * STATE_BYTES < counted["replay"] < counted["fused-accept"]


def test_ring_storage_is_refused_by_name():
    spec = kdagraph.RoundSpec(**SHAPE, mode="replay")
    good = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32), scratch_steps=T,
                ring_kg=np.zeros((L, P, spec.ring_kg_row_stride), np.float32),
                ring_u=np.zeros((L, P, spec.ring_u_row_stride), np.float32),
                ring_pending=np.zeros(P, np.int32), ring_start=np.zeros(P, np.int32))
    kdagraph.SlotStorage(spec, **good)
    bad = [("ring_kg", dict(ring_kg=None)), ("ring_u", dict(ring_u=None)), ("ring_pending", dict(ring_pending=None)),
           ("ring_start", dict(ring_start=None)),
           ("ring_kg", dict(ring_kg=np.zeros((L, P, spec.ring_kg_row_elems - 4), np.float32))),
           ("ring_kg", dict(ring_kg=np.zeros((L + 1, P, spec.ring_kg_row_stride), np.float32))),
           ("ring_kg[1]", dict(ring_kg=[np.zeros((P, spec.ring_kg_row_stride), np.float32),
                                        np.zeros((P, spec.ring_kg_row_stride), np.int32)])),
           ("ring_u", dict(ring_u=np.zeros((L, P, spec.ring_u_row_stride), np.float64))),
           ("ring_pending", dict(ring_pending=np.zeros(P + 1, np.int32))),
           ("ring_start", dict(ring_start=np.zeros(P, np.float32)))]
    for argument, change in bad:
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.SlotStorage(spec, **{**good, **change})
        assert e.value.argument == argument, str(e.value)
    fused = kdagraph.RoundSpec(**SHAPE)
    for name in ("ring_kg", "ring_u", "ring_pending", "ring_start"):
        with pytest.raises(kdagraph.InvalidArgument) as e:
            kdagraph.SlotStorage(fused, pool=good["pool"], accept_len=good["accept_len"], scratch_steps=T,
                                 scratch=np.zeros((L, P * T, HV, V, K), np.float32), **{name: good[name]})
        assert e.value.argument == name, str(e.value)


def test_too_few_ring_rows_are_refused_and_change_nothing():
    """The library's own check of the views: fewer ring rows than slots, named, nothing written."""
    spec = kdagraph.RoundSpec(**SHAPE, mode="replay")
    arrays = dict(pool=np.zeros((L, P, HV, V, K), np.float32), accept_len=np.zeros(P, np.int32),
                  ring_kg=np.zeros((L, P - 1, spec.ring_kg_row_stride), np.float32),
                  ring_u=np.zeros((L, P, spec.ring_u_row_stride), np.float32),
                  ring_pending=np.zeros(P, np.int32), ring_start=np.zeros(P, np.int32))
    storage = kdagraph.SlotStorage(spec, scratch_steps=T, **arrays)
    indices = kdagraph.RoundIndices(np.zeros(kdagraph.round_index_elems(N, T), np.int32), N, T)
    build = lambda: kdagraph.build_indices(spec, storage, indices, slots=np.arange(N, dtype=np.int32),
                                           n_real=np.array([N], np.int32), rows=N)
    with pytest.raises(kdagraph.InvalidArgument) as e:
        build()
    assert e.value.argument.startswith("storage.ring_kg"), str(e.value)
    expect_refused_unchanged(build, e.value.argument, **arrays)
