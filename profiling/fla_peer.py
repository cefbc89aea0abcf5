#!/usr/bin/env python3
"""kdagraph's verify beside flash-linear-attention's Triton KDA verify: same GPU, same tensors, same indices
(issue 24). FlashInfer's KDA kernels need SM100 (Blackwell; its own tests skip below it), so on Hopper the
peers are flash-linear-attention's Triton kernels.

    fla_peer.py [--csv FILE] [--md FILE] [--replays N] [--dry-run]

The peer is fla-core 0.6.0's fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd with FLA's backend
dispatch off (FLA_DISABLE_BACKEND_DISPATCH=1: its own Triton kernel, whatever else is installed). It stays
here, in a profiling script: the library never imports it. Each shape runs the same T-token verify both
ways, with per-token post-states on one fp32 pool [rows, HV, V, K] (V-major, FLA's state_v_first) and
SGLang's fused-accept indices from kdagraph.build_fused_accept_indices (row slot * S + t; the seed is row
ssm_state_indices[b, num_accepted_tokens[b] - 1]); bf16 q, k, v, raw gate input and beta logits; gate,
beta sigmoid and q/k L2 norm in the kernel. FLA is never given a padded (negative) row: every row is real.

Correctness: one eager call of each from copies of the same pool. Outputs and post-states against each
other (every row) and against an fp64 reference (numpy, a few rows); the rows of the slots outside the
batch must be bitwise unchanged. Tolerance: the project's for bf16 io, 1e-2 relative.

Timing: each call alone in a CUDA graph, captured after a warm-up that covers Triton's compile; CUDA
events around each replay, medians. A short spin kernel (torch.cuda._sleep) runs before each start event,
so the replay is queued before the timer starts and the time is the device's alone (the C++ benchmarks
hold the stream with profiling/launch_gate.h instead). Cold: L2 flushed before each replay; warm: not.
Aim (issue 31): kdagraph at least 1.3x FLA on every shape of the grid (cold medians); the grid is the
sweep's (profiling/bench_verify_sweep.cu): batch 1, 8, 32, 128 x HV 16, 32 x T 2, 4, 8.

Exit status: 0 when every shape agrees; 1 when one disagrees or a call fails; 77 (UNAVAILABLE) when
fla-core, torch, numpy or a CUDA device is missing.
"""

import argparse
import importlib.util
import math
import os
import statistics
import sys
from dataclasses import dataclass

try:
    import numpy as np
except ImportError:  # the dry run needs only the standard library; a measured run reports it missing
    np = None

UNAVAILABLE = 77
PEERS = ("FlashInfer's KDA kernels need SM100 (Blackwell; its own tests skip below it), so on Hopper the peers "
         "are flash-linear-attention's Triton kernels.")
HEAD_DIM = 128
TOLERANCE = 1e-2  # bf16 io (tests/kernels/verify_cuda_test.cpp, tests/python/test_recurrent_kda.py)
SPIN_CYCLES = 200_000  # ~100 us at the H200's 1.98 GHz: longer than Python takes to enqueue a replay
GRID_BATCHES, GRID_VALUE_HEADS, GRID_TOKENS = (1, 8, 32, 128), (16, 32), (2, 4, 8)
# The keywords issue 24 gives the FLA call, besides (q, k, v, g, beta) and the tensors.
FLA_FLAGS = dict(inplace_final_state=True, state_v_first=True, use_qk_l2norm_in_kernel=True,
                 use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)


@dataclass(frozen=True)
class Shape:
    batch: int
    value_heads: int
    tokens: int
    head_dim: int = HEAD_DIM

    @property
    def heads(self):  # Kimi-Linear: H = HV
        return self.value_heads

    @property
    def slots(self):  # slots outside the batch too, whose rows nobody may touch
        return self.batch + max(2, self.batch // 4)

    @property
    def rows(self):  # scratch rows: S = T steps per slot
        return self.slots * self.tokens

    @property
    def scale(self):
        return self.head_dim ** -0.5


def grid():
    return [Shape(b, hv, t) for hv in GRID_VALUE_HEADS for t in GRID_TOKENS for b in GRID_BATCHES]


def tensor_shapes(s: Shape):
    """Every tensor of one shape's case: (dims, dtype)."""
    B, T, H, HV, K = s.batch, s.tokens, s.heads, s.value_heads, s.head_dim
    io = "bfloat16"
    return {"q": ((B, T, H, K), io), "k": ((B, T, H, K), io), "v": ((B, T, HV, K), io),
            "g": ((B, T, HV, K), io), "beta": ((B, T, HV), io), "A_log": ((HV,), "float32"),
            "dt_bias": ((HV * K,), "float32"), "pool": ((s.rows, HV, K, K), "float32"),
            "slots": ((B,), "int32"), "accept_lens_pool": ((s.slots,), "int32"),
            "ssm_state_indices": ((B, T), "int32"), "num_accepted_tokens": ((B,), "int32"),
            "o": ((B, T, HV, K), io)}


def batch_plan(s: Shape, rng):
    """The batch's slots (distinct, some slots left out) and every slot's accept length in [1, T]."""
    slots = rng.permutation(s.slots)[: s.batch].astype(np.int32)
    accept = rng.integers(1, s.tokens + 1, size=s.slots).astype(np.int32)
    return slots, accept


def expected_indices(slots, accept, s: Shape):
    """SGLang's fused-accept indices: row slot * S + t (S = T), the slot's accept length gathered."""
    rows = slots[:, None].astype(np.int64) * s.tokens + np.arange(s.tokens)[None, :]
    return rows.astype(np.int32), accept[slots]


def kdagraph_call(t, s: Shape):
    """kdagraph.recurrent_kda's arguments (FlashInfer's signature) on the tensors `t`."""
    return (t["q"], t["k"], t["v"], t["g"], t["beta"]), dict(
        A_log=t["A_log"], dt_bias=t["dt_bias"], scale=s.scale, initial_state=t["pool_kdagraph"],
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, ssm_state_indices=t["ssm_state_indices"],
        num_accepted_tokens=t["num_accepted_tokens"], output=t["o_kdagraph"], beta_is_logit=True)


def fla_call(t, s: Shape):
    """fused_recurrent_kda_fwd's arguments, as issue 24 lists them, on the same tensors `t`."""
    return (t["q"], t["k"], t["v"], t["g"], t["beta"]), dict(
        A_log=t["A_log"], dt_bias=t["dt_bias"], initial_state=t["pool_fla"], scale=s.scale,
        ssm_state_indices=t["ssm_state_indices"], num_accepted_tokens=t["num_accepted_tokens"],
        out=t["o_fla"], **FLA_FLAGS)


def unnamed_keywords(fn, kwargs):
    """Keywords `fn` has no parameter of its own for. FLA's function takes **kwargs, which would swallow a
    misspelt flag silently and run with its default."""
    import inspect

    params = inspect.signature(fn).parameters
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return sorted(set(kwargs) - named)


# ---- the fp64 reference (docs/math.md), a few rows, numpy --------------------------------------------------

def softplus(z):
    return np.where(z > 20.0, z, np.log1p(np.exp(np.minimum(z, 20.0))))


def reference_row(seed, q, k, v, x, beta_logit, A_log, dt_bias, scale):
    """One row's verify in fp64: seed [HV, V, K] (V-major), q, k [T, H, K], v [T, HV, V], raw gate input
    x [T, HV, K], beta logits [T, HV]; L2 norm, gate and beta sigmoid as the kernels do them. Returns
    (outputs [T, HV, V], post-states [T, HV, V, K])."""
    state = np.array(seed, dtype=np.float64)
    T, H, K = q.shape
    HV = v.shape[1]
    group = HV // H
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * scale
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    decay = -np.exp(np.asarray(A_log, np.float64))[None, :, None] * softplus(
        np.asarray(x, np.float64) + np.asarray(dt_bias, np.float64).reshape(HV, K)[None])
    beta = 1.0 / (1.0 + np.exp(-np.asarray(beta_logit, np.float64)))
    heads = np.arange(HV) // group
    outputs = np.zeros((T,) + v.shape[1:])
    posts = np.zeros((T,) + state.shape)
    for t in range(T):
        kt, qt = k[t, heads], q[t, heads]                              # [HV, K]
        state *= np.exp(decay[t])[:, None, :]                          # S'[j][i] = a[i] S[j][i]
        p = np.einsum("hji,hi->hj", state, kt)                         # p[j] = sum_i S'[j][i] k[i]
        u = beta[t][:, None] * (np.asarray(v[t], np.float64) - p)      # u[j] = beta (v[j] - p[j])
        state += u[:, :, None] * kt[:, None, :]                        # S[j][i] += k[i] u[j]
        outputs[t] = np.einsum("hji,hi->hj", state, qt)                # o[j] = sum_i S[j][i] q[i]
        posts[t] = state
    return outputs, posts


# ---- comparisons (numpy arrays or torch tensors) ---------------------------------------------------------

def rel_error(got, want):
    """||got - want|| / ||want|| in fp64, on whatever device the arrays live; NaN in either: inf."""
    if hasattr(got, "double"):  # torch
        diff, ref = float((got.double() - want.double()).norm()), float(want.double().norm())
    else:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        diff, ref = float(np.linalg.norm(got - want)), float(np.linalg.norm(want))
    if math.isnan(diff) or math.isnan(ref):
        return math.inf
    return diff / ref if ref > 0 else diff


@dataclass
class Agreement:
    """Relative errors of one shape; `untouched` False when a row outside the batch changed."""
    out_kdagraph: float
    out_fla: float
    state_kdagraph: float
    state_fla: float
    out_between: float
    state_between: float
    untouched: bool = True

    @property
    def agrees(self):
        return self.untouched and max(self.out_kdagraph, self.out_fla, self.state_kdagraph, self.state_fla,
                                      self.out_between, self.state_between) <= TOLERANCE


def agreement(o_kdagraph, o_fla, written_kdagraph, written_fla, ref_rows, ref_out, ref_posts, untouched=True):
    """Outputs [B, T, HV, V] and the written pool rows [B, T, HV, V, K] of both calls against each other
    (every row) and, at the batch rows `ref_rows`, against the fp64 reference's outputs and post-states."""
    host = (lambda a: a.float().cpu().numpy()) if hasattr(o_kdagraph, "float") else np.asarray
    return Agreement(
        out_kdagraph=rel_error(host(o_kdagraph[ref_rows]), ref_out),
        out_fla=rel_error(host(o_fla[ref_rows]), ref_out),
        state_kdagraph=rel_error(host(written_kdagraph[ref_rows]), ref_posts),
        state_fla=rel_error(host(written_fla[ref_rows]), ref_posts),
        out_between=rel_error(o_kdagraph, o_fla),
        state_between=rel_error(written_kdagraph, written_fla),
        untouched=untouched)


def reference_rows(s: Shape):
    """The batch rows checked against the fp64 reference: the first and the last."""
    return sorted({0, s.batch - 1})


# ---- on the GPU ---------------------------------------------------------------------------------------------

def make_tensors(torch, kdagraph, s: Shape, rng, device="cuda"):
    """Fresh random tensors of one shape (in the ranges of kdagraph's synthetic inputs), the batch's
    indices built by kdagraph.build_fused_accept_indices and checked against the plan, and a pool and a
    poisoned output for each of the two calls."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(1 << 62)))
    dims = tensor_shapes(s)

    def uniform(name, lo, hi):
        shape, dtype = dims[name]
        x = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (hi - lo) + lo
        return x.to(getattr(torch, dtype))

    t = {"q": uniform("q", -1, 1), "k": uniform("k", -1, 1), "v": uniform("v", -1, 1),
         "g": uniform("g", -4, 2), "beta": uniform("beta", -3, 3), "A_log": uniform("A_log", -1.5, 0.5),
         "dt_bias": uniform("dt_bias", -0.5, 0.5), "pool": uniform("pool", -0.5, 0.5)}
    slots, accept = batch_plan(s, rng)
    t["slots"] = torch.from_numpy(slots).to(device)
    t["accept_lens_pool"] = torch.from_numpy(accept).to(device)
    idx, nat = kdagraph.build_fused_accept_indices(slots=t["slots"], scratch_steps=s.tokens,
                                                   draft_token_num=s.tokens, accept_lens_pool=t["accept_lens_pool"])
    want_idx, want_nat = expected_indices(slots, accept, s)
    torch.cuda.synchronize()
    if not (np.array_equal(idx.cpu().numpy(), want_idx) and np.array_equal(nat.cpu().numpy(), want_nat)):
        raise RuntimeError(f"{s}: build_fused_accept_indices gave other rows than slot * S + t")
    t["ssm_state_indices"], t["num_accepted_tokens"] = idx, nat
    for who in ("kdagraph", "fla"):
        t["pool_" + who] = t["pool"].clone()
        t["o_" + who] = torch.full(dims["o"][0], float("nan"), device=device, dtype=torch.bfloat16)  # poisoned
    return t


def check(torch, kdagraph, fla_fwd, s: Shape, t):
    """One eager call of each from the same pool, then the comparisons."""
    for fn, call in ((kdagraph.recurrent_kda, kdagraph_call), (fla_fwd, fla_call)):
        args, kwargs = call(t, s)
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    idx = t["ssm_state_indices"].long()
    written = {who: t["pool_" + who][idx] for who in ("kdagraph", "fla")}  # [B, T, HV, V, K]
    others = torch.ones(s.rows, dtype=torch.bool, device=idx.device)
    others[idx.flatten()] = False
    untouched = all(torch.equal(t["pool_" + who][others], t["pool"][others]) for who in ("kdagraph", "fla"))

    rows = reference_rows(s)
    host = lambda x: x.float().cpu().numpy()
    nat = t["num_accepted_tokens"].cpu().numpy()
    idx_host = idx.cpu().numpy()
    refs = [reference_row(host(t["pool"][int(idx_host[b, nat[b] - 1])]), host(t["q"][b]), host(t["k"][b]),
                          host(t["v"][b]), host(t["g"][b]), host(t["beta"][b]), host(t["A_log"]),
                          host(t["dt_bias"]), s.scale) for b in rows]
    return agreement(t["o_kdagraph"], t["o_fla"], written["kdagraph"], written["fla"], rows,
                     np.stack([r[0] for r in refs]), np.stack([r[1] for r in refs]), untouched)


def time_replays(torch, fn, args, kwargs, replays, flush):
    """Median device microseconds of one call replayed from a CUDA graph: {"cold": ..., "warm": ...}."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # Triton's compile and autotuning, kdagraph's error word: outside the capture
            fn(*args, **kwargs)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn(*args, **kwargs)
    medians = {}
    with torch.cuda.stream(stream):
        graph.replay()
        for kind, buffer in (("cold", flush), ("warm", None)):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
            for i in range(replays):
                if buffer is not None:
                    buffer.fill_(i & 0xFF)
                torch.cuda._sleep(SPIN_CYCLES)
                starts[i].record(stream)
                graph.replay()
                ends[i].record(stream)
            stream.synchronize()
            medians[kind] = 1e3 * statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends))
    return medians


def state_bytes(s: Shape):
    """docs/shapes.md plus the inputs: the seed and T post-states per (row, head), q, k, v, g, beta, o."""
    K, HV, T, B = s.head_dim, s.value_heads, s.tokens, s.batch
    state = B * HV * (1 + T) * K * K * 4
    io = B * T * (2 * s.heads * K + 3 * HV * K + HV) * 2
    return state + io


# ---- report ----------------------------------------------------------------------------------------------------

COLUMNS = ["value_heads", "tokens", "batch", "bytes", "kdagraph_cold_us", "fla_cold_us", "speedup_cold",
           "kdagraph_warm_us", "fla_warm_us", "speedup_warm", "out_err_kdagraph", "out_err_fla",
           "state_err_kdagraph", "state_err_fla", "out_diff_between", "state_diff_between", "untouched",
           "agrees", "aim", "result"]


AIM_SPEEDUP = 1.3  # issue 31: kdagraph at least 1.3x FLA on every shape of the grid


def judged(s: Shape, speedup_cold):
    return f">= {AIM_SPEEDUP}x", "pass" if speedup_cold >= AIM_SPEEDUP else "miss"


def markdown(results, device_name):
    lines = [f"kdagraph.recurrent_kda against FLA's Triton fused_recurrent_kda_fwd (fla-core 0.6.0) on {device_name}. "
             f"{PEERS} K = V = {HEAD_DIM}, H = HV, bf16 io, fp32 state, gate/beta/L2 norm in the kernel; "
             "medians of CUDA-graph replays (us); errors relative, against fp64 (rows 0 and B - 1) and between "
             "the two (every row); aim: >= 1.3x on every shape (cold; issue 31).", "",
             "| HV | T | batch | kdagraph cold | FLA cold | speedup | kdagraph warm | FLA warm | speedup | "
             "out err kdagraph / FLA | state err kdagraph / FLA | kdagraph vs FLA out / state | agree | aim | result |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['value_heads']} | {r['tokens']} | {r['batch']} | {r['kdagraph_cold_us']:.1f} | "
                     f"{r['fla_cold_us']:.1f} | {r['speedup_cold']:.2f} | {r['kdagraph_warm_us']:.1f} | "
                     f"{r['fla_warm_us']:.1f} | {r['speedup_warm']:.2f} | {r['out_err_kdagraph']:.1e} / "
                     f"{r['out_err_fla']:.1e} | {r['state_err_kdagraph']:.1e} / {r['state_err_fla']:.1e} | "
                     f"{r['out_diff_between']:.1e} / {r['state_diff_between']:.1e} | "
                     f"{'yes' if r['agrees'] else 'NO'} | {r['aim']} | {r['result']} |")
    misses = sum(r["result"] == "miss" for r in results)
    differ = sum(not r["agrees"] for r in results)
    lines.append("")
    lines.append(f"{len(results)} shapes: {differ} disagree, {misses} miss the speed aim")
    return "\n".join(lines) + "\n"


def describe_call(name, call, s: Shape):
    """A call's line for the dry run: each tensor as its dims and dtype."""
    dims = tensor_shapes(s)
    alias = {"pool_kdagraph": "pool", "pool_fla": "pool", "o_kdagraph": "o", "o_fla": "o"}
    t = {n: f"{n}{list(dims[alias.get(n, n)][0])}:{dims[alias.get(n, n)][1]}"
         for n in list(dims) + list(alias)}
    args, kwargs = call(t, s)
    return f"{name}({', '.join(args)}, " + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"


def unavailable(reason):
    print(f"UNAVAILABLE: {reason}")
    return UNAVAILABLE


def fla_installed():
    try:
        return importlib.util.find_spec("fla") is not None
    except (ImportError, ValueError):  # a parent that is not a package, or an import blocked in sys.modules
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv")
    ap.add_argument("--md")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None, help="numpy seed of the case plans (default: fresh)")
    ap.add_argument("--dry-run", action="store_true", help="print each shape's two calls; needs no GPU, torch, fla or numpy")
    args = ap.parse_args(argv)
    print(PEERS)
    if args.dry_run:
        for s in grid():
            print(describe_call("kdagraph.recurrent_kda", kdagraph_call, s))
            print(describe_call("fused_recurrent_kda_fwd", fla_call, s))
        print(f"{len(grid())} shapes")
        return 0

    if np is None:
        return unavailable("numpy is not installed for this python")
    if not fla_installed():
        return unavailable("fla-core is not installed (carry .whl/fla_core-0.6.0-py3-none-any.whl; gpu_check.sh "
                           "installs it with pip --no-index --no-deps --target)")
    try:
        import torch
    except ImportError as e:
        return unavailable(f"torch: {e}")
    if not torch.cuda.is_available():
        return unavailable("no CUDA device visible to torch")
    os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"  # FLA's own Triton kernel, nothing it dispatches to
    import fla
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    import kdagraph

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(7), "little")
    rng = np.random.default_rng(seed)
    device_name = torch.cuda.get_device_name()
    print(f"fla-core {fla.__version__}, torch {torch.__version__}, kdagraph {kdagraph.__file__}, {device_name}, seed {seed}")
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    flush = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")
    results, failed = [], False
    # The CSV is written row by row: a run stopped at its cap keeps the shapes it measured
    # (sweep_report.py names the shapes without a row).
    csv_file = open(args.csv, "w") if args.csv else None
    if csv_file:
        csv_file.write(",".join(COLUMNS) + "\n")
        csv_file.flush()
    for s in grid():
        try:
            t = make_tensors(torch, kdagraph, s, rng)
            _, fla_kwargs = fla_call(t, s)
            stray = unnamed_keywords(fused_recurrent_kda_fwd, fla_kwargs)
            if stray:
                raise RuntimeError(f"fused_recurrent_kda_fwd has no parameter {stray}: **kwargs would swallow it")
            agree = check(torch, kdagraph, fused_recurrent_kda_fwd, s, t)
            times = {who: time_replays(torch, fn, *call(t, s), args.replays, flush)
                     for who, fn, call in (("kdagraph", kdagraph.recurrent_kda, kdagraph_call),
                                           ("fla", fused_recurrent_kda_fwd, fla_call))}
        except Exception as e:  # one shape's failure is reported; the others still run
            print(f"HV={s.value_heads} T={s.tokens} batch={s.batch}: FAILED: {type(e).__name__}: {e}")
            failed = True
            continue
        finally:
            t = None
            torch.cuda.empty_cache()
        speedup = times["fla"]["cold"] / times["kdagraph"]["cold"]
        aim, result = judged(s, speedup)
        r = dict(value_heads=s.value_heads, tokens=s.tokens, batch=s.batch, bytes=state_bytes(s),
                 kdagraph_cold_us=times["kdagraph"]["cold"], fla_cold_us=times["fla"]["cold"], speedup_cold=speedup,
                 kdagraph_warm_us=times["kdagraph"]["warm"], fla_warm_us=times["fla"]["warm"],
                 speedup_warm=times["fla"]["warm"] / times["kdagraph"]["warm"],
                 out_err_kdagraph=agree.out_kdagraph, out_err_fla=agree.out_fla,
                 state_err_kdagraph=agree.state_kdagraph, state_err_fla=agree.state_fla,
                 out_diff_between=agree.out_between, state_diff_between=agree.state_between,
                 untouched=agree.untouched, agrees=agree.agrees, aim=aim, result=result)
        results.append(r)
        if csv_file:
            csv_file.write(",".join(str(r[c]) for c in COLUMNS) + "\n")
            csv_file.flush()
        print(f"HV={s.value_heads} T={s.tokens} batch={s.batch}: kdagraph {r['kdagraph_cold_us']:.1f} us, "
              f"FLA {r['fla_cold_us']:.1f} us cold ({speedup:.2f}x); agree: {agree.agrees}", flush=True)
        failed = failed or not agree.agrees
    text = markdown(results, device_name)
    print()
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if csv_file:
        csv_file.close()
    return 1 if failed or len(results) < len(grid()) else 0


if __name__ == "__main__":
    sys.exit(main())
