// Package tboard writes TensorBoard event files: scalars against a step,
// and text, in the format TensorBoard's reader (EventAccumulator, and the
// `tensorboard --logdir` dashboard) loads.
//
// An event file is a sequence of TFRecords (record.go: a length, the
// record, each followed by a masked CRC-32C), each record one serialized
// tensorboard.Event protobuf. The messages are generated from TensorBoard's
// own event.proto and summary.proto (package tbpb) and serialized by
// google.golang.org/protobuf, so field numbers and encodings come from
// TensorBoard's definitions rather than from hand-written wire code.
//
// The package depends on neither MLX nor the rest of posttrainllm: the
// trainer feeds it through its metrics sink (train.MetricsSink).
package tboard
