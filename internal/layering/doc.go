// Package layering holds the test that keeps the module's imports flowing
// one way: from the command down to the MLX bridge, never back up. Its
// list of layers places every package; docs/architecture.md draws them.
package layering
