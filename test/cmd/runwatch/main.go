// Command runwatch is a test instrument of the fault matrix (test/chaos): a
// --exec handler starts it, in a session of its own, to log the end of the
// handler's run when the handler's process ends, however it ends (a handler
// killed by its worker logs nothing itself). It watches the process's state
// in /proc, so a dead process not yet reaped (a zombie, which kill -0 and
// tail --pid still see) counts as ended.
//
//	runwatch PID LOG KEY SEQ WORKER
//
// appends `E "KEY" SEQ WORKER <unix ns>` to LOG (internal/ordercheck's run
// log) when PID has ended.
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
	stat := "/proc/" + os.Args[1] + "/stat"
	for alive(stat) {
		time.Sleep(2 * time.Millisecond)
	}
	f, err := os.OpenFile(os.Args[2], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		os.Exit(1)
	}
	defer f.Close()
	fmt.Fprintf(f, "E %s %s %s %d\n", strconv.Quote(os.Args[3]), os.Args[4], os.Args[5], time.Now().UnixNano())
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
