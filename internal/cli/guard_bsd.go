//go:build unix && !linux

package cli

import (
	"os/exec"
	"syscall"
)

// No parent-death signal here: the guardian alone (best effort).
func setParentDeathSignal(*syscall.SysProcAttr) {}

func startOnLockedThread(cmd *exec.Cmd) error { return cmd.Start() }
