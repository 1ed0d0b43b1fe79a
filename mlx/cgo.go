package mlx

// The bridge compiles against the MLX wheel that scripts/install-mlx.sh puts
// in .deps/mlx at the repository root, and the rpath lets binaries find
// libmlx.so there without LD_LIBRARY_PATH. Programs built elsewhere (another
// module, a packaged install) can add their own paths with CGO_CXXFLAGS and
// CGO_LDFLAGS; LD_LIBRARY_PATH overrides the rpath, which is how a binary
// built against mlx-cpu runs on the CUDA wheel's libmlx.so.

/*
#cgo CXXFLAGS: -std=c++20 -O2 -I${SRCDIR}/../.deps/mlx/mlx/include -Wno-deprecated-declarations
#cgo LDFLAGS: -L${SRCDIR}/../.deps/mlx/mlx/lib -lmlx -lstdc++ -Wl,-rpath,${SRCDIR}/../.deps/mlx/mlx/lib
*/
import "C"
