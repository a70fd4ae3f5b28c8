// Command runwatch is a test instrument of the fault matrix (test/chaos): a
// --exec handler starts it (through `setsid -f`, in a session of its own) to
// log the start of the handler's run and, when the handler's process ends,
// however it ends, its end (a handler killed by its worker logs nothing
// itself). It watches the process's state in /proc, so a dead process not
// yet reaped (a zombie, which kill -0 and tail --pid still see) counts as
// ended.
//
//	runwatch PID LOG KEY SEQ WORKER
//
// appends `S "KEY" SEQ WORKER <unix ns>` to LOG (internal/ordercheck's run
// log) once it is out of the handler's process group, then closes its
// standard output, which tells the handler it may start its work; it appends
// `E "KEY" SEQ WORKER <unix ns>` when PID has ended.
//
// The start is logged here, not by the handler, so that a run is logged
// only with a watcher for its end: a watcher still in the handler's process
// group when the worker's guardian kills that group dies with the handler,
// and its run would be logged as started and never ended (an overlap with
// every later run of its key). Killed that early, the handler has done
// nothing, and nothing is logged.
//
//	runwatch handle LOG HOLD
//
// is the fault matrix's --exec handler itself (started as `exec runwatch
// handle ...`, so that its parent is the worker): it reads the event's
// payload on its standard input, starts a watcher of itself (above) in a
// session of its own and waits for its start line, holds the event a
// random time up to HOLD seconds, fails its first "f" attempts (the
// payload's; PARTITIONQ_ATTEMPT) and logs its success (O) and its end (E).
// A scripted failure logs its end too, before it exits: the watcher polls
// /proc and, on a loaded machine, may see the exit only after the worker
// has already started the retry, which would read as an overlap of the two
// runs (the watcher's second end of a run is ignored). Its worker field is
// <worker pid>/<handler pid>, so each run pairs with its own end. One
// process and its watcher per event: a shell script doing the same started
// a dozen, and on two cores the fault and balance matrices' --exec workers
// spent the machine on them.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "handle" {
		os.Exit(handle(os.Args[2], os.Args[3]))
	}
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: runwatch PID LOG KEY SEQ WORKER | runwatch handle LOG HOLD")
		os.Exit(2)
	}
	pid, logPath, key, seq, worker := os.Args[1], os.Args[2], strconv.Quote(os.Args[3]), os.Args[4], os.Args[5]
	if err := logLine(logPath, "S", key, seq, worker); err != nil {
		fmt.Fprintln(os.Stderr, "runwatch:", err)
		os.Exit(1)
	}
	os.Stdout.Close() // the handler waits for this end of file before it works
	stat := "/proc/" + pid + "/stat"
	for alive(stat) {
		time.Sleep(2 * time.Millisecond)
	}
	if err := logLine(logPath, "E", key, seq, worker); err != nil {
		os.Exit(1)
	}
}

// logLine appends one line of the run log, stamped now.
func logLine(path, kind, key, seq, worker string) error {
	return appendLog(path, line(kind, key, seq, worker, time.Now().UnixNano()))
}

// line is one line of the run log (key quoted), at the unix time at.
func line(kind, key, seq, worker string, at int64) string {
	return fmt.Sprintf("%s %s %s %s %d\n", kind, key, seq, worker, at)
}

// alive reports whether the process runs: its stat exists and its state
// (the field after the parenthesised name) is not Z (zombie) or X (dead).
func alive(stat string) bool {
	b, err := os.ReadFile(stat)
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// handle is the --exec handler (see the package comment); it returns the
// exit status.
func handle(logPath, hold string) int {
	var p struct{ S, F int }
	payload, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = json.Unmarshal(payload, &p)
	}
	maxHold, herr := strconv.ParseFloat(hold, 64)
	if err != nil || herr != nil {
		fmt.Fprintln(os.Stderr, "runwatch handle: bad payload or hold:", err, herr)
		return 1
	}
	key, seq := os.Getenv("PARTITIONQ_KEY"), strconv.Itoa(p.S)
	worker := fmt.Sprintf("%d/%d", os.Getppid(), os.Getpid())
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runwatch handle:", err)
		return 1
	}
	watch := exec.Command(self, strconv.Itoa(os.Getpid()), logPath, key, seq, worker)
	watch.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := watch.StdoutPipe()
	if err == nil {
		err = watch.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runwatch handle: starting the watcher:", err)
		return 1
	}
	if b, _ := io.ReadAll(out); len(b) != 0 { // its start is logged when its output ends
		return 1
	}
	time.Sleep(time.Duration(rand.Float64() * maxHold * float64(time.Second)))
	attempt, _ := strconv.Atoi(os.Getenv("PARTITIONQ_ATTEMPT"))
	q := strconv.Quote(key)
	if attempt <= p.F {
		fmt.Fprintln(os.Stderr, "scripted failure")
		logLine(logPath, "E", q, seq, worker)
		return 1
	}
	now := time.Now().UnixNano()
	if err := appendLog(logPath, line("O", q, seq, worker, now)+line("E", q, seq, worker, now)); err != nil {
		fmt.Fprintln(os.Stderr, "runwatch handle:", err)
		return 1
	}
	return 0
}

// appendLog appends lines to the run log in one write.
func appendLog(path, lines string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(lines)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
