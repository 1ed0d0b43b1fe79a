package qos

/*
#include <pthread.h>
#include <pthread/qos.h>

static int ptlm_qos_set(int user_initiated) {
  return pthread_set_qos_class_self_np(user_initiated ? QOS_CLASS_USER_INITIATED : QOS_CLASS_UTILITY, 0);
}

static int ptlm_qos_get(void) {
  qos_class_t c = QOS_CLASS_UNSPECIFIED;
  int rel = 0;
  pthread_get_qos_class_np(pthread_self(), &c, &rel);
  return (int)c;
}

static int ptlm_qos_restore(int c) {
  return pthread_set_qos_class_self_np((qos_class_t)c, 0);
}
*/
import "C"

import (
	"fmt"
	"syscall"
)

func setThread(c Class) error {
	ui := C.int(0)
	if c == UserInitiated {
		ui = 1
	}
	if rc := C.ptlm_qos_set(ui); rc != 0 {
		return fmt.Errorf("qos: setting the thread's class to %s: %w", c, syscall.Errno(rc))
	}
	return nil
}

// enter sets the calling thread's class and returns what puts back the one
// it had. Threads Go creates start unspecified, which a thread cannot set
// itself back to; they go back to the default class instead, which is what
// unspecified threads are scheduled as.
func enter(c Class) (restore func()) {
	prev := C.ptlm_qos_get()
	if setThread(c) != nil {
		return func() {}
	}
	if prev == C.QOS_CLASS_UNSPECIFIED {
		prev = C.QOS_CLASS_DEFAULT
	}
	return func() { C.ptlm_qos_restore(prev) }
}
