package launch

import "syscall"

// rankProcAttr puts a rank in its own process group, so a terminal's
// Ctrl-C reaches only the supervisor, which passes it on to rank 0; and has
// the kernel kill the rank if the supervisor dies.
func rankProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
