"""Builds torch_mp and its extension torch_mp._C against the installed torch.

Install with `pip install --no-build-isolation .` (or `-e .`): build isolation would fetch another torch.
"""
import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def library_sources():
    """The C++ sources shared with the CMake build (csrc/core, csrc/jit and csrc/kernels), as paths relative to setup.py."""
    sources = []
    for folder in ("core", "jit", "kernels"):
        sources += sorted(glob.glob(os.path.join("csrc", folder, "*.cpp"), root_dir=ROOT))
    return sources


setup(
    name="torch_mp",
    version="0.1.0",
    description="Mixed-precision conversion of PyTorch models to frozen TorchScript",
    packages=find_packages(include=["torch_mp", "torch_mp.*"]),
    python_requires=">=3.10",
    install_requires=["torch>=2.11,<2.15"],
    ext_modules=[
        CppExtension(
            name="torch_mp._C",
            sources=library_sources() + [os.path.join("csrc", "python", "bindings.cpp")],
            include_dirs=[os.path.join(ROOT, "csrc")],
            # -fopenmp: at::parallel_for (kernels/) is an OpenMP pragma in torch's headers; without the flag it runs
            # on one thread. Not linked: the symbols resolve to the OpenMP runtime torch itself loads.
            extra_compile_args=["-O2", "-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
