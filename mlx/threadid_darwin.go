package mlx

/*
#include <pthread.h>
#include <stdint.h>

static uint64_t ptlm_thread_id(void) {
  uint64_t id = 0;
  pthread_threadid_np(NULL, &id);
  return id;
}
*/
import "C"

// osThreadID identifies the calling OS thread (scopes are per thread):
// macOS's system-wide thread id, what gettid is on Linux.
func osThreadID() int { return int(C.ptlm_thread_id()) }
