"""Lets torchvision's model definitions import beside the CPU torch wheel.

PyPI's torchvision wheels carry compiled ops built against the CUDA torch; beside the CPU wheel they fail to load
and `import torchvision` then dies registering fake kernels for `torchvision::nms`. The zoo needs only the model
definitions, so where those ops are missing this defines nms's schema with a plain CPU kernel (greedy IoU
suppression) before the import; where torchvision's own ops load, it does nothing.
"""
import torch

_library = None


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    order = scores.argsort(descending=True)
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        order = rest[iou <= iou_threshold]
    return torch.stack(keep) if keep else torch.empty(0, dtype=torch.long, device=boxes.device)


def import_torchvision():
    """`import torchvision`, defining the ops it needs first where its compiled library cannot load."""
    global _library
    try:
        torch.ops.torchvision.nms.default  # noqa: B018 - raises where the compiled ops are missing
    except (AttributeError, RuntimeError):
        try:
            import torchvision  # the compiled ops may load on import (a matching wheel)
            return torchvision
        except RuntimeError:
            pass
        if _library is None:
            _library = torch.library.Library("torchvision", "DEF")
            for name in ("nms", "qnms"):
                _library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _library.impl("nms", _nms, "CPU")
    import torchvision

    return torchvision
