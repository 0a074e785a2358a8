"""The model zoo: real architectures built from their library definitions with random weights (nothing is
downloaded), each with how it is captured and its input.

Inputs are small so the whole suite runs on CI's two cores: images at 128x128 where the architecture takes it,
short token sequences; transformer configs keep their family's structure with fewer layers where noted.

Weights are random as each library initialises them, with one exception: classifier heads that libraries
initialise to zero (torchvision's ViT, timm's MLP-Mixer) would make every output 0 and every comparison vacuous,
so all-zero weight matrices get small random values (`build_model`). Batch-norm statistics stay at the library's
mean 0 / variance 1, so activations of deep nets drift in scale (MobileNetV3's logits end near 1e-10,
EfficientNet's near 1e-14, below fp16's smallest subnormal): the observed range guard keeps such nodes in fp32,
and the suite shows it does.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import nn

# the test suite's models and helpers (tests/python), for the zoo's tests and the benchmarks that import the zoo
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

from small_models import ControlFlowNet, LSTMTagger  # noqa: E402
from torch_mp.models import resnet50_ibn_a  # noqa: E402


class Entry(NamedTuple):
    source: str  # library the definition comes from
    capture: str  # "script" or "trace": what torch_mp.convert ends up using for this model
    build: Callable[[], nn.Module]
    inputs: Callable[[], Tuple[torch.Tensor, ...]]
    classifier: bool = True  # the first output's last dimension is class scores (top-1 agreement is measured)
    requires: Optional[str] = None  # module that must be importable


def image(batch: int = 4, size: int = 224) -> Callable[[], Tuple[torch.Tensor]]:
    return lambda: (torch.randn(batch, 3, size, size),)


def tokens(batch: int = 4, length: int = 32, vocab: int = 1000) -> Callable[[], Tuple[torch.Tensor, torch.Tensor]]:
    """Token ids and an attention mask whose last quarter of each row is padding."""

    def make():
        ids = torch.randint(0, vocab, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[:, length - length // 4:] = 0
        return ids, mask

    return make


def torchvision_models():
    from torchvision_shim import import_torchvision

    tvm = import_torchvision().models
    return {
        "tv.resnet50": Entry("torchvision", "script", tvm.resnet50, image(4, 128)),
        "tv.mobilenet_v3_large": Entry("torchvision", "script", tvm.mobilenet_v3_large, image(4, 128)),
        "tv.efficientnet_b0": Entry("torchvision", "script", tvm.efficientnet_b0, image(4, 128)),
        "tv.convnext_tiny": Entry("torchvision", "script", tvm.convnext_tiny, image(4, 128)),
        "tv.vit_b_16": Entry("torchvision", "script", tvm.vit_b_16, image(2, 224)),
        "tv.swin_t": Entry("torchvision", "script", tvm.swin_t, image(2, 128)),
        "tv.regnet_y_400mf": Entry("torchvision", "script", tvm.regnet_y_400mf, image(4, 128)),
        "tv.densenet121": Entry("torchvision", "script", tvm.densenet121, image(2, 128)),
    }


def timm_models():
    import timm

    def create(name, **kwargs):
        return lambda: timm.create_model(name, pretrained=False, **kwargs)

    return {
        "timm.regnetx_002": Entry("timm", "script", create("regnetx_002"), image(4, 128)),
        "timm.deit_tiny": Entry("timm", "script", create("deit_tiny_patch16_224", img_size=128), image(4, 128)),
        "timm.mixer_s16": Entry("timm", "script", create("mixer_s16_224", img_size=128), image(4, 128)),
        "timm.coatnet_nano": Entry("timm", "script", create("coatnet_nano_rw_224", img_size=128), image(2, 128)),
        "timm.poolformer_s12": Entry("timm", "script", create("poolformer_s12"), image(2, 128)),
        "timm.levit_128s": Entry("timm", "script", create("levit_128s"), image(2, 224)),
    }


def transformers_models():
    from torchvision_shim import import_torchvision

    import_torchvision()  # transformers imports torchvision where it is installed
    import transformers as hf

    def model(model_class, config_class, **config):
        # torchscript=True, return_dict=False: tuple outputs and untied weights, the form transformers documents
        # for TorchScript; the model then traces
        return lambda: model_class(config_class(torchscript=True, return_dict=False, **config))

    def whisper_encoder():
        config = hf.WhisperConfig(torchscript=True, return_dict=False, encoder_layers=4, d_model=384, encoder_attention_heads=6,
                                  encoder_ffn_dim=1536, max_source_positions=150)
        return hf.WhisperModel(config).get_encoder()

    def t5_encoder():
        config = hf.T5Config(torchscript=True, return_dict=False, d_model=512, d_ff=2048, num_layers=6, num_heads=8)
        return hf.T5EncoderModel(config)

    def vit_classifier():
        # ViTForImageClassification reads its backbone's output by name: it keeps return_dict (a dict output,
        # traced as one)
        config = hf.ViTConfig(torchscript=True, image_size=128, hidden_size=384, num_hidden_layers=6,
                              num_attention_heads=6, intermediate_size=1536, num_labels=100)
        return hf.ViTForImageClassification(config)

    return {
        "hf.bert-base": Entry("transformers", "trace", model(hf.BertModel, hf.BertConfig), tokens(), False),
        "hf.distilbert": Entry("transformers", "trace", model(hf.DistilBertModel, hf.DistilBertConfig), tokens(),
                               False),
        # GPT-2's second positional input is its key/value cache: token ids only, no cache in the outputs
        "hf.gpt2": Entry("transformers", "trace", model(hf.GPT2Model, hf.GPT2Config, use_cache=False),
                         lambda: tokens()()[:1], False),
        "hf.t5-small-encoder": Entry("transformers", "trace", t5_encoder, tokens(), False),
        "hf.vit-small": Entry("transformers", "trace", vit_classifier,
                              image(4, 128)),
        "hf.whisper-tiny-encoder": Entry("transformers", "trace", whisper_encoder,
                                         lambda: (torch.randn(2, 80, 300),), False),
    }


class GRUClassifier(nn.Module):
    def __init__(self, features: int = 40, hidden: int = 128, classes: int = 10):
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out.mean(dim=1))


def transformer_encoder():
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)


def own_models():
    return {
        "resnet50_ibn_a": Entry("torch_mp.models", "script", resnet50_ibn_a, image(4, 128)),
        "control_flow": Entry("tests.small_models", "script", ControlFlowNet, lambda: (torch.randn(64, 32),)),
        "lstm_tagger": Entry("tests.small_models", "script", LSTMTagger, lambda: (torch.randint(0, 1000, (4, 20)),)),
        "gru_classifier": Entry("torch.nn", "script", GRUClassifier, lambda: (torch.randn(4, 50, 40),)),
        "transformer_encoder": Entry("torch.nn", "script", transformer_encoder, lambda: (torch.randn(4, 32, 128),),
                                     False),
    }


def build_model(entry: Entry) -> nn.Module:
    """The entry's model in eval mode, its all-zero weight matrices given random values (see above)."""
    torch.manual_seed(0)
    model = entry.build()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model.eval()


LIBRARIES = {"torchvision": torchvision_models, "timm": timm_models, "transformers": transformers_models}


def load_zoo() -> Dict[str, Entry]:
    zoo = dict(own_models())
    for library, entries in LIBRARIES.items():
        if importlib.util.find_spec(library) is None:
            raise ImportError(f"the zoo needs {library}: .ci/run installs it (pinned for torch 2.13)")
        zoo.update(entries())
    return zoo
