import os

import pytest
import torch

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
