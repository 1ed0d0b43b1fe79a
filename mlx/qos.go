package mlx

import "github.com/posttrainllm/posttrainllm/internal/qos"

// raiseThreadQoS runs the MLX thread at user-initiated QoS: on Apple
// silicon, macOS then keeps the thread that encodes and waits for GPU work
// on the performance cores (package qos; a no-op on Linux).
func raiseThreadQoS() { _ = qos.SetThread(qos.UserInitiated) }
