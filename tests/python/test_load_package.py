"""torch_mp.load of an AOTInductor package: the package's callable on a CPU; on a GPU, a CUDA package loaded to run
single-threaded and wrapped in the same bounded, falling-back CUDA-graph replay as a TorchScript file.

On the CPU the GPU path runs with a stand-in (the `on_a_gpu` fixture): torch.cuda.is_available() says True, the CPU
package is taken for a CUDA one, and cpu_graphs.CpuGraphs (static buffers as a CUDA graph keeps them) replaces
CudaGraphModule; the test marked cuda records real CUDA graphs. A replay runs the package's kernels, so outputs are
compared bit for bit.
"""
import importlib
import pathlib
import warnings
import zipfile

import pytest
import torch
import torch._inductor
from torch import nn

import torch_mp
from cpu_graphs import CpuGraphs
from torch_mp.cuda_graphs import CudaGraphFallbackWarning

_load = importlib.import_module("torch_mp._load")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour where no GPU exists")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A CPU package of one Linear with a dynamic batch (compiled once for the module: AOTInductor builds C++)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("package") / "linear.pt2"
    batch = torch.export.Dim("batch", min=1, max=64)
    return torch_mp.aoti_compile(nn.Linear(4, 3).eval(), (torch.randn(2, 4),), torch.bfloat16, path,
                                 dynamic_shapes=({0: batch},))


@pytest.fixture(scope="module")
def reference(package):
    return torch._inductor.aoti_load_package(package)


@pytest.fixture
def as_cuda_package(monkeypatch):
    """The CPU package taken for one compiled for cuda."""
    monkeypatch.setattr(_load, "_package_device", lambda path: "cuda")


@pytest.fixture
def on_a_gpu(monkeypatch):
    """torch_mp.load as on a machine with a GPU (see the module docstring); the list of the (run_single_threaded,
    device_index) of each package load."""
    loads = []
    load_package = torch._inductor.aoti_load_package

    def fake_load_package(path, run_single_threaded=False, device_index=-1):
        loads.append((run_single_threaded, device_index))
        return load_package(path, run_single_threaded=run_single_threaded)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", fake_load_package)
    monkeypatch.setattr(_load, "CudaGraphModule", CpuGraphs)
    return loads


@pytest.mark.parametrize("as_path", [str, pathlib.Path], ids=["str", "Path"])
def test_on_a_cpu_a_package_loads_as_aoti_load_package_loads_it(package, reference, as_path):
    loaded = torch_mp.load(as_path(package))  # cuda_graphs=True, the default, means nothing for a CPU package
    assert type(loaded) is type(reference)
    for batch in (1, 2, 5):
        x = torch.randn(batch, 4)
        assert torch.equal(loaded(x), reference(x))
    assert type(torch_mp.load(package, "cpu", cuda_graphs=False)) is type(reference)


def test_a_package_is_told_by_its_content_not_its_name(package, reference, tmp_path):
    renamed = tmp_path / "linear.bin"
    renamed.write_bytes(pathlib.Path(package).read_bytes())
    x = torch.randn(3, 4)
    assert torch.equal(torch_mp.load(renamed)(x), reference(x))
    scripted = tmp_path / "scripted.pt2"  # a TorchScript zip named like a package
    torch.jit.save(torch.jit.script(nn.Linear(4, 3).eval()), scripted)
    assert isinstance(torch_mp.load(scripted, "cpu"), torch.jit.ScriptModule)


def test_a_cpu_package_asked_for_on_another_device_is_refused(package):
    for device in ("cuda", "cuda:0", torch.device("meta")):
        with pytest.raises(ValueError, match=r"linear.pt2 is an AOTInductor package compiled for cpu; it cannot run "
                                             rf"on {torch.device(device)}: compile it again"):
            torch_mp.load(package, device)


@pytest.mark.usefixtures("as_cuda_package")
def test_a_cuda_package_asked_for_on_the_cpu_is_refused(package):
    with pytest.raises(ValueError, match="compiled for cuda; it cannot run on cpu"):
        torch_mp.load(package, "cpu")


@no_gpu
@pytest.mark.usefixtures("as_cuda_package")
def test_a_cuda_package_without_a_gpu_says_so(package):
    with pytest.raises(RuntimeError, match="compiled for cuda, but torch sees no CUDA GPU"):
        torch_mp.load(package)


def test_files_neither_loader_reads_are_value_errors(package, tmp_path):
    garbage = tmp_path / "garbage.pt2"  # named like a package, but neither format
    garbage.write_bytes(b"not a zip archive")
    with pytest.raises(ValueError, match="garbage.pt2 is not a loadable TorchScript file.*nor is it an AOTInductor"):
        torch_mp.load(garbage)
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(pathlib.Path(package).read_bytes()[:4096])
    with pytest.raises(ValueError, match="truncated.pt2 is not a loadable TorchScript file"):
        torch_mp.load(truncated)
    program = tmp_path / "program.pt2"  # torch.export.save's PT2 archive: a program, no compiled model
    torch.export.save(torch.export.export(nn.Linear(4, 3).eval(), (torch.randn(2, 4),)), program)
    with pytest.raises(ValueError, match="program.pt2 is a PT2 archive without an AOTInductor model"):
        torch_mp.load(program)
    broken = tmp_path / "broken.pt2"  # the package's layout, its shared library not one
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            target.writestr(item, b"not a shared library" if item.filename.endswith(".so") else source.read(item))
    with pytest.raises(ValueError, match="broken.pt2 is an AOTInductor package torch cannot load"):
        torch_mp.load(broken)


@pytest.mark.usefixtures("as_cuda_package")
def test_on_a_gpu_a_cuda_package_runs_single_threaded_inside_the_bounded_wrapper(package, reference, on_a_gpu):
    loaded = torch_mp.load(package)
    assert isinstance(loaded, CpuGraphs) and type(loaded.module) is type(reference)
    assert (loaded.max_signatures, loaded.fall_back) == (8, True)
    x = torch.randn(2, 4)
    first = loaded(x)
    assert torch.equal(first, reference(x))
    for batch in (2, 5, 2):
        fresh = torch.randn(batch, 4)
        assert torch.equal(loaded(fresh), reference(fresh))
    assert torch.equal(first, reference(x)) and loaded.recorded_signatures == 2  # outputs are copies
    torch_mp.load(package, "cuda:1", max_signatures=3)
    assert on_a_gpu == [(True, -1), (True, 1)]


@pytest.mark.usefixtures("as_cuda_package")
def test_on_a_gpu_with_cuda_graphs_off_a_cuda_package_is_plain(package, reference, on_a_gpu):
    assert type(torch_mp.load(package, "cuda", cuda_graphs=False)) is type(reference)
    assert on_a_gpu == [(False, -1)]


def test_on_a_gpu_a_cpu_package_is_plain(package, reference, on_a_gpu):
    assert type(torch_mp.load(package)) is type(reference)
    assert on_a_gpu == [(False, -1)]


@pytest.mark.usefixtures("as_cuda_package")
def test_package_signatures_past_the_bound_run_the_package_with_one_warning(package, reference, on_a_gpu):
    loaded = torch_mp.load(package, max_signatures=2)
    for batch in (1, 2):
        loaded(torch.randn(batch, 4))
    x3 = torch.randn(3, 4)
    with pytest.warns(CudaGraphFallbackWarning, match=r"2 input signatures have CUDA graphs \(max_signatures\)"):
        assert torch.equal(loaded(x3), reference(x3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x4 = torch.randn(4, 4)
        assert torch.equal(loaded(x4), reference(x4))
        x1 = torch.randn(1, 4)
        assert torch.equal(loaded(x1), reference(x1))  # recorded ones still replay
    assert (loaded.recorded_signatures, loaded.refused_signatures, loaded.records) == (2, 0, 2)


@pytest.mark.usefixtures("as_cuda_package")
def test_a_refused_package_signature_runs_the_package_and_warns_once(package, reference, on_a_gpu, monkeypatch):
    monkeypatch.setattr(_load, "CudaGraphModule", lambda module, **settings: CpuGraphs(module, refuse={3, 5},
                                                                                        **settings))
    loaded = torch_mp.load(package)
    x = torch.randn(3, 4)
    with pytest.warns(CudaGraphFallbackWarning, match="synchronises with the host. The module runs without a CUDA"):
        assert torch.equal(loaded(x), reference(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(loaded(x), reference(x))
        loaded(torch.randn(5, 4))  # another refusal: no second warning
        loaded(torch.randn(2, 4))
    assert (loaded.recorded_signatures, loaded.refused_signatures, loaded.records) == (1, 2, 3)


@pytest.mark.cuda
def test_load_of_a_cuda_package_replays_a_cuda_graph_bit_equal_to_the_plain_call(tmp_path):
    x = torch.randn(2, 4, device="cuda")
    path = torch_mp.aoti_compile(nn.Linear(4, 3).eval().cuda(), (x,), torch.float16, tmp_path / "linear_cuda.pt2")
    loaded = torch_mp.load(path, "cuda")
    assert isinstance(loaded, torch_mp.CudaGraphModule)
    plain = torch._inductor.aoti_load_package(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaGraphFallbackWarning)
        first = loaded(x)
        assert torch.equal(first, plain(x))
        fresh = torch.randn_like(x)
        assert torch.equal(loaded(fresh), plain(fresh))
    assert torch.equal(first, plain(x))  # a copy, not the graph's output buffer the second replay overwrote
    assert (loaded.recorded_signatures, loaded.refused_signatures) == (1, 0)
