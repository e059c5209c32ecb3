"""torchvision's model families, small, for the zoo (models.py).

Every classification family of torchvision 0.14 -- ResNet, ResNeXt, Wide
ResNet, MobileNet V2 and V3, EfficientNet (V1's MBConv and V2's fused
MBConv), RegNet, ConvNeXt, ShuffleNet V2, SqueezeNet, DenseNet, MNASNet,
Swin, ViT -- and its segmentation models FCN, DeepLabV3 and LRASPP, built
with torchvision's own classes and blocks, made small through their
constructor arguments (few blocks, narrow widths, small images), with random
weights. Nobody here wrote these modules: they are what a user brings.

Each is wrapped so that forward(x, y) returns (loss, logits): cross-entropy
over the classes, per pixel for segmentation (the segmentation models
upsample to the input's size, as torchvision's do).

Distinct parameters. torch 1.13's exporter merges initializers that hold
equal values (fresh norm weights of ones, zero biases, ConvNeXt's layer
scales of 1e-6 in every block), which would make two parameters one in the
graph. `distinct_parameters` therefore gives every parameter whose elements
are all equal (a constant fill) random values around that constant, and
export_zoo.py checks that each parameter is its own initializer.
"""

from functools import partial
from typing import Callable, Dict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import convnext, densenet, efficientnet, mnasnet, mobilenetv2, mobilenetv3
from torchvision.models import regnet, resnet, shufflenetv2, squeezenet, swin_transformer, vision_transformer
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.segmentation import deeplabv3, fcn, lraspp

from models import BATCHNORM_FAMILIES, CLASSIFICATION_FAMILIES, SEGMENTATION_FAMILIES, VisionConfig


def distinct_parameters(module: nn.Module, generator: torch.Generator) -> None:
    """Gives every constant-filled parameter (ones, zeros, 1e-6 ...) random
    values around its constant, so that no two parameters hold equal values
    and the exporter cannot merge them."""
    with torch.no_grad():
        for p in module.parameters():
            flat = p.reshape(-1)
            if flat.numel() and bool((flat == flat[0]).all()):
                scale = max(abs(float(flat[0])), 0.1) * 0.1
                p.add_(scale * torch.randn(p.shape, generator=generator))
        # BatchNorm's running statistics: away from 0 and 1, as models.py does.
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=generator))
                m.running_var.copy_(1.0 + 0.5 * torch.rand(m.running_var.shape, generator=generator))


class Classifier(nn.Module):
    """A torchvision classifier with its cross-entropy loss."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = self.net(x)
        return F.cross_entropy(logits, y), logits


class Segmenter(nn.Module):
    """A torchvision segmentation model (its "out" head) with per-pixel
    cross-entropy."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        logits = self.net(x)["out"]
        return F.cross_entropy(logits, y), logits


class NarrowResNet(resnet.ResNet):
    """torchvision's ResNet with its stem and four stages built by its own
    _make_layer at `width` channels (64 in torchvision) instead of 64 ...
    512: the constructor has no width argument, and at full width the
    smallest ResNet holds millions of parameters."""

    def __init__(self, block, layers, width: int = 8, num_classes: int = 1000, **kwargs):
        super().__init__(block, layers, num_classes=num_classes, **kwargs)
        dilate = kwargs.get("replace_stride_with_dilation") or [False, False, False]
        self.inplanes, self.dilation = width, 1
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(width)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, 2 * width, layers[1], stride=2, dilate=dilate[0])
        self.layer3 = self._make_layer(block, 4 * width, layers[2], stride=2, dilate=dilate[1])
        self.layer4 = self._make_layer(block, 8 * width, layers[3], stride=2, dilate=dilate[2])
        self.fc = nn.Linear(8 * width * block.expansion, num_classes)


def _mobilenet_v3_small(width_mult: float, n: int):
    """The first n blocks of MobileNetV3-Small at width_mult, and its last
    channel count."""
    setting, last = mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=width_mult)
    return setting[:n], last


def _classifiers(c: VisionConfig) -> Dict[str, Callable[[], nn.Module]]:
    k = c.n_classes
    mbconv = partial(efficientnet.MBConvConfig, width_mult=0.25, depth_mult=1.0)
    return {
        "resnet": lambda: NarrowResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=k),
        # ResNeXt: grouped 3x3 convolutions in the bottleneck.
        "resnext": lambda: NarrowResNet(resnet.Bottleneck, [1, 1, 1, 1], groups=2, width_per_group=32,
                                        num_classes=k),
        # Wide ResNet: bottlenecks twice as wide.
        "wide_resnet": lambda: NarrowResNet(resnet.Bottleneck, [1, 1, 1, 1], width_per_group=128, num_classes=k),
        "mobilenet_v2": lambda: mobilenetv2.MobileNetV2(
            num_classes=k, width_mult=0.25,
            inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2]]),
        "mobilenet_v3": lambda: mobilenetv3.MobileNetV3(*_mobilenet_v3_small(0.25, 4), num_classes=k),
        "efficientnet": lambda: efficientnet.EfficientNet(
            [efficientnet.FusedMBConvConfig(1, 3, 1, 8, 8, 1),
             mbconv(1, 3, 1, 32, 16, 1), mbconv(6, 3, 2, 16, 24, 2), mbconv(6, 5, 2, 24, 40, 1)],
            dropout=0.2, stochastic_depth_prob=0.0, num_classes=k, last_channel=64),
        "regnet": lambda: regnet.RegNet(
            regnet.BlockParams.from_init_params(depth=2, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25),
            num_classes=k, stem_width=8),
        "convnext": lambda: convnext.ConvNeXt(
            [convnext.CNBlockConfig(8, 16, 1), convnext.CNBlockConfig(16, None, 1)],
            stochastic_depth_prob=0.0, num_classes=k),
        "shufflenet_v2": lambda: shufflenetv2.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 64], num_classes=k),
        "squeezenet": lambda: squeezenet.SqueezeNet("1_1", num_classes=k),
        "densenet": lambda: densenet.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2,
                                              num_classes=k),
        "mnasnet": lambda: mnasnet.MNASNet(0.25, num_classes=k),
        "swin": lambda: swin_transformer.SwinTransformer(
            patch_size=[2, 2], embed_dim=8, depths=[2, 1], num_heads=[1, 2], window_size=[2, 2],
            stochastic_depth_prob=0.0, num_classes=k),
        "vit": lambda: vision_transformer.VisionTransformer(
            image_size=c.image_size, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
            num_classes=k),
    }


def _segmenters(c: VisionConfig) -> Dict[str, Callable[[], nn.Module]]:
    k = c.n_classes

    def fcn_model():
        backbone = IntermediateLayerGetter(NarrowResNet(resnet.Bottleneck, [1, 1, 1, 1]), {"layer4": "out"})
        return fcn.FCN(backbone, fcn.FCNHead(8 * 8 * resnet.Bottleneck.expansion, k))

    def deeplab_model():
        # A dilated ResNet of output stride 8, as torchvision's DeepLabV3
        # builds it; the ASPP's atrous rates 12, 24, 36.
        backbone = IntermediateLayerGetter(
            NarrowResNet(resnet.Bottleneck, [1, 1, 1, 1], replace_stride_with_dilation=[False, True, True]),
            {"layer4": "out"})
        # DeepLabHead's layers, at 16 channels instead of its fixed 256.
        head = nn.Sequential(deeplabv3.ASPP(8 * 8 * resnet.Bottleneck.expansion, [12, 24, 36], 16),
                             nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, k, 1))
        return deeplabv3.DeepLabV3(backbone, head)

    def lraspp_model():
        setting, last = _mobilenet_v3_small(0.25, 4)
        features = mobilenetv3.MobileNetV3(setting, last).features
        # The low-level features after the first stride-2 block (stride 4),
        # the high-level ones at the end (stride 16).
        backbone = IntermediateLayerGetter(features, {"1": "low", str(len(features) - 1): "high"})
        return lraspp.LRASPP(backbone, setting[0].out_channels, features[-1].out_channels, k, inter_channels=16)

    return {"fcn": fcn_model, "deeplabv3": deeplab_model, "lraspp": lraspp_model}


def build(c: VisionConfig) -> nn.Module:
    """The family's small model (under the seed models.py's build set),
    with distinct parameters, wrapped with its loss."""
    known = _classifiers(c).keys() | _segmenters(c).keys()
    if known != set(CLASSIFICATION_FAMILIES + SEGMENTATION_FAMILIES):
        raise AssertionError(f"models.py lists families {CLASSIFICATION_FAMILIES + SEGMENTATION_FAMILIES}, "
                             f"this module builds {sorted(known)}")
    if c.segmentation:
        module = Segmenter(_segmenters(c)[c.family]())
    else:
        module = Classifier(_classifiers(c)[c.family]())
    has_batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())
    if has_batchnorm != (c.family in BATCHNORM_FAMILIES):
        raise AssertionError(f"{c.family}: the model {'has' if has_batchnorm else 'has no'} BatchNorm, "
                             f"models.BATCHNORM_FAMILIES says otherwise")
    # Dropout off: these families train in training mode, where dropout
    # would draw PyTorch's random masks, which dsopt's generator does not
    # reproduce (docs/models.md); the train-mode export still holds the
    # Dropout nodes (ratio 0).
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    distinct_parameters(module, torch.Generator().manual_seed(c.seed))
    return module
