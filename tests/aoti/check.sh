#!/bin/bash
# check.sh PYTHON AOTI_EXAMPLE: builds an AOTInductor package of a small converted model with torch_mp.aoti_compile,
# runs it with the C++ loader (csrc/tools/aoti_example.cpp, libtorch only) and checks that its outputs equal those of
# torch._inductor.aoti_load_package in Python and are close to the fp32 model's.
set -euo pipefail
python="$1" example="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" - "$work" build <<'PY'
import os, sys
import torch, torch_mp
work = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 10)).eval()
x = torch.randn(2, 3, 8, 8)
torch_mp.aoti_compile(model, (x,), torch.bfloat16, os.path.join(work, "model.pt2"))
torch.save([x], os.path.join(work, "inputs.pt"))
with torch.no_grad():
    torch.save([model(x), torch._inductor.aoti_load_package(os.path.join(work, "model.pt2"))(x)],
               os.path.join(work, "python.pt"))
PY
"$example" "$work/model.pt2" "$work/inputs.pt" "$work/outputs.pt"
"$python" - "$work" <<'PY'
import os, sys
import torch
work = sys.argv[1]
reference, python = torch.load(os.path.join(work, "python.pt"))
(cpp,) = torch.load(os.path.join(work, "outputs.pt"))
assert cpp.dtype == torch.float32 and cpp.shape == reference.shape, (cpp.dtype, cpp.shape)
assert torch.equal(cpp, python), f"C++ and Python runs differ by {(cpp - python).abs().max().item()}"
error = ((cpp - reference).norm() / reference.norm()).item()
assert error < 2e-2, f"relative error against fp32 {error}"
print(f"C++ output equals Python's; relative error against fp32 {error:.2e}")
PY
