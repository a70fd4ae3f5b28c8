//go:build unix

package cli

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup makes cmd the leader of a new process group, and makes
// cancelling its context kill that whole group (the shell and everything
// it started), not just the shell.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// exitSignal returns the signal that ended a process, if one did.
func exitSignal(ee *exec.ExitError) (syscall.Signal, bool) {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}
