package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// execWaitDelay bounds how long a finished (or killed) handler's output is
// awaited when a process it left behind still holds its pipes open.
const execWaitDelay = 2 * time.Second

// execHandler runs a shell command for each event, with the payload on
// standard input and the metadata in PARTITIONQ_* environment variables.
// Exit status 0 is success; anything else is a failure whose error text is
// the end of the command's standard error. When the event's context ends
// (handler timeout, or shutdown timeout) the command's whole process group
// is killed. It is safe for concurrent use.
type execHandler struct {
	command string
	environ []string  // base environment of the commands
	stdout  io.Writer // where the commands' standard output goes; safe for concurrent use
	stderr  io.Writer // where their standard error is copied; safe for concurrent use
}

func (h *execHandler) Handle(ctx context.Context, ev *partitionq.Event) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", h.command)
	cmd.Env = append(slices.Clip(h.environ), eventEnv(ev)...)
	cmd.Stdin = bytes.NewReader(ev.Payload)
	cmd.Stdout = h.stdout
	tail := &tailBuffer{}
	cmd.Stderr = &teeWriter{keep: tail, copy: h.stderr}
	ownProcessGroup(cmd)
	cmd.WaitDelay = execWaitDelay
	err := runGuarded(cmd)
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()) {
		return nil
	}
	msg := describeExit(err)
	if ctx.Err() != nil && killed(err) {
		msg = "process group killed"
		if errors.Is(ctx.Err(), context.Canceled) {
			msg += " (the worker is stopping and --shutdown-timeout passed)"
		}
	}
	if t := tail.String(); t != "" {
		msg += ": " + t
	}
	return errors.New(msg)
}

// eventEnv is the metadata of ev as environment variables.
func eventEnv(ev *partitionq.Event) []string {
	return []string{
		"PARTITIONQ_EVENT_ID=" + strconv.FormatInt(ev.ID, 10),
		"PARTITIONQ_KEY=" + ev.Key,
		"PARTITIONQ_TYPE=" + ev.Type,
		"PARTITIONQ_SLOT=" + strconv.Itoa(ev.Slot),
		"PARTITIONQ_ATTEMPT=" + strconv.Itoa(ev.Attempt),
		"PARTITIONQ_QUEUE=" + ev.Queue,
		"PARTITIONQ_GROUP=" + ev.Group,
		"PARTITIONQ_EVENT_TIME=" + ev.Time.UTC().Format(time.RFC3339Nano),
	}
}

// describeExit says how a command ended: "exit status 3", "killed by
// signal 9 (killed)", "exit status 137 (a command it ran died of signal
// 9)", or why it could not run.
func describeExit(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Sprintf("could not run the handler: %v", err)
	}
	if sig, ok := exitSignal(ee); ok {
		return fmt.Sprintf("killed by signal %d (%s)", sig, sig)
	}
	code := ee.ExitCode()
	if code > 128 && code < 128+65 {
		// How a shell reports a command of its own that a signal ended.
		return fmt.Sprintf("exit status %d (a command it ran died of signal %d)", code, code-128)
	}
	return fmt.Sprintf("exit status %d", code)
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	_, ok := exitSignal(ee)
	return ok
}

// teeWriter keeps everything in keep and copies it to copy, ignoring the
// copy's errors so that the kept tail is complete.
type teeWriter struct {
	keep io.Writer
	copy io.Writer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	n, err := t.keep.Write(p)
	if t.copy != nil {
		t.copy.Write(p) // best effort: the tail matters
	}
	return n, err
}
