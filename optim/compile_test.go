package optim

import (
	"fmt"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// compiledUpdate compiles opt.Update as a function of (params, grads,
// state, lr) → (params, state) and counts how often MLX traces it.
func compiledUpdate(t *testing.T, opt Optimizer, nParams, nState int, traces *int) *mlx.Closure {
	t.Helper()
	fn := func(in []*mlx.Array) ([]*mlx.Array, error) {
		*traces++
		ps := in[:nParams]
		gs := in[nParams : 2*nParams]
		st := in[2*nParams : 2*nParams+nState]
		lr := in[2*nParams+nState]
		newPs, newSt, err := opt.Update(ps, gs, st, lr)
		if err != nil {
			return nil, err
		}
		return append(newPs, newSt...), nil
	}
	c, err := mlx.Compile(fn)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUpdateCompiles runs three chained updates of every optimizer through
// one compiled function and through plain calls, with a different lr each
// time: the results agree, the compiled function traced once, and calling
// it on the same inputs with two learning rates gives the two different
// plain results, so lr is a live input and not a constant of the trace.
func TestUpdateCompiles(t *testing.T) {
	onMLX(t, func() {
		params := fixtureParams()
		n := len(params)
		for _, opt := range newAll(t, params, DefaultConfig()) {
			names := opt.StateNames()
			traces := 0
			step := compiledUpdate(t, opt, n, len(names), &traces)

			ps := paramArrays(t, params, mlx.Float32)
			state, _ := opt.Init()
			cps, cstate := ps, state // compiled chain
			for k, lrv := range fixtureLRs {
				gs := gradArrays(t, params, k, mlx.Float32)
				lr := mlx.Scalar(lrv, mlx.Float32)
				in := append(append(append(append([]*mlx.Array{}, cps...), gs...), cstate...), lr)
				out, err := step.Call(in...)
				if err != nil {
					t.Fatalf("%s: compiled update %d: %v", opt.Name(), k, err)
				}
				cps, cstate = out[:n], out[n:]
				ps, state, err = opt.Update(ps, gs, state, lr)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range params {
					assertClose(t, opt.Name()+" compiled param "+p.Name, readData(t, cps[i]), readData(t, ps[i]), 1e-5)
				}
				for j, name := range names {
					assertClose(t, opt.Name()+" compiled state "+name, readData(t, cstate[j]), readData(t, state[j]), 1e-5)
				}
			}

			// Same inputs, two learning rates, one compiled function.
			gs := gradArrays(t, params, 0, mlx.Float32)
			var results [2][]float64
			for r, lrv := range []float64{0.01, 0.2} {
				lr := mlx.Scalar(lrv, mlx.Float32)
				in := append(append(append(append([]*mlx.Array{}, cps...), gs...), cstate...), lr)
				out, err := step.Call(in...)
				if err != nil {
					t.Fatal(err)
				}
				plain, _, err := opt.Update(cps, gs, cstate, lr)
				if err != nil {
					t.Fatal(err)
				}
				assertClose(t, opt.Name()+" compiled at lr "+fmt.Sprint(lrv), readData(t, out[0]), readData(t, plain[0]), 1e-5)
				results[r] = readData(t, out[0])
			}
			if d := maxAbsDiff(results[0], results[1]); d < 1e-3 {
				t.Fatalf("%s: compiled update at lr 0.01 and 0.2 differ by only %g: lr is not reaching the trace", opt.Name(), d)
			}
			if traces != 1 {
				t.Fatalf("%s: compiled update traced %d times over %d calls, want 1", opt.Name(), traces, len(fixtureLRs)+2)
			}
			step.Free()
		}
	})
}
