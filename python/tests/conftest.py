"""Shared fixtures: torch (required when the build found it), seeded RNGs."""
import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py, next to the tests


@pytest.fixture(scope="session")
def torch():
    """torch, or a skip when it is not installed (a failure when the build
    saw it: ATTN_PYTHON_REQUIRE_TORCH=1, so CI cannot quietly skip)."""
    try:
        import torch as t
    except ImportError:
        if os.environ.get("ATTN_PYTHON_REQUIRE_TORCH") == "1":
            pytest.fail("torch was found at configure time but cannot be imported")
        pytest.skip("torch is not installed")
    t.set_num_threads(1)  # the suite shares a 2-core machine with the C tests
    return t


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name, printed on failure."""
    seed = zlib.crc32(request.node.name.encode())
    print(f"seed {seed}")
    return np.random.default_rng(seed)
