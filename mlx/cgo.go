package mlx

// The bridge compiles and links against the MLX library that
// cmd/install-mlx installs, which cgo finds through pkg-config: the file
// posttrainllm-mlx.pc in the install's pkgconfig folder, which has to be on
// PKG_CONFIG_PATH.
//
//   - A program that imports this package: run
//     `go run github.com/posttrainllm/posttrainllm/cmd/install-mlx@latest`
//     once and add the export line it prints to your shell profile.
//   - This repository: make does both (the install is .deps, and the
//     Makefile puts .deps/pkgconfig first on PKG_CONFIG_PATH); for go
//     commands by hand, export PKG_CONFIG_PATH="$PWD/.deps/pkgconfig".
//
// "Package posttrainllm-mlx was not found in the pkg-config search path"
// means that step is missing. The .pc file describes MLX only (headers,
// libmlx and an rpath, so binaries find libmlx without LD_LIBRARY_PATH);
// the C++ runtime library is named here. LD_LIBRARY_PATH overrides the
// rpath, which is how a binary built against mlx-cpu runs on the CUDA
// wheel's libmlx.so.

/*
#cgo pkg-config: posttrainllm-mlx
#cgo CXXFLAGS: -std=c++20 -O2 -Wno-deprecated-declarations
#cgo linux LDFLAGS: -lstdc++
#cgo darwin LDFLAGS: -lc++
*/
import "C"
