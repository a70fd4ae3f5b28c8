package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildWorker builds test/cmd/testworker into dir and returns the binary's
// path. It runs the go command, so it must run inside the module.
func BuildWorker(ctx context.Context, dir string) (string, error) {
	goBin := "go" // found on PATH, where go test and make put the go that runs them
	bin := filepath.Join(dir, "testworker")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/partitionq/partitionq/test/cmd/testworker")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build test/cmd/testworker: %w\n%s", err, out)
	}
	return bin, nil
}

// WorkerStats is one `stats` line of a testworker started with -stats.
type WorkerStats struct {
	Goroutines int    `json:"goroutines"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapInuse  uint64 `json:"heap_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
	RSS        uint64 `json:"rss"` // from /proc, filled by Stats
}

// Proc is a running testworker process.
type Proc struct {
	Args []string
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	stats *WorkerStats
}

// StartWorker starts bin with args and waits until it prints "ready"
// (it has connected and started its slots), or fails when it exits first
// or ctx ends. Its stderr goes to logw.
func StartWorker(ctx context.Context, bin string, args []string, logw io.Writer) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Args: args, cmd: cmd, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case !ok && line == "ready":
				ok = true
				ready <- true
			case strings.HasPrefix(line, "stats "):
				var st WorkerStats
				if json.Unmarshal([]byte(line[len("stats "):]), &st) == nil {
					p.mu.Lock()
					p.stats = &st
					p.mu.Unlock()
				}
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait() // killed on purpose
		close(p.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-p.done
			return nil, fmt.Errorf("worker %v exited before it was ready: %v", args, cmd.ProcessState)
		}
		return p, nil
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("worker %v not ready after 30s", args)
	}
}

// StartWorkerRetry starts a worker, trying again while it exits before it
// is ready (for instance because its connection was cut during startup),
// until timeout.
func StartWorkerRetry(ctx context.Context, bin string, args []string, logw io.Writer, timeout time.Duration) (*Proc, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := StartWorker(ctx, bin, args, logw)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return p, err
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM (a graceful stop) and waits up to timeout, then kills.
func (p *Proc) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("worker %d did not stop within %s of SIGTERM; killed", p.PID(), timeout)
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stats returns the newest stats line of the worker (nil before the first)
// with its resident set size read from /proc.
func (p *Proc) Stats() *WorkerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats == nil {
		return nil
	}
	st := *p.stats
	st.RSS, _ = rss(p.PID())
	return &st
}

// rss reads VmRSS of a process from /proc, in bytes.
func rss(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}
