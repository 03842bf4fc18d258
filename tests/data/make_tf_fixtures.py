"""Writes the TFRecord fixtures of tests/data with TensorFlow's own writer.

Run once, by hand, where TensorFlow is installed (it is not a test
dependency): ``python tests/data/make_tf_fixtures.py tests/data``.
"""

import json
import sys
from pathlib import Path

import tensorflow as tf


def example(i: int) -> bytes:
    feature = tf.train.Feature
    features = {
        "id": feature(int64_list=tf.train.Int64List(value=[i, -i, 2**40 + i])),
        "score": feature(float_list=tf.train.FloatList(value=[i / 4, 1.5])),
        "name": feature(
            bytes_list=tf.train.BytesList(value=[f"n{i}".encode(), b"\x00\xff"])
        ),
    }
    message = tf.train.Example(features=tf.train.Features(feature=features))
    return bytes(message.SerializeToString())


def main(out: Path) -> None:
    examples = [example(i) for i in range(5)]
    raw = [bytes(range(i * 3)) for i in range(7)]
    for name, records, options in (
        ("tf_examples.tfrecord", examples, None),
        ("tf_examples.tfrecord.gz", examples, "GZIP"),
        ("tf_raw.tfrecord", raw, None),
    ):
        with tf.io.TFRecordWriter(str(out / name), options=options) as writer:
            for record in records:
                writer.write(record)
    fixtures = {
        "examples": [e.hex() for e in examples],
        "raw": [r.hex() for r in raw],
        "tensorflow": tf.__version__,
    }
    (out / "tf_fixtures.json").write_text(json.dumps(fixtures, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
