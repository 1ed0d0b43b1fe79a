"""Writes the FileDescriptorSet of TensorBoard's event.proto and the files it
imports, as the pinned `tensorboard` package compiled them, to the path given.

The tensorboard wheel ships its protos compiled (event_pb2 and friends), not
as .proto sources; protoc reads the descriptor set instead
(--descriptor_set_in), so the Go code is generated from exactly the
definitions TensorBoard's own reader parses. Run by scripts/tbproto/generate.sh.
"""
import sys

from google.protobuf import descriptor_pb2
from tensorboard.compat.proto import event_pb2

out = descriptor_pb2.FileDescriptorSet()
seen = set()


def add(fd):
    # Dependencies first: protoc wants a file after everything it imports.
    if fd.name in seen:
        return
    seen.add(fd.name)
    for dep in fd.dependencies:
        add(dep)
    proto = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(proto)
    out.file.append(proto)


add(event_pb2.DESCRIPTOR)
with open(sys.argv[1], "wb") as f:
    f.write(out.SerializeToString())
for proto in out.file:
    print(proto.name)
