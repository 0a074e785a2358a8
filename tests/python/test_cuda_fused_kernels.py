"""torch_mp::fused_pointwise against the ATen ops it replaces, bit for bit: random programs over fp32 / fp16 / bf16
inputs and outputs, with NaN, inf, zeros and subnormals, in every layout the kernels treat differently (sizes that
are no multiple of the CUDA kernel's 8-element vectors, storage offsets that break its 16-byte alignment,
channels_last, dense but permuted, strided views read through copies, sizes that broadcast). Each case runs on the CPU,
and on CUDA where there is a GPU (`cuda` marks); a model converted with kernels="fused" on CUDA computes what the
portable one does."""
import io
import random

import pytest
import torch
from torch import nn

import torch_mp
from small_models import ConvInexactNumbers, MlpBlock, fused_calls

# kernels/fused_pointwise.h
INPUT, SCALAR, ROUND, RELU, NEG = 0, 1, 2, 10, 11
ADD, SUB, MUL, DIV = 20, 21, 22, 23
BINARY = {ADD: torch.add, SUB: torch.sub, MUL: torch.mul, DIV: torch.div}
SCALAR_TYPE = {torch.float16: 5, torch.float32: 6, torch.bfloat16: 15}  # c10::ScalarType
DTYPES = list(SCALAR_TYPE)
# numbers the ops take: exact and inexact in fp32, some whose reciprocal is inexact (CUDA divides by multiplying)
NUMBERS = [0.5, 3, -2.5, 0.1, 1 / 3, 1e-3, 7.0, -0.75, 1e4, 6.1e-5]

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def has_kernel(device: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key("torch_mp::fused_pointwise", device.upper())


def needs_kernel(device: str):
    # every build registers the CPU kernel: a missing one is a failure, not a skip; a CUDA kernel needs a CUDA build
    assert device != "cpu" or has_kernel("cpu"), "torch_mp::fused_pointwise has no CPU kernel registered"
    if not has_kernel(device):
        pytest.skip(f"this build of torch_mp has no {device} kernel")


def fused_pointwise(inputs, program, scalars, out_dtype):
    return torch.ops.torch_mp.fused_pointwise(inputs, program, scalars, out_dtype)


def rounding(dtype):
    """What fuse_pointwise writes after an op whose result is `dtype`."""
    return [] if dtype == torch.float32 else [ROUND, SCALAR_TYPE[dtype]]


def ambiguous_reciprocal(number):
    """Whether the fp32 reciprocal formed in fp32 differs from the double one rounded to fp32 (1e-3 among NUMBERS):
    fuse_pointwise leaves CUDA divisions by such numbers to ATen, so the random programs do not divide by them."""
    one = torch.tensor(1.0, dtype=torch.float32)
    return bool(one / torch.tensor(number, dtype=torch.float32) != torch.tensor(1 / number, dtype=torch.float32))


def number_operand(op, number, dtype, device):
    """`tensor op number` as fuse_pointwise writes it for the device, from what ATen's kernels there do (stated here
    independently of the pass's table): (program after the tensor's, the scalar). The CPU's add / sub round the number
    to the op's dtype, its mul / div take it in fp32; CUDA's division multiplies by the fp32 reciprocal."""
    if device == "cuda" and op == DIV:
        reciprocal = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(number, dtype=torch.float32)
        return [SCALAR, None, MUL, 0], float(reciprocal)
    rounded = rounding(dtype) if device == "cpu" and op in (ADD, SUB) else []
    return [SCALAR, None] + rounded + [op, 0], float(number)


UNARY = [(RELU, torch.relu), (NEG, torch.neg)]


def random_chain(rng: random.Random, inputs, depth: int, device: str, unary=UNARY):
    """A random tree of the ops the kernel fuses, as fuse_pointwise writes it (operands, op, rounding to the op's
    dtype), and its value computed by the aten ops themselves: (reference, program, scalars). Stack depth <= depth+1."""
    scalars = []

    def expr(level):
        """(value, program, values held at once)"""
        kind = "input" if level == 0 or rng.random() < 0.2 else rng.choice(["unary", "cast", "tensor", "number"])
        if kind == "input":
            index = rng.randrange(len(inputs))
            return inputs[index], [INPUT, index], 1
        value, program, held = expr(level - 1)
        if kind == "unary":
            op, fn = rng.choice(unary)
            result = fn(value)
            return result, program + [op, 0] + rounding(result.dtype), held
        if kind == "cast":
            dtype = rng.choice(DTYPES)
            return value.to(dtype), program + rounding(dtype), held
        op = rng.choice(list(BINARY))
        if kind == "number":
            number = rng.choice(NUMBERS)
            if device == "cuda" and op == DIV and ambiguous_reciprocal(number):
                op = MUL
            result = BINARY[op](value, number)
            operand, scalar = number_operand(op, number, result.dtype, device)
            operand[1] = len(scalars)
            scalars.append(scalar)
            return result, program + operand + rounding(result.dtype), max(held, 2)
        other, other_program, other_held = expr(level - 1)
        result = BINARY[op](value, other)
        return result, program + other_program + [op, 0] + rounding(result.dtype), max(held, other_held + 1)

    value, program, held = expr(depth)
    assert held <= 8
    return value, program, scalars


def special_values(shape, dtype, device, generator):
    """Normal values at several scales, with NaN, +-inf, +-0, fp16 / bf16 subnormals and values near fp16's max."""
    numel = 1
    for size in shape:
        numel *= size
    values = torch.randn(numel, generator=generator) * torch.tensor([1.0, 1e-3, 1e3])[
        torch.randint(0, 3, (numel,), generator=generator)]
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-6, -3e-8, 6.5e4, 9e-41])
    where = torch.rand(numel, generator=generator) < 0.05
    values[where] = specials[torch.randint(0, len(specials), (int(where.sum()),), generator=generator)]
    return values.reshape(shape).to(device=device, dtype=dtype)


# Each layout: sizes, and how one input of the chain is made from dense values (`index` tells the inputs apart).
def contiguous(make, shape, index):
    return make(shape)


def misaligned(make, shape, index):
    """A view starting one element into its storage (not 16-byte aligned)."""
    numel = 1
    for size in shape:
        numel *= size
    return make((numel + 1,))[1:].view(shape)


def first_misaligned(make, shape, index):
    return misaligned(make, shape, index) if index == 0 else make(shape)


def channels_last(make, shape, index):
    return make(shape).contiguous(memory_format=torch.channels_last)


def mixed_layouts(make, shape, index):
    return channels_last(make, shape, index) if index % 2 == 0 else make(shape)


def permuted(make, shape, index):
    """Dense, in another order than contiguous: read in memory order, written alike."""
    return make(shape[::-1]).permute(*reversed(range(len(shape))))


def strided(make, shape, index):
    """Every other column: gaps in memory, read through a contiguous copy."""
    return make(shape[:-1] + (2 * shape[-1],))[..., ::2]


def broadcast(make, shape, index):
    """Sizes equal on the example inputs but not at run time: the ATen-ops path."""
    return make((1,) + shape[1:]) if index == 1 else make(shape)


LAYOUTS = {
    "contiguous_777": (contiguous, (3, 7, 37)),
    "one_element": (contiguous, (1,)),
    "large_grid_stride": (contiguous, (3, 1 << 20, 1)),
    "misaligned": (misaligned, (5, 41)),
    "first_misaligned": (first_misaligned, (5, 41)),
    "channels_last": (channels_last, (2, 5, 7, 9)),
    "mixed_layouts": (mixed_layouts, (2, 5, 7, 9)),
    "permuted": (permuted, (6, 5, 11)),
    "strided": (strided, (9, 13)),
    "broadcast": (broadcast, (4, 3, 29)),
}


def assert_bit_identical(actual, expected):
    """torch.equal where both are numbers (so -0 == 0) and NaN in the same places."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape and actual.device == expected.device
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(actual), nan)
    mismatch = actual.masked_fill(nan, 0) != expected.masked_fill(nan, 0)
    assert not mismatch.any(), (
        f"{int(mismatch.sum())} of {mismatch.numel()} differ, e.g. {actual[mismatch][:4]} != {expected[mismatch][:4]}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("device", DEVICES)
def test_random_programs_are_bit_identical_to_aten(device, layout):
    needs_kernel(device)
    build, shape = LAYOUTS[layout]
    rng = random.Random(f"{layout}")
    generator = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for trial in range(6 if layout == "large_grid_stride" else 40):
        dtypes = [rng.choice(DTYPES) for _ in range(rng.randint(1, 4))]
        inputs = [
            build(lambda s, dtype=dtype: special_values(s, dtype, device, generator), shape, index)
            for index, dtype in enumerate(dtypes)
        ]
        reference, program, scalars = random_chain(rng, inputs, rng.randint(1, 5), device)
        out_dtype = rng.choice(DTYPES)
        expected = reference.to(out_dtype)
        actual = fused_pointwise(inputs, program, scalars, out_dtype)
        context = f"trial {trial}: dtypes {dtypes}, program {program}, scalars {scalars}, out {out_dtype}"
        try:
            assert_bit_identical(actual, expected)
        except AssertionError as error:
            raise AssertionError(f"{context}: {error}") from None
        if layout in ("channels_last", "permuted"):
            assert actual.stride() == inputs[0].stride(), context
        if layout == "strided" or (layout == "mixed_layouts" and len(inputs) > 1):
            assert actual.is_contiguous(), context


@pytest.mark.parametrize("device", DEVICES)
def test_numbers_as_atens_kernels_take_them_on_each_device(device):
    """Numbers the low dtypes do not hold, and ones whose fp32 reciprocal is inexact: each rule of number_operand
    changes results on some of these elements."""
    needs_kernel(device)
    x = torch.linspace(-3000, 3000, 100003, device=device)
    for number in (0.1, 3.0, 1 / 3, 7.0, 6.1e-5, 2049):
        for dtype in DTYPES:
            value = x.to(dtype)
            for op, aten in BINARY.items():
                operand, scalar = number_operand(op, number, dtype, device)
                operand[1] = 0
                program = [INPUT, 0] + operand + rounding(dtype)
                assert_bit_identical(fused_pointwise([value], program, [scalar], dtype), aten(value, number))


@pytest.mark.parametrize("device", DEVICES)
def test_relu_gives_the_sign_of_zero_atens_relu_gives_on_each_device(device):
    """ATen's CPU relu keeps -0 and its CUDA relu returns +0 (max with +0): the kernel on each device does as its ATen
    (a later division by the zero turns the sign into +-inf)."""
    needs_kernel(device)
    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, -float("inf"), float("nan")], device=device)
    for dtype in DTYPES:
        value = x.to(dtype)
        expected = torch.relu(value)
        actual = fused_pointwise([value], [INPUT, 0, RELU, 0] + rounding(dtype), [], dtype)
        assert_bit_identical(actual, expected)
        numbers = ~torch.isnan(expected)
        assert torch.equal(torch.signbit(actual[numbers]), torch.signbit(expected[numbers])), (dtype, actual)


@pytest.mark.cuda
def test_a_program_computes_the_same_on_cpu_and_cuda():
    """The kernels interpret a program alike: random programs (as written for CUDA) on both devices. Without relu,
    whose zero has each device's ATen sign (the test above)."""
    needs_kernel("cuda")
    rng = random.Random(7)
    generator = torch.Generator().manual_seed(7)
    for _ in range(40):
        inputs = [special_values((7, 129), rng.choice(DTYPES), "cuda", generator) for _ in range(rng.randint(1, 4))]
        _, program, scalars = random_chain(rng, inputs, rng.randint(1, 5), "cuda", unary=[(NEG, torch.neg)])
        out_dtype = rng.choice(DTYPES)
        on_cuda = fused_pointwise(inputs, program, scalars, out_dtype)
        on_cpu = fused_pointwise([i.cpu() for i in inputs], program, scalars, out_dtype)
        assert_bit_identical(on_cuda.cpu(), on_cpu)


def test_cuda_kernel_refuses_inputs_off_cuda_with_a_clear_error():
    """The CUDA kernel's argument checks, called through the dispatcher on CPU tensors: runs in every build with the
    CUDA kernel, GPU or not (its message once crashed a GPU run instead of raising)."""
    needs_kernel("cuda")
    x = torch.randn(4, 5)
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with pytest.raises(RuntimeError, match="all inputs must be on one CUDA device; input 0 is on cpu"):
        torch.ops.torch_mp.fused_pointwise.default.redispatch(cuda, [x, x], [INPUT, 0, INPUT, 1, ADD, 0], [],
                                                              torch.float32)


@pytest.mark.cuda
def test_cuda_inputs_must_share_one_cuda_device():
    needs_kernel("cuda")
    x = torch.randn(4, 5, device="cuda")
    with pytest.raises(RuntimeError, match="all inputs must be on one CUDA device"):
        fused_pointwise([x, x.cpu()], [INPUT, 0, INPUT, 1, 20, 0], [], torch.float32)
    with pytest.raises(RuntimeError, match="all inputs must be on one CUDA device"):
        fused_pointwise([x.cpu(), x], [INPUT, 0, INPUT, 1, 20, 0], [], torch.float32)


@pytest.mark.cuda
def test_cuda_kernel_runs_on_the_current_stream():
    """Captured into a CUDA graph (on a side stream, where a launch on any other stream fails), then replayed."""
    needs_kernel("cuda")
    x = torch.randn(1 << 16, device="cuda", dtype=torch.float16)
    program = [INPUT, 0, INPUT, 1, 22, 0, ROUND, SCALAR_TYPE[torch.float16], RELU, 0]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fused_pointwise([x, x], program, [], torch.float16)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_pointwise([x, x], program, [], torch.float16)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_bit_identical(out, torch.relu(x * x))


class ConvScaleShift(nn.Module):
    """conv, then elementwise ops that cuDNN's fused convolutions do not take: (y * 0.5 - x / 3) -> relu -> + y."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y * 0.5 - x / 3.0) + y


CUDA_MODELS = {
    "mlp_block": (MlpBlock, lambda: torch.randn(8, 16, 64)),
    "conv_scale_shift": (ConvScaleShift, lambda: torch.randn(2, 8, 13, 11)),
    "conv_inexact_numbers": (ConvInexactNumbers, lambda: torch.randn(2, 8, 12, 12) * 40),
}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(CUDA_MODELS))
def test_cuda_fused_model_is_bit_identical_to_portable(name, dtype):
    build, make_input = CUDA_MODELS[name]
    model, x = build().eval().cuda(), make_input().cuda()
    # no TorchScript fuser (NNC would compile the portable model's chains on CUDA after a few runs): ATen ops on
    # both sides; cuDNN's choice of convolution fixed
    with torch.jit.fuser("none"), torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        portable = torch_mp.convert(model, (x,), dtype)
        fused = torch_mp.convert(model, (x,), dtype, kernels="fused")
        report = torch_mp.report_of(fused)
        calls = fused_calls(fused)
        assert calls == report.data["fused_pointwise"]
        if has_kernel("cuda"):
            assert calls >= 1
        else:  # a CPU-only build of torch_mp: a fused call could not run on CUDA tensors
            assert calls == 0
        buffer = io.BytesIO()
        torch.jit.save(fused, buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer, map_location="cuda")
        with torch.no_grad():
            for inputs in (x, torch.randn_like(x) * 3, torch.randn_like(x)):
                expected = portable(inputs)
                assert_bit_identical(fused(inputs), expected)
                assert_bit_identical(loaded(inputs), expected)
