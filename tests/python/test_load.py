"""torch_mp.load: the saved module, plain on a CPU; on a GPU replaying a CUDA graph per input signature, bounded, and
calling the module itself where a graph cannot be recorded.

The bounded / fallback logic (GraphsBySignature, shared with torch_mp.cuda_graphs) runs here on the CPU through
cpu_graphs.CpuGraphs, a recording that keeps what a CUDA graph keeps, static input and output buffers that each
replay overwrites, and that the test can refuse; the tests marked cuda run it with CUDA graphs. A replay runs the
kernels of the plain call, so outputs are compared bit for bit. AOTInductor packages: test_load_package.py.
"""
import threading
import warnings

import pytest
import torch
from torch import nn

import torch_mp
from cpu_graphs import CpuGraphs
from small_models import ConvBnNet
from torch_mp.cuda_graphs import CudaGraphCaptureError, CudaGraphFallbackWarning

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour where no GPU exists")


@pytest.fixture
def saved(tmp_path):
    """A converted ConvBnNet saved by torch.jit.save, and an input for it."""
    x = torch.randn(2, 3, 16, 16)
    path = tmp_path / "fp16.pt"
    torch.jit.save(torch_mp.convert(ConvBnNet().eval(), (x,), torch.float16), path)
    return path, x


def test_load_on_cpu_is_the_plain_module_and_computes_what_torch_jit_load_does(saved):
    path, x = saved
    loaded = torch_mp.load(path, "cpu")  # cuda_graphs=True, the default, means nothing on a CPU
    assert isinstance(loaded, torch.jit.ScriptModule)
    with torch.no_grad():
        assert torch.equal(loaded(x), torch.jit.load(path)(x))


@no_gpu
def test_load_without_a_gpu_is_the_plain_module(saved):
    path, x = saved
    loaded = torch_mp.load(str(path))
    assert isinstance(loaded, torch.jit.ScriptModule)
    with torch.no_grad():
        assert torch.equal(loaded(x), torch.jit.load(path)(x))


def test_load_with_cuda_graphs_off_is_the_plain_module(saved):
    path, _ = saved
    assert isinstance(torch_mp.load(path, cuda_graphs=False), torch.jit.ScriptModule)


def test_load_lets_no_torch_jit_warning_through(saved):
    """torch.jit.load warns (torch 2.13: DeprecationWarning, 2.14: FutureWarning); torch_mp.load calls it for the user
    through _torchscript.jit_calls.jit_call, as the rest of torch_mp does."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch_mp.load(saved[0], "cpu")
    assert [str(w.message) for w in caught if "torch.jit.load" in str(w.message)] == []


def test_load_of_a_missing_or_unreadable_file_says_which(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.pt does not exist"):
        torch_mp.load(tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a zip archive")
    with pytest.raises(ValueError, match="garbage.pt is not a loadable TorchScript file.*; nor is it an AOTInductor"):
        torch_mp.load(garbage)


@pytest.mark.parametrize("max_signatures", [0, -1, True, 2.5, None])
def test_load_refuses_a_bad_bound(saved, max_signatures):
    with pytest.raises(ValueError, match="max_signatures must be a positive int"):
        torch_mp.load(saved[0], max_signatures=max_signatures)


def test_load_refuses_bad_arguments(saved):
    path, _ = saved
    with pytest.raises(TypeError, match="cuda_graphs must be True or False"):
        torch_mp.load(path, cuda_graphs="yes")
    with pytest.raises(ValueError, match="device must be"):
        torch_mp.load(path, "gpu")
    with pytest.raises(TypeError):
        torch_mp.load(path, "cpu", False)  # the options are keyword-only


@no_gpu
def test_load_on_cuda_without_a_gpu_says_so(saved):
    with pytest.raises(RuntimeError, match="torch sees no CUDA GPU"):
        torch_mp.load(saved[0], "cuda")


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x, scale: float = 1.0):
        return self.linear(x) * scale


@pytest.fixture
def affine():
    return torch.jit.script(Affine().eval())


def plain(module, *inputs):
    with torch.no_grad():
        return module(*inputs)


def test_replays_one_recording_per_signature_and_outputs_survive_later_calls(affine):
    graphs = CpuGraphs(affine, max_signatures=4, fall_back=True)
    x = torch.randn(2, 4)
    first = graphs(x)
    assert torch.equal(first, plain(affine, x))
    for batch in (2, 5, 2, 5):
        fresh = torch.randn(batch, 4)
        assert torch.equal(graphs(fresh), plain(affine, fresh))
    assert torch.equal(first, plain(affine, x))  # a copy, not the buffer later replays overwrote
    assert (graphs.recorded_signatures, graphs.records) == (2, 2)


def test_values_key_recordings_by_type_and_value(affine):
    graphs = CpuGraphs(affine, fall_back=True)
    x = torch.randn(2, 4)
    for scale in (2.0, 3.0, 2.0):
        assert torch.equal(graphs(x, scale), plain(affine, x, scale))
    assert graphs.recorded_signatures == 2
    graphs(x, 2)  # int 2 == float 2.0, but another signature
    assert graphs.recorded_signatures == 3


def test_signatures_past_the_bound_run_the_module_with_one_warning(affine):
    graphs = CpuGraphs(affine, max_signatures=2, fall_back=True)
    for batch in (1, 2):
        graphs(torch.randn(batch, 4))
    x3 = torch.randn(3, 4)
    with pytest.warns(CudaGraphFallbackWarning, match=r"2 input signatures have CUDA graphs \(max_signatures\)"):
        assert torch.equal(graphs(x3), plain(affine, x3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x4 = torch.randn(4, 4)
        assert torch.equal(graphs(x4), plain(affine, x4))
        graphs(torch.randn(1, 4))  # recorded ones still replay
    assert (graphs.recorded_signatures, graphs.refused_signatures, graphs.records) == (2, 0, 2)


def test_a_refused_signature_runs_the_module_is_remembered_and_warns_once(affine):
    graphs = CpuGraphs(affine, refuse={3, 5}, fall_back=True)
    x = torch.randn(3, 4)
    with pytest.warns(CudaGraphFallbackWarning, match="synchronises with the host. The module runs without a CUDA"):
        assert torch.equal(graphs(x), plain(affine, x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(graphs(x), plain(affine, x))
        graphs(torch.randn(5, 4))  # another refusal: no second warning
        graphs(torch.randn(2, 4))
    assert (graphs.recorded_signatures, graphs.refused_signatures) == (1, 2)
    assert graphs.records == 3  # no second try for batch 3


def test_without_fall_back_a_refusal_and_unrecordable_inputs_raise(affine):
    graphs = CpuGraphs(affine, refuse={3})
    with pytest.raises(CudaGraphCaptureError, match="synchronises"):
        graphs(torch.randn(3, 4))
    with pytest.raises(ValueError, match="no tensor inputs"):
        CpuGraphs(lambda scale: scale * 2)(2.0)


def test_a_model_error_is_raised_as_the_model_raised_it(affine):
    graphs = CpuGraphs(affine, fall_back=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied") as raised:
            graphs(torch.randn(2, 5))
    assert not isinstance(raised.value, CudaGraphCaptureError)
    assert (graphs.recorded_signatures, graphs.refused_signatures) == (0, 0)


def test_inputs_that_require_grad_run_the_module_and_keep_their_history(affine):
    graphs = CpuGraphs(affine, fall_back=True)
    x = torch.randn(2, 4, requires_grad=True)
    y = graphs(x)
    assert y.grad_fn is not None and graphs.records == 0
    with torch.no_grad():
        assert graphs(x).grad_fn is None and graphs.recorded_signatures == 1


def test_unrecordable_inputs_run_the_module_with_fall_back():
    graphs = CpuGraphs(lambda *values: values[0] * 2, fall_back=True)
    assert graphs(3.0) == 6.0  # no tensor
    x = torch.randn(2)
    assert torch.equal(graphs(x, {1, 2}), x * 2)  # a set cannot key a recording
    assert (graphs.recorded_signatures, graphs.records) == (0, 0)


def test_calls_from_several_threads_do_not_share_buffers(affine):
    graphs = CpuGraphs(affine, fall_back=True)
    inputs = [torch.randn(8, 4) for _ in range(4)]
    expected = [plain(affine, x) for x in inputs]
    graphs(inputs[0])
    wrong = []

    def call(index):
        for _ in range(200):
            if not torch.equal(graphs(inputs[index]), expected[index]):
                wrong.append(index)

    threads = [threading.Thread(target=call, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [] and graphs.recorded_signatures == 1


def test_bad_bound_for_the_shared_class(affine):
    with pytest.raises(ValueError, match="max_signatures must be a positive int or None"):
        CpuGraphs(affine, max_signatures=0)


# ---- on a GPU: CUDA graphs ----


class SyncsWithHost(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):  # reads a device value on the host
            return x * 2
        return x


@pytest.fixture
def saved_cuda(tmp_path):
    x = torch.randn(2, 3, 16, 16, device="cuda")
    path = tmp_path / "fp16_cuda.pt"
    torch.jit.save(torch_mp.convert(ConvBnNet().eval().cuda(), (x,), torch.float16), path)
    return path, x


@pytest.mark.cuda
def test_load_on_cuda_replays_bit_equal_to_the_plain_module_and_outputs_survive(saved_cuda):
    path, x = saved_cuda
    loaded = torch_mp.load(path, "cuda")
    assert isinstance(loaded, torch_mp.CudaGraphModule) and isinstance(loaded.module, torch.jit.ScriptModule)
    reference = torch.jit.load(path, map_location="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaGraphFallbackWarning)
        first = loaded(x)
        assert torch.equal(first, plain(reference, x))
        assert torch.equal(loaded.forward(x), first)
        second = loaded(torch.randn_like(x))
    assert not torch.equal(first, second) and torch.equal(first, plain(reference, x))
    assert (loaded.recorded_signatures, loaded.refused_signatures) == (1, 0)


@pytest.mark.cuda
def test_load_on_cuda_runs_the_signatures_past_the_bound_plainly(saved_cuda):
    path, _ = saved_cuda
    loaded = torch_mp.load(path, "cuda", max_signatures=2)
    reference = torch.jit.load(path, map_location="cuda")
    for batch in (1, 2):
        x = torch.randn(batch, 3, 16, 16, device="cuda")
        assert torch.equal(loaded(x), plain(reference, x))
    x3 = torch.randn(3, 3, 16, 16, device="cuda")
    with pytest.warns(CudaGraphFallbackWarning, match="max_signatures"):
        assert torch.equal(loaded(x3), plain(reference, x3))
    assert loaded.recorded_signatures == 2


@pytest.mark.cuda
def test_load_on_cuda_falls_back_for_a_forward_that_synchronises(tmp_path):
    path = tmp_path / "syncs.pt"
    torch.jit.save(torch.jit.script(SyncsWithHost().eval()), path)
    loaded = torch_mp.load(path, "cuda")
    x = torch.rand(4, device="cuda")
    with pytest.warns(CudaGraphFallbackWarning, match="synchronises with the host") as caught:
        assert torch.equal(loaded(x), x * 2)
    assert len([w for w in caught if issubclass(w.category, CudaGraphFallbackWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaGraphFallbackWarning)
        assert torch.equal(loaded(-x), -x)
    assert (loaded.recorded_signatures, loaded.refused_signatures) == (0, 1)


@pytest.mark.cuda
def test_load_on_cuda_raises_the_models_own_errors(saved_cuda):
    path, _ = saved_cuda
    loaded = torch_mp.load(path, "cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaGraphFallbackWarning)
        with pytest.raises(RuntimeError) as wrong_channels:
            loaded(torch.randn(2, 5, 16, 16, device="cuda"))
        assert not isinstance(wrong_channels.value, CudaGraphCaptureError)
        with pytest.raises(RuntimeError) as cpu_input:
            loaded(torch.randn(2, 3, 16, 16))  # not for a graph: the module's call, and its error
        assert "torch_mp" not in str(cpu_input.value)
    assert (loaded.recorded_signatures, loaded.refused_signatures) == (0, 0)
