"""Builds torch_mp and its extension torch_mp._C against the installed torch, through the CMake build.

Install with `pip install --no-build-isolation .` (or `-e .`): build isolation would fetch another torch.

One build path: setup.py configures and builds the CMake target `torch_mp` (libtorch_mp.so, with precompiled torch
headers) in build/, exactly as `cmake -S . -B build` and CI do, then compiles the Python bindings
(csrc/python/bindings.cpp) against that library and puts it beside the extension (found through $ORIGIN: a copy in
a wheel, which then does not depend on this tree; a link to build/ in an editable install). CMake decides the CUDA build from the same environment
variables: TORCH_MP_CUDA=1 requires the CUDA kernels (an error says why they cannot be built), TORCH_MP_CUDA=0 leaves
them out, unset builds them when the installed torch has CUDA and nvcc is found; TORCH_CUDA_ARCH_LIST picks the GPU
architectures (default: the visible GPUs, or sm_80 and sm_90 + PTX where none is). The first configure leaves the
GoogleTest suite out (TORCH_MP_BUILD_TESTS=OFF: no GTest needed); a build folder configured with tests keeps them.
"""
import os
import re
import shutil
import subprocess
import sys

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(ROOT, "build")
LIBRARY = "libtorch_mp.so"


def fail(problem, remedy):
    raise SystemExit(f"torch_mp setup: {problem}\n  what to do: {remedy}")


def cmake_program():
    """The cmake on PATH, else the one of the `cmake` package of this Python."""
    found = shutil.which("cmake")
    if found:
        return found
    try:
        import cmake  # noqa: PLC0415  (PyPI's cmake package)
    except ImportError:
        fail("cmake was not found on PATH", "install it: `apt-get install cmake ninja-build` (Debian) or "
             "`pip install cmake ninja`, then run the install again")
    return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")


def cached_torch_dir(cache):
    with open(cache, encoding="utf-8") as lines:
        for line in lines:
            match = re.match(r"Torch_DIR:PATH=(.*)$", line.strip())
            if match:
                return match.group(1)
    return None


def configure_and_build_library():
    """Configures build/ where it is not yet, builds the library target, and returns the library's path."""
    cmake = cmake_program()
    torch_cmake = torch.utils.cmake_prefix_path
    cache = os.path.join(BUILD, "CMakeCache.txt")
    if os.path.isfile(cache):
        configured_for = cached_torch_dir(cache)
        wanted = os.path.join(torch_cmake, "Torch")
        if configured_for and os.path.realpath(configured_for) != os.path.realpath(wanted):
            fail(f"{BUILD} was configured for the torch at {configured_for}, not the installed {torch.__version__} "
                 f"at {wanted}", f"remove {BUILD} (`rm -rf build`) and install again")
        configure = [cmake, "-S", ROOT, "-B", BUILD]
    else:
        generator = ["-G", "Ninja"] if shutil.which("ninja") or _has_ninja_package() else []
        configure = [cmake, "-S", ROOT, "-B", BUILD, *generator, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_PREFIX_PATH={torch_cmake}", f"-DTORCH_MP_PYTHON={sys.executable}",
                     "-DTORCH_MP_BUILD_TESTS=OFF"]
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    for command in (configure, [cmake, "--build", BUILD, "--target", "torch_mp", "-j", jobs]):
        print("torch_mp setup:", " ".join(command), flush=True)
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            fail(f"`{' '.join(command)}` failed (its output is above)",
                 "read the first error above; a missing compiler or CMake package names itself there")
    return os.path.join(BUILD, LIBRARY)


def _has_ninja_package():
    try:
        import ninja  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


class BuildOverCMake(BuildExtension):
    """Builds the CMake library first, compiles the bindings against it, then puts it beside the extension: a copy
    in a wheel, a link to build/ in an editable install (so `cmake --build build` alone updates what Python loads)."""

    def run(self):
        library = configure_and_build_library()
        super().run()
        package_dir = os.path.dirname(self.get_ext_fullpath("torch_mp._C"))
        os.makedirs(package_dir, exist_ok=True)
        beside = os.path.join(package_dir, LIBRARY)
        if os.path.lexists(beside):
            os.remove(beside)
        if self.inplace:
            os.symlink(os.path.relpath(library, package_dir), beside)
        else:
            shutil.copy2(library, beside)


bindings = CppExtension(
    name="torch_mp._C",
    sources=[os.path.join("csrc", "python", name + ".cpp")
             for name in ("bindings", "conversions", "export_bindings", "int8_bindings", "policy_bindings",
                          "report_bindings")],
    include_dirs=[os.path.join(ROOT, "csrc")],
    library_dirs=[BUILD],
    libraries=["torch_mp"],
    extra_compile_args=["-O2"],
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

setup(
    name="torch_mp",
    version="0.1.0",
    description="Mixed-precision conversion of PyTorch models: frozen TorchScript, torch.export programs, "
                "AOTInductor packages",
    packages=find_packages(include=["torch_mp", "torch_mp.*"]),
    python_requires=">=3.10",
    install_requires=["torch>=2.11", "numpy", "graphviz"],
    ext_modules=[bindings],
    cmdclass={"build_ext": BuildOverCMake},
)
