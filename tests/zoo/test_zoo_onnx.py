"""The zoo through torch_mp.onnx_export, fp16, run by onnxruntime's CPU provider: the written graph is typed
(onnx_typing_problems finds nothing), keeps fp32 inputs and outputs, and is within the accuracy suite's tolerances of
the PyTorch fp32 model (test_zoo_accuracy.py's, with its per-model exceptions) on the example batch and two fresh ones.

Each model costs torch.export, the plan, and torch.onnx.export (20-50 s on 2 cores), so CI runs the two that prove
the most per second between them: convolutions, batch norms and a classifier head (RegNetX-200MF, 32 s),
and a transformers model with embeddings, an attention mask, LayerNorm, GELU and zero-initialised biases (DistilBERT,
about 50 s; it is the model that showed zero biases of a norm and of a linear alike in fp32 and fp16). Left out for
CI time: nn.TransformerEncoder (16 s; its attention, LayerNorm and linears are DistilBERT's), the other 20
exportable models (the same op kinds at larger sizes: the torchvision and timm CNNs, ViT/DeiT/Swin/CoAtNet/LeViT,
BERT/GPT-2/T5/Whisper, the RNNs, whose zero initial state tests/python/test_onnx.py covers), which
benchmarks/onnx_compare.py converts and measures (benchmarks/results/ONNX.md); control_flow, which torch.export cannot
capture (test_zoo_export.py).
"""
import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import torch_mp
from torch_mp._export import onnx_writer
from evaluate import Result
from registry import build_model, load_zoo
from agreement import compare, flatten_tensors
from test_zoo_accuracy import F16, assert_within_tolerances

ZOO = load_zoo()
MODELS = ("timm.regnetx_002", "hf.distilbert")
HEAVY = ("MatMul", "Gemm", "Conv")


@pytest.mark.parametrize("name", MODELS)
def test_onnx_zoo_model_against_fp32(name, tmp_path):
    entry = ZOO[name]
    model = build_model(entry)
    example = entry.inputs()
    path = torch_mp.onnx_export(model, example, tmp_path / "model.onnx")
    report = torch_mp.report_of(path)
    written = onnx.load(path)
    assert torch_mp.onnx_typing_problems(written) == []
    assert {v.type.tensor_type.elem_type for v in written.graph.output} == {onnx.TensorProto.FLOAT}
    # every heavy node computes in fp16 where the plan runs all heavy FLOPs low
    _, types = onnx_writer._element_types(written)
    heavy = [types.get(n.input[0]) for n in written.graph.node if n.op_type in HEAVY]
    if report.low_precision_flop_fraction == 1.0:
        assert heavy and set(heavy) == {onnx.TensorProto.FLOAT16}, heavy
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    cosines, errors, agree, rows, finite, dtypes_kept = [], [], 0, 0, True, True
    torch.manual_seed(1)
    for inputs in [example] + [entry.inputs() for _ in range(2)]:
        with torch.no_grad():
            reference = flatten_tensors(model(*inputs))
        outputs = [torch.from_numpy(np.asarray(o)) for o in
                   session.run(None, {s.name: x.numpy() for s, x in zip(session.get_inputs(), inputs)})]
        dtypes_kept &= [o.dtype for o in outputs] == [r.dtype for r in reference]
        finite &= all(bool(torch.isfinite(o).all()) for o in outputs if o.is_floating_point())
        agreement = compare(reference[0], outputs[0])
        cosines.append(agreement.cosine)
        errors.append(agreement.max_rel_error)
        batch_rows = reference[0].numel() // max(reference[0].shape[-1], 1)
        agree += round(agreement.top1 * batch_rows)
        rows += batch_rows
    result = Result("export", min(cosines), max(errors), agree / rows, finite, dtypes_kept, report.weight_ratio,
                    report.reached_casts, report.cast_bytes, report.low_precision_flop_fraction, 0.0)
    assert_within_tolerances(result, entry, name, F16)
    # the file's weights: at most the weight ratio's share of fp32 bytes, give or take the exporter's constants
    stored = onnx_writer.initializer_bytes(written)
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert sum(stored.values()) <= 0.52 * fp32_bytes, (stored, fp32_bytes)
