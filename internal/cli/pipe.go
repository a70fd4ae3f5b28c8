package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// work --pipe (docs/handlers.md): one long-lived process, `sh -c CMD`,
// takes the worker's events as JSON lines on its standard input and
// answers each with a JSON line on its standard output (pipewire.go), in
// any order, as many at once as the worker has handler calls in flight
// (events of different keys: the worker runs one event of a key at a
// time).
//
// The process runs in a process group of its own, registered with the
// guardian like a --exec command's, so it never outlives the worker. When
// it ends, its requests in flight fail (each a failed attempt) and it is
// started again, after a backoff when it keeps ending. When a call's
// context ends (the handler timeout, a lost slot, the shutdown timeout)
// the process is sent a cancel line for that request; if it has not
// answered within the cancel grace, its whole process group is killed (and
// the process started again), so that nothing of a lost slot runs on when
// a standby may take the slot.

// Limits of work --pipe.
const (
	// pipeMaxLine bounds a reply line; a longer one is dropped, logged.
	pipeMaxLine = 1 << 20
	// pipeLinesQueued bounds the request lines waiting to be written.
	pipeLinesQueued = 1024
	// pipeRestartMin and pipeRestartMax bound the wait before the process
	// is started again after it ended; the wait doubles while it keeps
	// ending within pipeStable of its start.
	pipeRestartMin = 100 * time.Millisecond
	pipeRestartMax = 10 * time.Second
	pipeStable     = 10 * time.Second
	// pipeExitWait is how long the process has to exit once its standard
	// input is closed at the worker's stop; then its group is killed.
	pipeExitWait = 5 * time.Second
	// pipeCancelGraceDefault is --pipe-cancel-grace's default.
	pipeCancelGraceDefault = 500 * time.Millisecond
)

// pipeHandler is the worker's side of work --pipe. It is safe for
// concurrent use.
type pipeHandler struct {
	command string
	environ []string  // the process's environment
	stderr  io.Writer // where its standard error is copied; safe for concurrent use
	log     *slog.Logger
	grace   time.Duration // how long a cancelled request may take to be answered

	reqs atomic.Uint64 // request numbers, from 1

	mu      sync.Mutex
	proc    *pipeProc     // the running process; nil while none runs
	up      chan struct{} // closed when proc is set (a new one after each end)
	lastWhy string        // how the last process ended

	stop     chan struct{} // closed by close
	exitWait time.Duration // how long the process has to exit once stop closes
	done     chan struct{} // closed when the supervisor returned
}

// newPipeHandler starts the process (sh -c command) and the supervisor
// that starts it again whenever it ends, until close.
func newPipeHandler(command string, environ []string, stderr io.Writer, log *slog.Logger, grace time.Duration) (*pipeHandler, error) {
	h := &pipeHandler{command: command, environ: environ, stderr: stderr, log: log, grace: grace,
		up: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	p, err := h.start()
	if err != nil {
		return nil, err
	}
	go h.supervise(p)
	return h, nil
}

// close ends the process: its standard input is closed, it has
// pipeExitWait to exit (less when ctx ends sooner), then its process group
// is killed. Call it once the worker has stopped (no call is in flight),
// once.
func (h *pipeHandler) close(ctx context.Context) {
	h.exitWait = pipeExitWait
	if d, ok := ctx.Deadline(); ok {
		h.exitWait = max(min(h.exitWait, time.Until(d)), 0)
	}
	close(h.stop) // publishes exitWait to the supervisor
	<-h.done
}

// supervise runs the process first and every process after it: when one
// ends, it starts another, after a backoff, until close.
func (h *pipeHandler) supervise(p *pipeProc) {
	defer close(h.done)
	backoff := pipeRestartMin
	for {
		if p != nil {
			h.mu.Lock()
			h.proc = p
			close(h.up)
			h.mu.Unlock()
			stopping := false
			select {
			case <-p.dead:
			case <-h.stop:
				stopping = true
				p.shutdown(h.exitWait)
			}
			h.mu.Lock()
			h.proc, h.up, h.lastWhy = nil, make(chan struct{}), p.why
			h.mu.Unlock()
			if stopping {
				return
			}
			if time.Since(p.started) >= pipeStable {
				backoff = pipeRestartMin
			}
			h.log.Warn("partitionq: the pipe handler ended; its events in flight failed, and it starts again",
				slog.String("how", p.why), slog.Duration("in", backoff))
		}
		select {
		case <-h.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, pipeRestartMax)
		var err error
		if p, err = h.start(); err != nil {
			h.log.Error("partitionq: could not start the pipe handler", slog.Any("error", err), slog.Duration("next try in", backoff))
			h.mu.Lock()
			h.lastWhy = err.Error()
			h.mu.Unlock()
		}
	}
}

// current returns the running process, waiting for one while none runs
// (it is being started again), until ctx ends.
func (h *pipeHandler) current(ctx context.Context) (*pipeProc, error) {
	for {
		h.mu.Lock()
		p, up, why := h.proc, h.up, h.lastWhy
		h.mu.Unlock()
		if p != nil {
			return p, nil
		}
		select {
		case <-up:
		case <-h.stop:
			return nil, errors.New("the pipe handler is not running: the worker is stopping")
		case <-ctx.Done():
			return nil, fmt.Errorf("the pipe handler is not running (it ended: %s; it is started again): %w", why, ctx.Err())
		}
	}
}

// Handle hands ev to the process and waits for its reply.
func (h *pipeHandler) Handle(ctx context.Context, ev *partitionq.Event) error {
	return h.handle(ctx, []*partitionq.Event{ev})
}

// HandleRun hands a run of one key's events to the process in one request
// and waits for its reply (work --runs).
func (h *pipeHandler) HandleRun(ctx context.Context, evs []*partitionq.Event) error {
	return h.handle(ctx, evs)
}

func (h *pipeHandler) handle(ctx context.Context, evs []*partitionq.Event) error {
	ev := evs[0]
	p, err := h.current(ctx)
	if err != nil {
		return err
	}
	req := h.reqs.Add(1)
	reply, ok := p.register(req)
	if !ok {
		return p.lost(ev)
	}
	select {
	case p.lines <- encodeHandle(req, evs):
	case <-p.dead:
		return p.lost(ev)
	case <-ctx.Done(): // not sent: nothing to cancel
		p.forget(req)
		return ctx.Err()
	}
	select {
	case r := <-reply:
		return r.runResult(len(evs))
	case <-p.dead:
		select {
		case r := <-reply: // answered just before it ended
			return r.runResult(len(evs))
		default:
			return p.lost(ev)
		}
	case <-ctx.Done():
		return h.cancel(ctx, p, req, reply, evs)
	}
}

// cancel asks the process to stop request req, whose call's context ended,
// and waits up to the grace for its answer; past the grace it kills the
// process group (the process starts again). An answer is the event's
// outcome (a failure also says it was cancelled).
func (h *pipeHandler) cancel(ctx context.Context, p *pipeProc, req uint64, reply <-chan pipeReply, evs []*partitionq.Event) error {
	ev := evs[0]
	cause := ctx.Err()
	answered := func(r pipeReply) error {
		if err := r.runResult(len(evs)); err != nil {
			return fmt.Errorf("%w (cancelled: %v)", err, cause)
		}
		return nil
	}
	grace := time.NewTimer(h.grace)
	defer grace.Stop()
	sent := false
	for {
		var lines chan<- []byte
		if !sent {
			lines = p.lines
		}
		select {
		case lines <- encodeCancel(req):
			sent = true
			continue
		case r := <-reply:
			return answered(r)
		case <-p.dead:
			select {
			case r := <-reply:
				return answered(r)
			default:
				return fmt.Errorf("%w: %v", cause, p.lost(ev))
			}
		case <-grace.C:
		}
		break
	}
	p.kill(fmt.Sprintf("it did not answer the cancel of event %d (request %d) within --pipe-cancel-grace %s", ev.ID, req, h.grace))
	<-p.exited
	return fmt.Errorf("%w: the pipe handler did not answer its cancel within %s: its process group was killed (and it starts again)", cause, h.grace)
}

// pipeProc is one run of the process.
type pipeProc struct {
	h       *pipeHandler
	cmd     *exec.Cmd
	started time.Time
	lines   chan []byte   // request lines for its standard input
	eof     chan struct{} // closed to close its standard input
	eofOnce sync.Once
	exited  chan struct{} // closed when the process has exited
	dead    chan struct{} // closed when it has exited and every reply it wrote was read
	why     string        // how it ended; set before dead closes

	mu      sync.Mutex
	pending map[uint64]chan pipeReply // the requests in flight; nil once dead
	killWhy string                    // why the worker killed it, if it did

	badLines int // lines of its output that were not replies (the reader's)
}

// start starts a process with pipes of its own: standard input and output
// for the messages, standard error copied to the worker's.
func (h *pipeHandler) start() (*pipeProc, error) {
	var files []*os.File // every end, closed on failure
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return nil, fmt.Errorf("start the pipe handler: %w", err)
	}
	cmd := exec.Command("sh", "-c", h.command)
	cmd.Env = h.environ
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	newProcessGroup(cmd)
	if err := startGuarded(cmd); err != nil {
		closeAll()
		return nil, fmt.Errorf("start the pipe handler: %w", err)
	}
	inR.Close() // the child's ends
	outW.Close()
	errW.Close()
	p := &pipeProc{h: h, cmd: cmd, started: time.Now(), lines: make(chan []byte, pipeLinesQueued),
		eof: make(chan struct{}), exited: make(chan struct{}), dead: make(chan struct{}),
		pending: map[uint64]chan pipeReply{}}
	read, copied := make(chan struct{}), make(chan struct{})
	tail := &tailBuffer{}
	go p.write(inW)
	go p.read(outR, read)
	go func() {
		io.Copy(&teeWriter{keep: tail, copy: h.stderr}, errR)
		close(copied)
	}()
	go p.wait(tail, outR, errR, read, copied)
	return p, nil
}

// wait reaps the process, kills what is left of its group, reads what it
// wrote, and then fails its requests in flight.
func (p *pipeProc) wait(tail *tailBuffer, out, errOut *os.File, read, copied chan struct{}) {
	err := p.cmd.Wait()
	endGuarded(p.cmd)
	close(p.exited)
	// Every reply written before the end is read before the requests still
	// in flight fail; a process of the group that escaped it and holds the
	// pipes is not waited for long.
	drained := time.After(execWaitDelay)
	for _, w := range []struct {
		done chan struct{}
		f    *os.File
	}{{read, out}, {copied, errOut}} {
		select {
		case <-w.done:
		case <-drained:
			w.f.Close()
			<-w.done
		}
		w.f.Close()
	}
	why := "exited with status 0"
	if err != nil {
		why = describeExit(err)
	}
	p.mu.Lock()
	if p.killWhy != "" && killed(err) {
		why += " (the worker killed it: " + p.killWhy + ")"
	}
	if t := tail.String(); t != "" {
		why += ": " + t
	}
	p.why = why
	p.pending = nil
	p.mu.Unlock()
	close(p.dead)
}

// write writes the request lines to the process's standard input, as many
// as are waiting in one write.
func (p *pipeProc) write(in *os.File) {
	defer in.Close()
	bw := bufio.NewWriterSize(in, 64<<10)
	for {
		select {
		case l := <-p.lines:
			bw.Write(l)
			for more := true; more; {
				select {
				case l := <-p.lines:
					bw.Write(l)
				default:
					more = false
				}
			}
			if err := bw.Flush(); err != nil {
				// It closed its standard input, or ended: it gets no more
				// requests, so it may not run on.
				p.kill(fmt.Sprintf("its standard input was closed (%v)", err))
				return
			}
		case <-p.eof:
			return
		case <-p.dead:
			return
		}
	}
}

// read reads the process's replies and hands each to its request.
func (p *pipeProc) read(out *os.File, done chan struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(out, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br, pipeMaxLine)
		if errors.Is(err, errLineTooLong) {
			p.badLine(n, fmt.Sprintf("it is longer than %d bytes", pipeMaxLine), nil)
			continue
		}
		if err != nil {
			return
		}
		if len(line) == 0 {
			continue
		}
		r, err := decodeReply(line)
		if err != nil {
			p.badLine(n, err.Error(), line)
			continue
		}
		p.mu.Lock()
		reply := p.pending[r.Req]
		delete(p.pending, r.Req)
		p.mu.Unlock()
		if reply == nil {
			p.badLine(n, fmt.Sprintf("it answers request %d, which is not in flight (never sent, answered before, or given up)", r.Req), line)
			continue
		}
		if r.bad != nil {
			p.badLine(n, fmt.Sprintf("it is not a valid reply to request %d (%v): that request failed", r.Req, r.bad), line)
		}
		reply <- r // buffered: never blocks
	}
}

// badLine logs a line of the process's output that is not a reply: the
// first ten of a process, then every thousandth.
func (p *pipeProc) badLine(n int, problem string, line []byte) {
	p.badLines++
	if p.badLines > 10 && p.badLines%1000 != 0 {
		return
	}
	attrs := []any{slog.Int("line", n), slog.Int("pid", p.cmd.Process.Pid), slog.String("problem", problem)}
	if line != nil {
		attrs = append(attrs, slog.String("text", termsafe.Echo(string(line))))
	}
	if p.badLines == 10 {
		attrs = append(attrs, slog.String("note", "more lines like it are logged every thousandth"))
	}
	p.h.log.Warn("partitionq: a line of the pipe handler's output is ignored (write replies only on standard output, logs on standard error)", attrs...)
}

// register records request req as in flight; false once the process is
// dead.
func (p *pipeProc) register(req uint64) (chan pipeReply, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		return nil, false
	}
	ch := make(chan pipeReply, 1)
	p.pending[req] = ch
	return ch, true
}

// forget drops request req, which was never sent.
func (p *pipeProc) forget(req uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, req)
}

// lost is the failure of an event whose process ended before it answered.
func (p *pipeProc) lost(ev *partitionq.Event) error {
	<-p.dead
	return fmt.Errorf("the pipe handler ended before it answered for event %d: %s", ev.ID, p.why)
}

// kill kills the process's whole group, saying why.
func (p *pipeProc) kill(why string) {
	p.mu.Lock()
	if p.killWhy == "" {
		p.killWhy = why
	}
	p.mu.Unlock()
	killGroup(p.cmd)
}

// shutdown closes the process's standard input, gives it wait to exit,
// then kills its group; it returns once the process is dead.
func (p *pipeProc) shutdown(wait time.Duration) {
	p.eofOnce.Do(func() { close(p.eof) })
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill(fmt.Sprintf("it did not exit within %s of the end of its standard input", wait))
	}
	<-p.dead
}

// pipeEnv is the pipe process's environment: the worker's, with the queue
// and group.
func pipeEnv(environ []string, queue, group string) []string {
	return append(slices.Clip(environ), "PARTITIONQ_QUEUE="+queue, "PARTITIONQ_GROUP="+group)
}
