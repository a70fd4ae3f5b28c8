//go:build !unix

package cli

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup: without Unix process groups, cancelling kills the shell
// only (exec's default).
func ownProcessGroup(*exec.Cmd) {}

func exitSignal(*exec.ExitError) (syscall.Signal, bool) { return 0, false }
