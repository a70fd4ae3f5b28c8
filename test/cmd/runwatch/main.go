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
package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: runwatch PID LOG KEY SEQ WORKER")
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

// logLine appends one line of the run log.
func logLine(path, kind, key, seq, worker string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s %s %s %d\n", kind, key, seq, worker, time.Now().UnixNano())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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
