"""Prints what TensorBoard's own reader finds in a run folder's event files.

    python tb_scalars.py RUN/tb

Loads the folder with tensorboard's EventAccumulator (every series kept
whole: size_guidance 0) and prints one JSON object: "scalars", each tag's
[step, value] pairs in the reader's order, and "text", each text tag's
[step, string] pairs.
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator as ea

acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
out = {"scalars": {}, "text": {}}
for tag in tags["scalars"]:
    out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
for tag in tags["tensors"]:
    events = acc.Tensors(tag)
    out["text"][tag] = [[e.step, e.tensor_proto.string_val[0].decode()] for e in events
                        if e.tensor_proto.string_val]
print(json.dumps(out))
