"""Which of ATen's CUDA norms take a low-precision input with fp32 parameters (the "mixed type" kernels that
fuse_casts' norm case uses on the CPU, kMixedTypeNormOnCpu in core/op_facts), what dtype they write, and how far
an fp16 / bf16 input with parameters of its own dtype (what the cuda_fp16 policy's norms get when they follow an
fp16 input) lands from fp32 on the same values. Run by gpu_session.sh; prints one line."""
import torch
import torch.nn.functional as F


def norms():
    """name -> f(x, weight, bias) over a (8, 64, 16, 16) input with 64-element parameters."""
    return {
        "layer_norm": lambda x, w, b: F.layer_norm(x.flatten(2).transpose(1, 2), (64,), w, b),
        "group_norm": lambda x, w, b: F.group_norm(x, 8, w, b),
        "instance_norm": lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
        "batch_norm": lambda x, w, b: F.batch_norm(x, torch.zeros_like(w), torch.ones_like(w), w, b),
    }


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 64, 16, 16, generator=generator) * 3 + 1).cuda()
    weight = (torch.rand(64, generator=generator) + 0.5).cuda()
    bias = torch.randn(64, generator=generator).cuda()
    facts = []
    for name, norm in norms().items():
        for dtype, label in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
            low = x.to(dtype)
            reference = norm(low.float(), weight, bias)
            try:
                mixed = f"mixed -> {str(norm(low, weight, bias).dtype).replace('torch.', '')}"
            except Exception as error:  # noqa: BLE001 - the fact sought
                mixed = f"mixed refused ({type(error).__name__})"
            same = norm(low, weight.to(dtype), bias.to(dtype)).float()
            error = ((same - reference).abs().max() / reference.abs().max()).item()
            facts.append(f"{name} {label}: {mixed}, all-{label} max err {error:.1e} of max")
    print(f"norm probe: torch {torch.__version__}: " + "; ".join(facts))


if __name__ == "__main__":
    main()
