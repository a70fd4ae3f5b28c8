//go:build linux

package cli

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// starts serves startOnLockedThread: one goroutine (spawnLoop, started
// with the first command) locked to its OS thread for the life of the
// process, so that the thread every command was started from (its "parent"
// for the parent-death signal) ends only with the process.
var (
	starts     = make(chan startReq)
	startsOnce sync.Once
)

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawnLoop() {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the process
	for r := range starts {
		r.done <- r.cmd.Start()
	}
}

func startOnLockedThread(cmd *exec.Cmd) error {
	startsOnce.Do(func() { go spawnLoop() })
	done := make(chan error, 1)
	starts <- startReq{cmd: cmd, done: done}
	return <-done
}
