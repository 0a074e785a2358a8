"""Builds torch_mp and its extension torch_mp._C against the installed torch.

Install with `pip install --no-build-isolation .` (or `-e .`): build isolation would fetch another torch.

The extension is a CUDAExtension, with the CUDA kernels (csrc/kernels/cuda/*.cu, csrc/cuda/*.cpp) and
TORCH_MP_WITH_CUDA=1 defined, when the installed torch was built with CUDA and nvcc is found; else a CppExtension of
the CPU sources. TORCH_MP_CUDA=1 requires the CUDA build (an error says why it cannot be), TORCH_MP_CUDA=0 builds for
CPU only. Without TORCH_CUDA_ARCH_LIST the kernels are compiled for the visible GPUs, or for sm_80 and sm_90 (+PTX)
where none is visible.

TORCH_MP_LIBRARY=/path/to/libtorch_mp.so links the library of a CMake build of this tree (the same sources) instead of
compiling them again: the extension is then csrc/python/bindings.cpp alone, with that library's folder on its run
path, and holds CUDA code where the library does (TORCH_MP_CUDA=1 / 0 are checked against it). CI uses it to compile
the library once per stage.
"""
import glob
import os
import re
import subprocess

import torch
import torch.utils.cpp_extension as cpp_extension
from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CUDA_ARCH_LIST = "8.0;9.0+PTX"  # where no GPU is visible (CI): A100 and H100 code, PTX for newer GPUs


def sources(*patterns):
    """Files matching the globs under csrc/, sorted, as paths relative to setup.py."""
    return [path for pattern in patterns for path in sorted(glob.glob(os.path.join("csrc", pattern), root_dir=ROOT))]


def library_sources():
    """The C++ sources shared with the CMake build: csrc/core, csrc/jit and its folders, csrc/kernels and kernels/cpu."""
    return sources("core/*.cpp", "jit/*.cpp", "jit/*/*.cpp", "kernels/*.cpp", "kernels/cpu/*.cpp")


def cuda_sources():
    """The CUDA-only sources, also shared with the CMake build; there may be none."""
    return sources("kernels/cuda/*.cu", "cuda/*.cpp")


def is_cuda_home(path):
    return bool(path) and os.path.isfile(os.path.join(path, "bin", "nvcc")) and os.path.isfile(
        os.path.join(path, "include", "cuda_runtime.h"))


def find_cuda_home():
    """The CUDA toolkit torch.utils.cpp_extension found (CUDA_HOME, CUDA_PATH, the folder above the `nvcc` on PATH,
    /usr/local/cuda) if it holds nvcc and the CUDA headers, else the one that `nvcc` reports (a wrapper script such
    as /usr/local/bin/nvcc makes torch guess /usr/local), else /usr/local/cuda; None if there is none."""
    guess = cpp_extension.CUDA_HOME
    if is_cuda_home(guess):
        return guess
    for nvcc in (os.path.join(guess or "", "bin", "nvcc"), "nvcc"):
        try:
            dryrun = subprocess.run([nvcc, "-dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                                    capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        here = re.search(r"^#\$ _HERE_=(.*)$", dryrun.stdout + dryrun.stderr, re.MULTILINE)
        if here and is_cuda_home(os.path.dirname(here.group(1).strip())):
            return os.path.dirname(here.group(1).strip())
    return "/usr/local/cuda" if is_cuda_home("/usr/local/cuda") else None


def cuda_library_headers(cuda_home):
    """ATen's CUDA headers include cuBLAS, cuSPARSE and cuSOLVER headers, which a toolkit of nvcc alone lacks; the CUDA
    wheels torch depends on carry them (site-packages/nvidia/*/include). Only the headers the toolkit lacks, linked
    into one folder (build/cuda_library_headers), searched after the toolkit's own: the wheels of a newer CUDA (torch
    2.15's 13.2 beside nvcc 13.0) also carry the CUDA runtime's headers, which nvcc refuses to mix with its own."""
    toolkit = os.path.join(cuda_home, "include")
    if os.path.isfile(os.path.join(toolkit, "cusparse.h")):
        return []
    site_packages = os.path.dirname(os.path.dirname(torch.__file__))
    folder = os.path.join(ROOT, "build", "cuda_library_headers")
    os.makedirs(folder, exist_ok=True)
    for header in sorted(glob.glob(os.path.join(site_packages, "nvidia", "*", "include", "*"))):
        name = os.path.basename(header)
        link = os.path.join(folder, name)
        if not os.path.exists(os.path.join(toolkit, name)) and not os.path.lexists(link):
            os.symlink(header, link)
    return [folder]


def cuda_setting():
    """TORCH_MP_CUDA as True (1), False (0) or None (unset: automatic)."""
    setting = os.environ.get("TORCH_MP_CUDA", "").strip().lower()
    if setting in ("0", "off", "false", "no"):
        return False
    if setting in ("1", "on", "true", "yes"):
        return True
    if setting not in ("", "auto"):
        raise SystemExit(f"TORCH_MP_CUDA={setting!r}: expected 1 (CUDA build), 0 (CPU build) or unset (automatic)")
    return None


def use_cuda():
    """Whether to build the CUDA kernels: TORCH_MP_CUDA=1 / 0 decide, else whether torch has CUDA and nvcc is found.
    Points torch.utils.cpp_extension at the toolkit it found."""
    setting = cuda_setting()
    if setting is False:
        return False
    forced = setting is True
    if torch.version.cuda is None:
        if forced:
            raise SystemExit(f"TORCH_MP_CUDA={setting}: the installed torch {torch.__version__} has no CUDA; "
                             "install a CUDA build of torch or unset TORCH_MP_CUDA")
        return False
    cuda_home = find_cuda_home()
    if cuda_home is None:
        if forced:
            raise SystemExit(f"TORCH_MP_CUDA={setting}: no CUDA toolkit found for torch {torch.__version__} "
                             f"(CUDA {torch.version.cuda}); install nvcc or set CUDA_HOME to the toolkit's folder")
        return False
    cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"] = cuda_home
    return True


def links_cuda(library):
    """Whether a shared library was linked against torch's CUDA libraries (its dynamic section needs libc10_cuda)."""
    needed = subprocess.run(["readelf", "-dW", library], capture_output=True, text=True, check=True).stdout
    return "libc10_cuda.so" in needed


def extension_over(library):
    """The extension as bindings.cpp linked to a CMake-built libtorch_mp.so (TORCH_MP_LIBRARY)."""
    library = os.path.abspath(library)
    if not os.path.basename(library).startswith("libtorch_mp.") or not os.path.isfile(library):
        raise SystemExit(f"TORCH_MP_LIBRARY={library}: not a libtorch_mp.so; build the CMake target torch_mp (see "
                         "README) and point to build/libtorch_mp.so, or unset TORCH_MP_LIBRARY")
    with_cuda, wanted = links_cuda(library), cuda_setting()
    if wanted is not None and wanted != with_cuda:
        raise SystemExit(f"TORCH_MP_CUDA={os.environ['TORCH_MP_CUDA']} but {library} was built "
                         f"{'with' if with_cuda else 'without'} CUDA kernels; rebuild it with -DTORCH_MP_CUDA="
                         f"{'ON' if wanted else 'OFF'} or unset TORCH_MP_CUDA")
    folder = os.path.dirname(library)
    return CppExtension(
        name="torch_mp._C",
        sources=[os.path.join("csrc", "python", "bindings.cpp")],
        include_dirs=[os.path.join(ROOT, "csrc")],
        library_dirs=[folder],
        libraries=["torch_mp"],
        extra_compile_args=["-O2"],
        extra_link_args=[f"-Wl,-rpath,{folder}"],
    )


def extension():
    if os.environ.get("TORCH_MP_LIBRARY"):
        return extension_over(os.environ["TORCH_MP_LIBRARY"])
    cxx_flags = ["-O2", "-fopenmp"]
    # -fopenmp: at::parallel_for (kernels/) is an OpenMP pragma in torch's headers; without the flag it runs on one
    # thread. Not linked: the symbols resolve to the OpenMP runtime torch itself loads.
    common = dict(
        name="torch_mp._C",
        sources=library_sources() + [os.path.join("csrc", "python", "bindings.cpp")],
        include_dirs=[os.path.join(ROOT, "csrc")],
    )
    if not use_cuda():
        return CppExtension(**common, extra_compile_args=cxx_flags)
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and torch.cuda.device_count() == 0:
        os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_CUDA_ARCH_LIST
    print(f"torch_mp: CUDA build, nvcc from {cpp_extension.CUDA_HOME}, "
          f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '(the visible GPUs)')}")
    common["sources"] += cuda_sources()
    ext = CUDAExtension(
        **common,
        define_macros=[("TORCH_MP_WITH_CUDA", "1")],  # C++ and nvcc alike
        # --fmad=false: a*b+c is never contracted into an FMA, so each op of a fused chain rounds as the ATen op it
        # stands for (bit-identical results); write fmaf() where ATen's kernel computes one. No --use_fast_math.
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3", "--fmad=false", "--expt-relaxed-constexpr"]},
    )
    ext.include_dirs += cuda_library_headers(cpp_extension.CUDA_HOME)  # after torch's and the toolkit's
    return ext


setup(
    name="torch_mp",
    version="0.1.0",
    description="Mixed-precision conversion of PyTorch models to frozen TorchScript",
    packages=find_packages(include=["torch_mp", "torch_mp.*"]),
    python_requires=">=3.10",
    install_requires=["torch>=2.11", "graphviz"],
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
)
