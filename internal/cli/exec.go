package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// execWaitDelay bounds how long a finished (or killed) handler's output is
// awaited when a process it left behind still holds its pipes open.
const execWaitDelay = 2 * time.Second

// Exit statuses of a --exec command that say more than "failed": the codes
// of sysexits.h with the same sense.
const (
	// exitDeadLetter (EX_DATAERR): the event itself is bad; do not retry
	// it: it becomes a dead letter at once (partitionq.DeadLetterNow).
	exitDeadLetter = 65
	// exitRetryAfter (EX_TEMPFAIL): try again later, after the delay the
	// command wrote to $PARTITIONQ_RETRY_AFTER_FILE (partitionq.RetryAfter);
	// without one, after the backoff, as any failure.
	exitRetryAfter = 75
)

// execHandler runs a shell command for each event, with the payload on
// standard input and the metadata in PARTITIONQ_* environment variables.
// Exit status 0 is success; 65 a dead letter now, 75 a failure retried
// after the delay the command wrote to its retry-after file; anything else
// is a failure. A failure's error text is the end of the command's standard
// error. When the event's context ends (handler timeout, a lost slot, or
// the shutdown timeout) the command's whole process group is killed. It is
// safe for concurrent use.
type execHandler struct {
	command string
	environ []string  // base environment of the commands
	stdout  io.Writer // where the commands' standard output goes; safe for concurrent use
	stderr  io.Writer // where their standard error is copied; safe for concurrent use
	// replyDir holds the commands' retry-after files (named by a count, one
	// per command, removed when it ends); "" gives the commands none.
	replyDir string
	files    atomic.Uint64
}

// newExecHandler makes an execHandler with a directory of its own for the
// retry-after files; close removes it.
func newExecHandler(command string, environ []string, stdout, stderr io.Writer) (*execHandler, error) {
	dir, err := os.MkdirTemp("", "partitionq-exec-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the commands' retry-after files: %w", err)
	}
	return &execHandler{command: command, environ: environ, stdout: stdout, stderr: stderr, replyDir: dir}, nil
}

// close removes the directory of retry-after files.
func (h *execHandler) close() {
	if h.replyDir != "" {
		os.RemoveAll(h.replyDir)
	}
}

func (h *execHandler) Handle(ctx context.Context, ev *partitionq.Event) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", h.command)
	cmd.Env = append(slices.Clip(h.environ), eventEnv(ev)...)
	replyFile := ""
	if h.replyDir != "" {
		replyFile = filepath.Join(h.replyDir, strconv.FormatUint(h.files.Add(1), 10))
		defer os.Remove(replyFile)
	}
	cmd.Env = append(cmd.Env, "PARTITIONQ_RETRY_AFTER_FILE="+replyFile)
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
			msg += " (the worker is stopping and --shutdown-timeout passed, or it lost the slot)"
		}
		if t := tail.String(); t != "" {
			msg += ": " + t
		}
		return errors.New(msg)
	}
	var delay time.Duration
	var delayErr error
	code := exitStatus(err)
	if code == exitRetryAfter {
		if delay, delayErr = readRetryAfter(replyFile); delayErr != nil {
			msg += fmt.Sprintf(" (retry later, but %v: retried after the backoff)", delayErr)
		}
	}
	if t := tail.String(); t != "" {
		msg += ": " + t
	}
	switch {
	case code == exitDeadLetter:
		return partitionq.DeadLetterNow(errors.New(msg))
	case delay > 0:
		return partitionq.RetryAfter(delay, errors.New(msg))
	}
	return errors.New(msg)
}

// exitStatus is the exit status of a command that exited, or -1.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1
	}
	if _, ok := exitSignal(ee); ok {
		return -1
	}
	return ee.ExitCode()
}

// maxRetryAfterFile bounds what is read of a retry-after file.
const maxRetryAfterFile = 64

// readRetryAfter reads the delay a command wrote to its retry-after file:
// 0 and no error when it wrote none.
func readRetryAfter(path string) (time.Duration, error) {
	if path == "" {
		return 0, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRetryAfterFile+1))
	if err != nil {
		return 0, err
	}
	if len(b) > maxRetryAfterFile {
		return 0, fmt.Errorf("$PARTITIONQ_RETRY_AFTER_FILE holds more than %d bytes", maxRetryAfterFile)
	}
	d, err := parseDelay(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("$PARTITIONQ_RETRY_AFTER_FILE holds %q: %w", strings.TrimSpace(string(b)), err)
	}
	return d, nil
}

// parseDelay reads a handler's retry delay: seconds ("10", "0.25") or a Go
// duration ("1m30s"). A delay of 0 means at once (one millisecond).
func parseDelay(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("no delay")
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		return delayOfSeconds(secs)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a delay: give seconds (10, 0.5) or a duration (1m30s)")
	}
	if d < 0 {
		return 0, errors.New("a negative delay")
	}
	return max(d, time.Millisecond), nil
}

// delayOfSeconds turns seconds into a retry delay: negative, NaN and
// delays past about 290 years are refused; 0 is one millisecond (at once).
func delayOfSeconds(secs float64) (time.Duration, error) {
	if math.IsNaN(secs) || secs < 0 || secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("not a delay in seconds: %v", secs)
	}
	return max(time.Duration(secs*float64(time.Second)), time.Millisecond), nil
}

// eventEnv is the metadata of ev as environment variables.
func eventEnv(ev *partitionq.Event) []string {
	return []string{
		"PARTITIONQ_EVENT_ID=" + strconv.FormatInt(ev.ID, 10),
		"PARTITIONQ_KEY=" + ev.Key,
		"PARTITIONQ_TYPE=" + ev.Type,
		"PARTITIONQ_SLOT=" + strconv.Itoa(ev.Slot),
		"PARTITIONQ_SLOTS=" + strconv.Itoa(ev.Slots),
		"PARTITIONQ_EPOCH=" + strconv.FormatInt(ev.Epoch, 10),
		"PARTITIONQ_FENCE=" + ev.Fence(),
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
