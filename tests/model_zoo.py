"""Models of the shapes real applications have, built by the project's model builder (random,
seeded weights): what the operator set must carry end to end, beyond one op at a time."""
from __future__ import annotations

from tests.tflite_builder import ModelBuilder


def audio_unet(seed: int = 11) -> ModelBuilder:
    """A U-Net over a spectrogram (1 x 32 x 32 x 2, real and imaginary) as audio denoisers have it:
    strided encoder convolutions with LEAKY_RELU, TRANSPOSE_CONV decoders whose outputs are cropped
    (STRIDED_SLICE) to the skip connection they join, a SUB of the estimated noise from the input and
    a per-bin LOG_SOFTMAX mask head."""
    mb = ModelBuilder(seed)
    x = mb.input((1, 32, 32, 2))
    e1 = mb.leaky_relu(mb.conv2d(x, 8, kernel=(3, 3), stride=(2, 2)), alpha=0.2)         # 16 x 16
    e2 = mb.leaky_relu(mb.conv2d(e1, 16, kernel=(3, 3), stride=(2, 2)), alpha=0.2)       # 8 x 8
    b = mb.leaky_relu(mb.conv2d(e2, 16, kernel=(3, 3), stride=(2, 2)), alpha=0.2)        # 4 x 4
    d2 = mb.transpose_conv(b, 16, kernel=(4, 4), stride=(2, 2), padding="VALID", activation="RELU")  # 10 x 10
    d2 = mb.concat([mb.strided_slice(d2, [0, 1, 1, 0], [1, 9, 9, 16], [1, 1, 1, 1]), e2], axis=3)
    d1 = mb.transpose_conv(d2, 8, kernel=(3, 3), stride=(2, 2), activation="RELU")      # 16 x 16
    d1 = mb.add(d1, e1)
    d0 = mb.transpose_conv(d1, 2, kernel=(3, 3), stride=(2, 2))                          # 32 x 32 x 2
    clean = mb.sub(x, d0)
    mask = mb.log_softmax(mb.conv2d(clean, 4, kernel=(1, 1)))
    mb.output(clean, mask)
    return mb


def detection_fpn(seed: int = 12) -> ModelBuilder:
    """A detection-style feature pyramid (1 x 48 x 48 x 3): a strided backbone, top-down path by
    RESIZE_NEAREST_NEIGHBOR and ADD of 1x1 laterals, a shared-shape head per level (box and class
    convolutions, LOGISTIC scores), the levels' outputs flattened and concatenated."""
    mb = ModelBuilder(seed)
    x = mb.input((1, 48, 48, 3))
    c1 = mb.conv2d(x, 8, kernel=(3, 3), stride=(2, 2), activation="RELU6")              # 24
    c2 = mb.conv2d(mb.depthwise_conv2d(c1, stride=(2, 2), activation="RELU6"), 16, kernel=(1, 1))  # 12
    c3 = mb.conv2d(mb.depthwise_conv2d(c2, stride=(2, 2), activation="RELU6"), 24, kernel=(1, 1))  # 6
    p3 = mb.conv2d(c3, 16, kernel=(1, 1))
    p2 = mb.add(mb.conv2d(c2, 16, kernel=(1, 1)), mb.resize_nearest(p3, (12, 12)))
    p1 = mb.add(mb.conv2d(c1, 16, kernel=(1, 1)), mb.resize_nearest(p2, (24, 24), half_pixel_centers=True))
    boxes, scores = [], []
    for p in (p1, p2, p3):
        h = mb.conv2d(p, 16, kernel=(3, 3), activation="RELU")
        _, ph, pw, _ = mb.shape(h)
        boxes.append(mb.reshape(mb.conv2d(h, 4, kernel=(1, 1)), (1, ph * pw, 4)))
        scores.append(mb.reshape(mb.logistic(mb.conv2d(h, 3, kernel=(1, 1))), (1, ph * pw, 3)))
    mb.output(mb.concat(boxes, axis=1), mb.concat(scores, axis=1))
    return mb


def _divisible(v: float, by: int = 8) -> int:
    """MobileNet's channel rounding: to a multiple of ``by``, never 10 % below ``v``."""
    n = max(by, int(v + by / 2) // by * by)
    return n + by if n < 0.9 * v else n


def mobilenet_v2(width: float = 0.35, resolution: int = 144, classes: int = 10, seed: int = 13) -> ModelBuilder:
    """MobileNetV2 (inverted residual blocks: 1x1 expand, 3x3 depthwise, 1x1 project, a skip ADD
    where shape allows) at a width multiplier and square input resolution, ReLU6 as published;
    the head pools globally into a small classifier."""
    mb = ModelBuilder(seed)
    x = mb.conv2d(mb.input((1, resolution, resolution, 3)), _divisible(32 * width), stride=(2, 2),
                  activation="RELU6")
    channels = _divisible(32 * width)
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        out = _divisible(c * width)
        for i in range(n):
            y = x if t == 1 else mb.conv2d(x, channels * t, kernel=(1, 1), activation="RELU6")
            y = mb.depthwise_conv2d(y, stride=(s, s) if i == 0 else (1, 1), activation="RELU6")
            y = mb.conv2d(y, out, kernel=(1, 1))
            x = mb.add(x, y) if i and out == channels else y
            channels = out
    x = mb.conv2d(x, 1280, kernel=(1, 1), activation="RELU6")
    x = mb.avg_pool(x, filter=(resolution // 32, resolution // 32), stride=(1, 1))
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), classes))
    return mb


def inception_cells(seed: int = 14) -> ModelBuilder:
    """Inception-style cells (1 x 40 x 40 x 3): a strided stem, then cells of four branches (a 1x1;
    a 1x1 then a 3x3; a wide 1x1 expansion, a depthwise 3x3 and a 1x1 projection; a 3x3 max pool
    then a 1x1) joined by CONCATENATION, with a strided cell between. The file lists each cell
    breadth first, every branch's first op, then every branch's second, as converters may: an
    order that keeps each branch's intermediates live together, where running branch by branch
    would not."""
    mb = ModelBuilder(seed)
    x = mb.conv2d(mb.input((1, 40, 40, 3)), 16, kernel=(3, 3), stride=(2, 2), activation="RELU6")  # 20
    for cell, (c, stride) in enumerate(((8, 1), (12, 2), (16, 1))):
        s = (stride, stride)
        a = mb.conv2d(x, c, kernel=(1, 1), stride=s, activation="RELU")
        b = mb.conv2d(x, c, kernel=(1, 1), activation="RELU")
        e = mb.conv2d(x, 6 * c, kernel=(1, 1), activation="RELU6")
        p = mb.max_pool(x, filter=(3, 3), stride=s, padding="SAME")
        b = mb.conv2d(b, c, kernel=(3, 3), stride=s, activation="RELU")
        e = mb.depthwise_conv2d(e, stride=s, activation="RELU6")
        p = mb.conv2d(p, c, kernel=(1, 1), activation="RELU")
        e = mb.conv2d(e, c, kernel=(1, 1))
        x = mb.concat([a, b, e, p], axis=3)
    x = mb.avg_pool(x, filter=(10, 10), stride=(1, 1))
    mb.output(mb.fully_connected(mb.reshape(x, (1, -1)), 10))
    return mb
