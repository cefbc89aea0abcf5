"""The GIL is released while the library works: another Python thread keeps running during one long
verify. Held, it would stop the other thread for the whole call."""

import threading
import time

import numpy as np

import kdagraph


def long_call(rng, B, T=128):
    """A verify of B rows of T tokens that writes only each row's last post-state (so the pool stays small)."""
    H, HV, K = 4, 8, 64
    u = lambda lo, hi, *shape: rng.uniform(lo, hi, shape).astype(np.float32)
    rows = np.full((B, T), -1, np.int32)
    rows[:, -1] = np.arange(B)
    args = (u(-1, 1, B, T, H, K), u(-1, 1, B, T, H, K), u(-1, 1, B, T, HV, K), u(-0.5, -0.01, B, T, HV, K),
            u(0.05, 0.95, B, T, HV))
    kw = dict(initial_state=u(-1, 1, B, HV, K, K), ssm_state_indices=rows, num_accepted_tokens=np.full(B, T, np.int32))
    return lambda: kdagraph.recurrent_kda(*args, **kw)


def test_another_thread_runs_while_a_verify_works(rng):
    B = 8
    while True:  # one call of at least 0.3 s
        run = long_call(rng, B)
        start = time.perf_counter()
        run()
        if time.perf_counter() - start >= 0.3 or B >= 1024:
            break
        B *= 2
    call = {}

    def work():
        t0 = time.perf_counter()
        run()
        call["seconds"] = time.perf_counter() - t0

    worker = threading.Thread(target=work)
    worker.start()
    longest, last = 0.0, time.perf_counter()
    while worker.is_alive():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert longest < 0.5 * call["seconds"], f"this thread stood still {longest:.3f} s of a {call['seconds']:.3f} s call"
