// Package tbpb is the Go code protoc-gen-go generates from TensorBoard's
// event.proto and the files it imports (summary.proto, tensor.proto, …),
// taken from the descriptors compiled into the pinned tensorboard wheel, so
// the messages are exactly the ones TensorBoard's reader parses. Package
// tboard writes them; regenerate with scripts/tbproto/generate.sh.
package tbpb
