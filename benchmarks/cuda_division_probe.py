"""Which fp32 reciprocal ATen's CUDA division by a number multiplies by, for a number fp32 does not hold (1e-3): the
one formed in fp32 (1.0f / 0.001f = 999.99994) or the double one rounded to fp32 (1000). torch 2.11 on an H200
(2026-11-27): the double one, on every element. fuse_pointwise leaves such divisions to ATen while other versions are
unprobed (jit/rewrite/fuse_pointwise.cpp, unambiguousReciprocal). Run by gpu_session.sh."""
import torch


def main() -> None:
    number = 1e-3
    in_fp32 = (torch.tensor(1.0) / torch.tensor(number)).item()
    from_double = float(torch.tensor(1 / number, dtype=torch.float32))
    x = torch.randn(1 << 20, device="cuda") * 100
    aten = torch.div(x, number)
    counts = {
        "x * reciprocal formed in fp32": int((aten == x * in_fp32).sum()),
        "x * double reciprocal rounded to fp32": int((aten == x * from_double).sum()),
        "x / fp32(number)": int((aten == x / torch.tensor(number, device="cuda")).sum()),
    }
    half = torch.tensor([0.421875], device="cuda", dtype=torch.float16)
    print(f"division probe: torch {torch.__version__}, {x.numel()} fp32 elements equal to ATen's x / {number}: "
          + "; ".join(f"{name}: {count}" for name, count in counts.items())
          + f"; fp16 0.421875 / {number} = {torch.div(half, number).item()}")


if __name__ == "__main__":
    main()
