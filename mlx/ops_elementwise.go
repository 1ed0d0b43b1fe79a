package mlx

/*
#include "bridge.h"
*/
import "C"

// Abs returns the element-wise absolute value.
func Abs(a *Array) *Array {
	return unary("abs", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_abs(x, o) })
}

// Negative returns -a element-wise.
func Negative(a *Array) *Array {
	return unary("negative", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_negative(x, o) })
}

// Sign returns the element-wise sign (-1, 0, 1).
func Sign(a *Array) *Array {
	return unary("sign", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_sign(x, o) })
}

// Sqrt returns the element-wise square root.
func Sqrt(a *Array) *Array {
	return unary("sqrt", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_sqrt(x, o) })
}

// Rsqrt returns the element-wise reciprocal square root.
func Rsqrt(a *Array) *Array {
	return unary("rsqrt", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_rsqrt(x, o) })
}

// Square returns a*a element-wise.
func Square(a *Array) *Array {
	return unary("square", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_square(x, o) })
}

// Exp returns the element-wise exponential.
func Exp(a *Array) *Array {
	return unary("exp", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_exp(x, o) })
}

// Log returns the element-wise natural logarithm.
func Log(a *Array) *Array {
	return unary("log", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_log(x, o) })
}

// Expm1 returns exp(a)−1 element-wise, accurate near zero where
// Exp(a)−1 in float32 cancels to 0 (the k3 KL estimate of nearby
// policies needs it).
func Expm1(a *Array) *Array {
	return unary("expm1", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_expm1(x, o) })
}

// Log1p returns log(1+a) element-wise, accurate near zero.
func Log1p(a *Array) *Array {
	return unary("log1p", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_log1p(x, o) })
}

// Sin returns the element-wise sine.
func Sin(a *Array) *Array {
	return unary("sin", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_sin(x, o) })
}

// Cos returns the element-wise cosine.
func Cos(a *Array) *Array {
	return unary("cos", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_cos(x, o) })
}

// Tanh returns the element-wise hyperbolic tangent.
func Tanh(a *Array) *Array {
	return unary("tanh", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_tanh(x, o) })
}

// Sigmoid returns 1/(1+exp(-a)) element-wise.
func Sigmoid(a *Array) *Array {
	return unary("sigmoid", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_sigmoid(x, o) })
}

// Erf returns the element-wise error function.
func Erf(a *Array) *Array {
	return unary("erf", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_erf(x, o) })
}

// Floor returns the element-wise floor.
func Floor(a *Array) *Array {
	return unary("floor", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_floor(x, o) })
}

// LogicalNot returns the element-wise logical negation.
func LogicalNot(a *Array) *Array {
	return unary("logical_not", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_logical_not(x, o) })
}

// IsNaN returns a boolean array, true where a is NaN.
func IsNaN(a *Array) *Array {
	return unary("isnan", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_isnan(x, o) })
}

// IsInf returns a boolean array, true where a is ±Inf.
func IsInf(a *Array) *Array {
	return unary("isinf", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_isinf(x, o) })
}

// IsFinite returns a boolean array, true where a is neither NaN nor ±Inf.
func IsFinite(a *Array) *Array {
	return unary("isfinite", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_isfinite(x, o) })
}

// StopGradient returns a, treated as a constant by gradient transforms.
func StopGradient(a *Array) *Array {
	return unary("stop_gradient", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_stop_gradient(x, o) })
}

// Copy returns a copy of a.
func Copy(a *Array) *Array {
	return unary("copy", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_copy(x, o) })
}

// Add returns a+b element-wise, with broadcasting.
func Add(a, b *Array) *Array {
	return binary("add", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_add(x, y, o) })
}

// Subtract returns a-b element-wise, with broadcasting.
func Subtract(a, b *Array) *Array {
	return binary("subtract", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_subtract(x, y, o) })
}

// Multiply returns a*b element-wise, with broadcasting.
func Multiply(a, b *Array) *Array {
	return binary("multiply", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_multiply(x, y, o) })
}

// Divide returns a/b element-wise, with broadcasting.
func Divide(a, b *Array) *Array {
	return binary("divide", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_divide(x, y, o) })
}

// Power returns a**b element-wise, with broadcasting.
func Power(a, b *Array) *Array {
	return binary("power", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_power(x, y, o) })
}

// Maximum returns the larger of a and b element-wise, with broadcasting.
func Maximum(a, b *Array) *Array {
	return binary("maximum", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_maximum(x, y, o) })
}

// Minimum returns the smaller of a and b element-wise, with broadcasting.
func Minimum(a, b *Array) *Array {
	return binary("minimum", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_minimum(x, y, o) })
}

// Equal returns a == b element-wise, with broadcasting.
func Equal(a, b *Array) *Array {
	return binary("equal", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_equal(x, y, o) })
}

// NotEqual returns a != b element-wise, with broadcasting.
func NotEqual(a, b *Array) *Array {
	return binary("not_equal", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_not_equal(x, y, o) })
}

// Less returns a < b element-wise, with broadcasting.
func Less(a, b *Array) *Array {
	return binary("less", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_less(x, y, o) })
}

// LessEqual returns a <= b element-wise, with broadcasting.
func LessEqual(a, b *Array) *Array {
	return binary("less_equal", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_less_equal(x, y, o) })
}

// Greater returns a > b element-wise, with broadcasting.
func Greater(a, b *Array) *Array {
	return binary("greater", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_greater(x, y, o) })
}

// GreaterEqual returns a >= b element-wise, with broadcasting.
func GreaterEqual(a, b *Array) *Array {
	return binary("greater_equal", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_greater_equal(x, y, o) })
}

// LogicalAnd returns a && b element-wise, with broadcasting.
func LogicalAnd(a, b *Array) *Array {
	return binary("logical_and", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_logical_and(x, y, o) })
}

// LogicalOr returns a || b element-wise, with broadcasting.
func LogicalOr(a, b *Array) *Array {
	return binary("logical_or", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_logical_or(x, y, o) })
}

// Sum returns the sum over the given axes (all axes when none are given).
func Sum(a *Array, axes ...int) *Array {
	return reduce("sum", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_sum(x, ax, n, k, o)
	})
}

// SumKeep is Sum keeping the reduced axes with size 1.
func SumKeep(a *Array, axes ...int) *Array {
	return reduce("sum", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_sum(x, ax, n, k, o)
	})
}

// Mean returns the mean over the given axes (all axes when none are given).
func Mean(a *Array, axes ...int) *Array {
	return reduce("mean", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_mean(x, ax, n, k, o)
	})
}

// MeanKeep is Mean keeping the reduced axes with size 1.
func MeanKeep(a *Array, axes ...int) *Array {
	return reduce("mean", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_mean(x, ax, n, k, o)
	})
}

// Max returns the maximum over the given axes (all axes when none are given).
func Max(a *Array, axes ...int) *Array {
	return reduce("max", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_max(x, ax, n, k, o)
	})
}

// MaxKeep is Max keeping the reduced axes with size 1.
func MaxKeep(a *Array, axes ...int) *Array {
	return reduce("max", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_max(x, ax, n, k, o)
	})
}

// Min returns the minimum over the given axes (all axes when none are given).
func Min(a *Array, axes ...int) *Array {
	return reduce("min", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_min(x, ax, n, k, o)
	})
}

// MinKeep is Min keeping the reduced axes with size 1.
func MinKeep(a *Array, axes ...int) *Array {
	return reduce("min", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_min(x, ax, n, k, o)
	})
}

// LogSumExp returns log(sum(exp(a))), computed stably, over the given axes (all axes when none are given).
func LogSumExp(a *Array, axes ...int) *Array {
	return reduce("logsumexp", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_logsumexp(x, ax, n, k, o)
	})
}

// LogSumExpKeep is LogSumExp keeping the reduced axes with size 1.
func LogSumExpKeep(a *Array, axes ...int) *Array {
	return reduce("logsumexp", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_logsumexp(x, ax, n, k, o)
	})
}

// All returns whether all elements are true over the given axes (all axes when none are given).
func All(a *Array, axes ...int) *Array {
	return reduce("all", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_all(x, ax, n, k, o)
	})
}

// AllKeep is All keeping the reduced axes with size 1.
func AllKeep(a *Array, axes ...int) *Array {
	return reduce("all", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_all(x, ax, n, k, o)
	})
}

// Any returns whether any element is true over the given axes (all axes when none are given).
func Any(a *Array, axes ...int) *Array {
	return reduce("any", a, axes, false, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_any(x, ax, n, k, o)
	})
}

// AnyKeep is Any keeping the reduced axes with size 1.
func AnyKeep(a *Array, axes ...int) *Array {
	return reduce("any", a, axes, true, func(x C.ptlm_array, ax *C.int, n C.int, k C.bool, o *C.ptlm_array) C.int {
		return C.ptlm_any(x, ax, n, k, o)
	})
}
