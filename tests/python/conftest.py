import os

import pytest
import torch

# Plans depend on which low-precision kernels the CPU has (torch_mp.cpu_features): the suite plans for a CPU with
# fast kernels in both low dtypes so that it asserts the same plans on every CI machine; test_fast_kernels.py
# plans for CPUs without them.
os.environ["TORCH_MP_CPU_FEATURES"] = "all"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU; skipped where torch.cuda.is_available() is False")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def cpp_example():
    """Path of the C++ example program built by CMake (build/ by default, or $TORCH_MP_CPP_EXAMPLE)."""
    path = os.environ.get("TORCH_MP_CPP_EXAMPLE", os.path.join(ROOT, "build", "torch_mp_example"))
    if not os.path.exists(path):
        pytest.fail(f"C++ example not built at {path}: run cmake (see README) or set TORCH_MP_CPP_EXAMPLE")
    return path
