package train

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
)

// nonFinite describes a NaN or infinite loss or gradient norm, or returns "".
func nonFinite(loss, gradNorm float64) string {
	switch {
	case math.IsNaN(loss) || math.IsInf(loss, 0):
		return fmt.Sprintf("loss is %v", loss)
	case math.IsNaN(gradNorm) || math.IsInf(gradNorm, 0):
		return fmt.Sprintf("gradient norm is %v (loss %.4g)", gradNorm, loss)
	}
	return ""
}

// logNonFinite describes what is not finite at a log line: the last
// update's loss or gradient norm (st), or the interval's mean loss; ""
// when all are finite.
func logNonFinite(st step.StepStats, mean float64) string {
	if bad := nonFinite(st.Loss, st.GradNorm); bad != "" {
		return bad
	}
	return nonFinite(mean, st.GradNorm)
}

// nonFiniteArrays names the first parameter or optimizer state array that
// holds a NaN or Inf, or returns "". It reads back one boolean per array.
func nonFiniteArrays(specs []model.ParamSpec, stateNames []string, params, state []*mlx.Array) (string, error) {
	var bad string
	var err error
	mlx.Run(func() []*mlx.Array {
		arrs := append(append([]*mlx.Array{}, params...), state...)
		flags := make([]*mlx.Array, len(arrs))
		for i, a := range arrs {
			flags[i] = mlx.All(mlx.IsFinite(a))
		}
		if err = mlx.Eval(flags...); err != nil {
			return nil
		}
		for i, f := range flags {
			ok, e := f.Item()
			if e != nil {
				err = e
				return nil
			}
			if ok == 0 {
				if i < len(params) {
					bad = fmt.Sprintf("parameter %q", specs[i].Name)
				} else {
					bad = fmt.Sprintf("optimizer state %q", stateNames[i-len(params)])
				}
				return nil
			}
		}
		return nil
	})
	return bad, err
}
