package optim

import (
	"fmt"
	"math"
)

// checkUnit requires 0 <= v < 1 (a decay coefficient such as a beta).
func checkUnit(opt, field string, v float64) error {
	if !(v >= 0 && v < 1) {
		return fmt.Errorf("optim: %s: %s = %v, want 0 <= %s < 1", opt, field, v, field)
	}
	return nil
}

// checkNonNegative requires a finite v >= 0.
func checkNonNegative(opt, field string, v float64) error {
	if !(v >= 0) || math.IsInf(v, 0) {
		return fmt.Errorf("optim: %s: %s = %v, want a finite value >= 0", opt, field, v)
	}
	return nil
}

// checkPositive requires a finite v > 0.
func checkPositive(opt, field string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("optim: %s: %s = %v, want a finite value > 0", opt, field, v)
	}
	return nil
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
