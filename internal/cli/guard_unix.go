//go:build unix

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// A work --exec command never outlives its worker. Each command runs in a
// process group of its own (so that a timeout or a stop kills everything it
// started), which also means nothing kills it when the worker dies. Two
// things do:
//
//   - the guardian, a small process of the worker's own binary started
//     with `work --exec` (startGuardian; else with the first command): the worker tells it, on a pipe, the process
//     group of every command it starts and ends; when the worker dies,
//     however it dies (SIGKILL too), the kernel closes the pipe and the
//     guardian kills every process group still running;
//   - on Linux, the command's parent-death signal (SIGKILL), for the moment
//     between its start and its registration with the guardian. Linux sends
//     it when the thread that started the child ends, not the process, so
//     commands are started from one OS thread that lives as long as the
//     worker (startOnLockedThread).
//
// Elsewhere (no parent-death signal), the guardian alone: best effort for
// a command killed in that moment. A command that leaves its own process
// group (setsid) is out of reach of both.

// guardEnv names the environment variable that makes the binary run as a
// guardian (see init): the worker starts its own executable with it.
const guardEnv = "PARTITIONQ_EXEC_GUARDIAN"

func init() {
	if os.Getenv(guardEnv) == "1" {
		os.Exit(runGuardian(os.Stdin))
	}
}

// runGuardian reads "+pgid" and "-pgid" lines until end of input, then kills
// every process group that was added and not removed.
func runGuardian(in io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	live := map[int]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		l := sc.Text()
		if len(l) < 2 {
			continue
		}
		pg, err := strconv.Atoi(l[1:])
		if err != nil || pg <= 1 {
			continue
		}
		switch l[0] {
		case '+':
			live[pg] = true
		case '-':
			delete(live, pg)
		}
	}
	for pg := range live {
		syscall.Kill(-pg, syscall.SIGKILL) // already gone is fine
	}
	return 0
}

// guardian is the worker's side of the guardian process. A guardian that
// died (someone killed it) is started again with the groups still running.
type guardian struct {
	mu   sync.Mutex
	w    io.WriteCloser // nil: not running
	live map[int]bool   // the process groups of the commands running
}

var theGuardian guardian

// startGuardian starts the guardian, if it does not run yet.
func startGuardian() error {
	theGuardian.mu.Lock()
	defer theGuardian.mu.Unlock()
	_, err := theGuardian.ensure()
	return err
}

// add registers a started command's process group.
func (g *guardian) add(pgid int) error { return g.send('+', pgid) }

// remove forgets a finished command's process group.
func (g *guardian) remove(pgid int) { g.send('-', pgid) } // a guardian that died is reported at the next add

func (g *guardian) send(op byte, pgid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.live == nil {
		g.live = map[int]bool{}
	}
	if op == '+' {
		g.live[pgid] = true
	} else {
		delete(g.live, pgid)
	}
	if started, err := g.ensure(); err != nil || started {
		return err // a new guardian was told every live group, this one too
	}
	if _, err := fmt.Fprintf(g.w, "%c%d\n", op, pgid); err != nil {
		g.w = nil // it died: the next command starts another
		return fmt.Errorf("the exec guardian stopped: %w", err)
	}
	return nil
}

// ensure starts a guardian when none runs and tells it every process group
// still running (a new guardian takes over what runs); it reports whether
// it started one. g.mu is held.
func (g *guardian) ensure() (started bool, err error) {
	if g.w != nil {
		return false, nil
	}
	if err := g.start(); err != nil {
		return false, err
	}
	for pg := range g.live {
		if _, err := fmt.Fprintf(g.w, "+%d\n", pg); err != nil {
			return true, fmt.Errorf("the exec guardian: %w", err)
		}
	}
	return true, nil
}

// start runs the guardian: this executable, in a process group of its own
// (so that a signal to the worker's group does not end it first).
func (g *guardian) start() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start the exec guardian: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), guardEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = nil, nil
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the exec guardian: %w", err)
	}
	go g.wait(cmd, w)
	g.w = w
	return nil
}

// wait reaps the guardian, which lives as long as the worker's process
// (unless someone kills it: then the next command starts another).
func (g *guardian) wait(cmd *exec.Cmd, w io.WriteCloser) {
	cmd.Wait() // how it ended does not matter
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == w {
		g.w = nil
	}
}

// ownProcessGroup makes cmd the leader of a new process group, and makes
// cancelling its context kill that whole group (the shell and everything
// it started), not just the shell.
func ownProcessGroup(cmd *exec.Cmd) {
	newProcessGroup(cmd)
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// newProcessGroup makes cmd the leader of a new process group, killed with
// SIGKILL when the worker dies (on Linux; the guardian everywhere).
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
}

// runGuarded starts cmd (in its own process group, see ownProcessGroup),
// registers the group with the guardian, waits for the command, and kills
// what is left of its group when it ends: no process of a handler
// outlives the handler.
func runGuarded(cmd *exec.Cmd) error {
	if err := startGuarded(cmd); err != nil {
		return err
	}
	err := cmd.Wait()
	endGuarded(cmd)
	return err
}

// startGuarded starts cmd, made the leader of a process group of its own
// (newProcessGroup or ownProcessGroup), and registers the group with the
// guardian. After its Wait, endGuarded ends what is left of the group.
func startGuarded(cmd *exec.Cmd) error {
	if err := startOnLockedThread(cmd); err != nil {
		return err
	}
	pg := cmd.Process.Pid
	if err := theGuardian.add(pg); err != nil {
		syscall.Kill(-pg, syscall.SIGKILL)
		cmd.Wait()
		return err
	}
	return nil
}

// endGuarded kills what is left of the process group of a command that
// startGuarded started and that has ended (its stragglers), and forgets
// the group.
func endGuarded(cmd *exec.Cmd) {
	pg := cmd.Process.Pid
	syscall.Kill(-pg, syscall.SIGKILL)
	theGuardian.remove(pg)
}

// killGroup kills the whole process group of a command that startGuarded
// started and that may still run.
func killGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // already gone is fine
}

// exitSignal returns the signal that ended a process, if one did.
func exitSignal(ee *exec.ExitError) (syscall.Signal, bool) {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}
