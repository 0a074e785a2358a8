import os
import sys

import pytest
import torch

# Plans depend on which low-precision kernels the CPU has (torch_mp.cpu_features): the suite plans for a CPU with
# fast kernels in both low dtypes so that it asserts the same plans on every CI machine; test_fast_kernels.py
# plans for CPUs without them.
os.environ["TORCH_MP_CPU_FEATURES"] = "all"

# the test suite's models and helpers (tests/python: small_models, agreement)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
