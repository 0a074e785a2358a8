"""The C++ CudaGraphRunner over an AOTInductor package (CudaGraphRunner::forPackage): a CUDA package of
torch_mp.aoti_compile, replayed by the gtest CudaGraphRunnerTest.APackageReplaysEqualItsOwnCalls, equals the package's
own calls bit for bit. The gtest takes the package from TORCH_MP_TEST_CUDA_PACKAGE; this test makes it."""
import os
import subprocess

import pytest
import torch
from torch import nn

import torch_mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA_TESTS = os.environ.get("TORCH_MP_CUDA_TESTS", os.path.join(ROOT, "build", "torch_mp_cuda_tests"))


@pytest.mark.cuda
def test_the_cpp_runner_replays_a_cuda_package_as_the_package_runs(tmp_path):
    if not os.path.exists(CUDA_TESTS):
        pytest.fail(f"{CUDA_TESTS} is not built: cmake with -DTORCH_MP_BUILD_TESTS=ON and a CUDA torch "
                    "(docs/BUILD.md), or set TORCH_MP_CUDA_TESTS")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval().cuda()
    path = torch_mp.aoti_compile(model, (torch.randn(2, 16, device="cuda"),), torch.float16, tmp_path / "m.pt2")
    result = subprocess.run([CUDA_TESTS, "--gtest_filter=CudaGraphRunnerTest.APackageReplaysEqualItsOwnCalls"],
                            env={**os.environ, "TORCH_MP_TEST_CUDA_PACKAGE": str(path)}, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[  PASSED  ] 1 test" in result.stdout and "SKIPPED" not in result.stdout, result.stdout
