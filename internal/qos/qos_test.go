package qos

import (
	"runtime"
	"testing"
)

func TestRun(t *testing.T) {
	ran := false
	Run(Utility, func() { ran = true })
	if !ran {
		t.Fatal("Run did not call fn")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range []Class{UserInitiated, Utility} {
		if err := SetThread(c); err != nil {
			t.Errorf("SetThread(%s): %v", c, err)
		}
	}
	if UserInitiated.String() != "user-initiated" || Utility.String() != "utility" {
		t.Errorf("class names %q, %q", UserInitiated, Utility)
	}
}
