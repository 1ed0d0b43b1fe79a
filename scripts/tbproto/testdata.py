"""Writes tboard/testdata/python.tfevents with TensorBoard's own writer:
records of known bytes (RecordWriter) followed by an event holding a
scalar summary (the Event protobuf of the pinned tensorboard package), the
known-good file tboard's Go tests read and reproduce byte for byte.

    .deps/py/bin/python scripts/tbproto/testdata.py tboard/testdata/python.tfevents
"""
import sys

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

with open(sys.argv[1], "wb") as f:
    w = RecordWriter(f)
    for data in [b"", b"a", b"hello tensorboard", bytes(range(256)) * 2]:
        w.write(data)
    ev = event_pb2.Event(wall_time=1700000000.5, step=42)
    ev.summary.value.add(tag="loss", simple_value=2.5)
    w.write(ev.SerializeToString())
    w.flush()
