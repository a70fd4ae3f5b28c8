//go:build !unix

package cli

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup: without Unix process groups, cancelling kills the shell
// only (exec's default), and nothing kills a command when its worker dies.
func ownProcessGroup(*exec.Cmd) {}

func newProcessGroup(*exec.Cmd) {}

func runGuarded(cmd *exec.Cmd) error { return cmd.Run() }

func startGuarded(cmd *exec.Cmd) error { return cmd.Start() }

func endGuarded(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) { cmd.Process.Kill() }

func startGuardian() error { return nil }

func exitSignal(*exec.ExitError) (syscall.Signal, bool) { return 0, false }
