"""torchvision's ShuffleNetV2 (Ma et al. 2018) and MobileNetV2 (Sandler et al. 2018) with CIFAR stems, as in
FedORION's model pool (sec. 4.1: "Resnet18, Resnet34, ShufflenetV2, MobilenetV2, and WRN40").

torchvision's ImageNet networks shrink a 224-pixel image 32-fold; on 32 x 32 images that leaves 1 x 1 maps after
the third stage. The CIFAR stem keeps everything else of torchvision's implementation and only replaces the first
convolution by a 3x3 convolution of stride 1 (for any input channel count) and, in ShuffleNetV2, drops the max-pool
after it, so the networks shrink a 32 x 32 image to 4 x 4 (ShuffleNetV2) and 2 x 2 (MobileNetV2). Parameter counts
are unchanged by the stem at 3 input channels: with 1,000 classes they are torchvision's (2,278,604 and 3,504,872;
the papers' 2.3M and 3.4M). MobileNetV2 is built without its classifier dropout (torchvision's default 0.2; CIFAR
versions have none, and a model that draws no random numbers can be fused, :mod:`lit_fl.steps.fusion`).
"""

from __future__ import annotations

from torch import nn

#: ShuffleNetV2 1.0x: blocks per stage and output channels of stem, stages and last 1x1 convolution (Table 5)
SHUFFLENET_V2_REPEATS = (4, 8, 4)
SHUFFLENET_V2_CHANNELS = (24, 116, 232, 464, 1024)


def _stem_conv(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)


def shufflenet_v2(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Factory behind ``shufflenetv2``: torchvision's ShuffleNetV2 1.0x, stride-1 3x3 stem, no stem max-pool."""
    from torchvision.models import ShuffleNetV2  # lazy: keeps ``import lit_fl.models`` fast

    model = ShuffleNetV2(list(SHUFFLENET_V2_REPEATS), list(SHUFFLENET_V2_CHANNELS), num_classes=num_classes)
    model.conv1[0] = _stem_conv(input_shape[0], SHUFFLENET_V2_CHANNELS[0])
    model.maxpool = nn.Identity()
    return model


def mobilenet_v2(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Factory behind ``mobilenetv2``: torchvision's MobileNetV2 (width 1.0), stride-1 3x3 stem, no dropout."""
    from torchvision.models import mobilenet_v2 as torchvision_mobilenet_v2

    model = torchvision_mobilenet_v2(weights=None, num_classes=num_classes, dropout=0.0)
    stem = model.features[0][0]
    model.features[0][0] = _stem_conv(input_shape[0], stem.out_channels)
    nn.init.kaiming_normal_(model.features[0][0].weight, mode="fan_out")  # torchvision's init of every conv
    return model
