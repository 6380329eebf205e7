"""Write the example model: a small int8 keyword-spotting style CNN, built from scratch.

    python examples/make_example.py [examples/tiny_kws.tflite]

The weights are random (seeded): the model exists to show the deployer end to
end, not to recognise words.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the model builder is the tests' own

from tests.tflite_builder import ModelBuilder  # noqa: E402


def build() -> ModelBuilder:
    mb = ModelBuilder(seed=2024)
    x = mb.input((1, 49, 10, 1))
    x = mb.conv2d(x, 32, kernel=(10, 4), stride=(2, 2), padding="SAME", activation="RELU")
    for _ in range(2):
        x = mb.depthwise_conv2d(x, kernel=(3, 3), padding="SAME", activation="RELU")
        x = mb.conv2d(x, 32, kernel=(1, 1), activation="RELU")
    y = mb.depthwise_conv2d(x, kernel=(3, 3), padding="SAME", activation="RELU")
    x = mb.add(x, y)
    x = mb.avg_pool(x, filter=(25, 5), stride=(1, 1), padding="VALID")
    x = mb.reshape(x, (1, 32))
    x = mb.fully_connected(x, 12)
    mb.output(mb.softmax(x))
    return mb


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("tiny_kws.tflite"))
    build().save(out)
    print(f"wrote {out}")
