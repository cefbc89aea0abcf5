"""Fresh random inputs for every test; the seed is printed, and KDAGRAPH_TEST_SEED repeats it."""

import os
import secrets

import numpy as np
import pytest


@pytest.fixture
def rng():
    seed = int(os.environ.get("KDAGRAPH_TEST_SEED", secrets.randbits(63)))
    print(f"seed {seed} (KDAGRAPH_TEST_SEED={seed} repeats it)")
    return np.random.default_rng(seed)
