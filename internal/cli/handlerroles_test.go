package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The handlers of the handler tests (handlers_test.go) for --exec and
// --pipe are this test binary itself, started by the worker with
// PQTEST_ROLE set (TestMain runs the role instead of the tests):
//
//	exec   one --exec command: reads the payload, acts, exits
//	pipe   one --pipe process: handles requests concurrently, answers them
//	watch  a watcher in a session of its own (so that the worker's kill of
//	       a handler's process group spares it) that logs when the process
//	       it watches ends
//	http-sleep  BenchmarkWorkHandlers's Go HTTP handler: answers 204 after
//	       $DELAY_MS milliseconds, on a port it prints
//
// Every role appends to the run log ($PQTEST_RUNLOG), one write per line:
//
//	S "KEY" SEQ WORKER NS        a run of event SEQ of KEY started
//	E "KEY" SEQ WORKER NS        it ended (for --exec logged by the command
//	                             as its last act, and by the watcher when
//	                             the process is gone, which stands for a
//	                             command killed before its own line: the
//	                             first end of a run counts)
//	H "KEY" SEQ ok|fail WORKER NS  its outcome
//	D WORKER NS                  a --pipe process ended (its open runs end then)
//
// S and E are internal/ordercheck's run log; H and D are this test's.
//
// What a handler does is the event's payload, {"seq": N, "do": "..."}:
//
//	ok       succeed
//	fail1    fail on attempt 1
//	dead     ask for a dead letter now
//	retry1   on attempt 1 fail asking for a retry after 0.2s
//	hang     run while the file $PQTEST_HANG exists (until cancelled or killed)
//	hang1    hang on attempt 1 only
//	hard1    (pipe) hang on attempt 1, ignoring the cancel line
//	die1     (pipe) end the process on attempt 1
//	notjson, unknown, twice, badoutcome1   (pipe) the bad replies their names say
//
// The HTTP handler is a server in the test process (handlers_test.go).
const roleEnv = "PQTEST_ROLE"

// runRole runs the role TestMain found in the environment.
func runRole(role string) int {
	switch role {
	case "exec":
		return execRole()
	case "pipe":
		return pipeRole()
	case "watch":
		return watchRole(os.Args[1:])
	case "http-sleep":
		return httpSleepRole()
	}
	fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, role)
	return 2
}

// testPayload is what the handler tests send as a payload.
type testPayload struct {
	Seq int    `json:"seq"`
	Do  string `json:"do"`
}

// runLogLine appends one line to the run log of the environment.
func runLogLine(format string, args ...any) {
	if err := appendRunLog(os.Getenv("PQTEST_RUNLOG"), format, args...); err != nil {
		fmt.Fprintln(os.Stderr, "run log:", err)
		os.Exit(3)
	}
}

// appendRunLog appends one line to the run log path, the time last.
func appendRunLog(path, format string, args ...any) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, format+" %d\n", append(args, time.Now().UnixNano())...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// outcome is what a handler decided.
type outcome struct {
	kind       string // "done", "failed", "dead_letter"
	retryAfter float64
	text       string
}

// act does what the payload says, on attempt; cancelled ends a hang,
// which lasts while the file hang exists.
func act(p testPayload, attempt int, cancelled <-chan struct{}, hang string) outcome {
	switch p.Do {
	case "fail1", "badoutcome1":
		if attempt == 1 {
			return outcome{kind: "failed", text: "scripted failure"}
		}
	case "dead":
		return outcome{kind: "dead_letter", text: "scripted poison"}
	case "retry1":
		if attempt == 1 {
			return outcome{kind: "failed", retryAfter: 0.2, text: "scripted busy"}
		}
	case "hang", "hang1", "hard1":
		if p.Do == "hang" || attempt == 1 {
			for {
				if _, err := os.Stat(hang); err != nil {
					break
				}
				select {
				case <-cancelled:
					return outcome{kind: "failed", text: "cancelled"}
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}
	return outcome{kind: "done"}
}

// execRole is one --exec command.
func execRole() int {
	b, _ := io.ReadAll(os.Stdin)
	var p testPayload
	if err := json.Unmarshal(b, &p); err != nil {
		fmt.Fprintln(os.Stderr, "bad payload:", err)
		return 1
	}
	key := os.Getenv("PARTITIONQ_KEY")
	attempt, _ := strconv.Atoi(os.Getenv("PARTITIONQ_ATTEMPT"))
	worker := "exec-" + strconv.Itoa(os.Getpid())
	if err := watch(os.Getpid(), key, p.Seq, worker); err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		return 1
	}
	o := act(p, attempt, nil, os.Getenv("PQTEST_HANG"))
	ok := "ok"
	if o.kind != "done" {
		ok = "fail"
	}
	runLogLine("H %s %d %s %s", strconv.Quote(key), p.Seq, ok, worker)
	fmt.Fprintln(os.Stderr, o.text)
	// The run's end, as its last act: the watcher's end comes when it sees
	// the process gone, which on a loaded machine can be tens of
	// milliseconds later, after the key's next run started (an overlap
	// that was not). The first end of a run counts; the watcher's stands
	// for a command killed before this line.
	runLogLine("E %s %d %s", strconv.Quote(key), p.Seq, worker)
	switch {
	case o.kind == "done":
		return 0
	case o.kind == "dead_letter":
		return 65
	case o.retryAfter > 0:
		os.WriteFile(os.Getenv("PARTITIONQ_RETRY_AFTER_FILE"), []byte(strconv.FormatFloat(o.retryAfter, 'f', -1, 64)), 0o644)
		return 75
	}
	return 1
}

// watch starts a watcher of pid in a session of its own, which logs the
// start of the run (key, seq) now and its end when pid ends, and waits
// until it logged the start. seq -1 logs only the end, as D.
func watch(pid int, key string, seq int, worker string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, strconv.Itoa(pid), key, strconv.Itoa(seq), worker)
	cmd.Env = append(os.Environ(), roleEnv+"=watch")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	io.Copy(io.Discard, out) // its standard output closes once the start is logged
	go cmd.Wait()            // it outlives this process when watching it
	return nil
}

// watchRole logs the start of a run, closes its standard output, and logs
// the end when the process ends (a zombie counts as ended).
func watchRole(args []string) int {
	if len(args) != 4 {
		return 2
	}
	pid, key, seq, worker := args[0], strconv.Quote(args[1]), args[2], args[3]
	if seq == "-1" {
		os.Stdout.Close()
	} else {
		runLogLine("S %s %s %s", key, seq, worker)
		os.Stdout.Close()
	}
	for procAlive("/proc/" + pid + "/stat") {
		time.Sleep(2 * time.Millisecond)
	}
	if seq == "-1" {
		runLogLine("D %s", worker)
	} else {
		runLogLine("E %s %s %s", key, seq, worker)
	}
	return 0
}

func procAlive(stat string) bool {
	b, err := os.ReadFile(stat)
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// pipeRole is one --pipe process: each request in a goroutine of its own,
// answered when done; a cancel line ends a hang.
func pipeRole() int {
	worker := "pipe-" + strconv.Itoa(os.Getpid())
	if err := watch(os.Getpid(), "", -1, worker); err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		return 1
	}
	var mu sync.Mutex // guards the output and cancels
	out := bufio.NewWriter(os.Stdout)
	reply := func(lines ...string) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			out.WriteString(l + "\n")
		}
		out.Flush()
	}
	cancels := map[uint64]chan struct{}{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	for in.Scan() {
		var req struct {
			Op     string `json:"op"`
			Req    uint64 `json:"req"`
			Key    string `json:"key"`
			Events []struct {
				ID      int64  `json:"id"`
				Attempt int    `json:"attempt"`
				Payload string `json:"payload"`
			} `json:"events"`
		}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request line:", err)
			return 1
		}
		if req.Op == "cancel" {
			mu.Lock()
			if c, ok := cancels[req.Req]; ok {
				close(c)
				delete(cancels, req.Req)
			}
			mu.Unlock()
			continue
		}
		if req.Op != "handle" || len(req.Events) == 0 {
			fmt.Fprintf(os.Stderr, "unexpected request: %s\n", in.Bytes())
			return 1
		}
		cancelled := make(chan struct{})
		mu.Lock()
		cancels[req.Req] = cancelled
		mu.Unlock()
		go func() {
			// A run (work --runs) is its events one after another, each
			// logged as a run of its own; the first that is not done ends
			// it, and the reply names it by its index.
			var o outcome
			var p testPayload
			var ev = req.Events[0]
			index := 0
			runLogLine("R %s %d %s", strconv.Quote(req.Key), len(req.Events), worker)
			for i, e := range req.Events {
				ev, index, p = e, i, testPayload{}
				json.Unmarshal([]byte(ev.Payload), &p)
				runLogLine("S %s %d %s", strconv.Quote(req.Key), p.Seq, worker)
				switch {
				case p.Do == "die1" && ev.Attempt == 1:
					fmt.Fprintln(os.Stderr, "scripted death")
					os.Exit(3)
				case p.Do == "hard1":
					o = act(p, ev.Attempt, nil, os.Getenv("PQTEST_HANG")) // ignores the cancel
				default:
					o = act(p, ev.Attempt, cancelled, os.Getenv("PQTEST_HANG"))
				}
				ok := "ok"
				if o.kind != "done" {
					ok = "fail"
				}
				runLogLine("H %s %d %s %s", strconv.Quote(req.Key), p.Seq, ok, worker)
				runLogLine("E %s %d %s", strconv.Quote(req.Key), p.Seq, worker)
				if o.kind != "done" {
					break
				}
			}
			mu.Lock()
			delete(cancels, req.Req)
			mu.Unlock()
			r := map[string]any{"req": req.Req, "outcome": o.kind}
			if o.text != "" {
				r["error"] = o.text
			}
			if o.retryAfter > 0 {
				r["retry_after"] = o.retryAfter
			}
			if o.kind != "done" && index > 0 {
				r["index"] = index
			}
			line, _ := json.Marshal(r)
			switch p.Do {
			case "notjson":
				reply("this is not JSON", string(line))
			case "unknown":
				reply(`{"req": 999999999, "outcome": "done"}`, string(line))
			case "twice":
				reply(string(line), string(line))
			case "badoutcome1":
				if ev.Attempt == 1 {
					reply(fmt.Sprintf(`{"req": %d, "outcome": "maybe"}`, req.Req))
					return
				}
				reply(string(line))
			default:
				reply(string(line))
			}
		}()
	}
	// End of input: the worker stops; answer nothing more.
	if err := in.Err(); err != nil && !strings.Contains(err.Error(), "closed") {
		fmt.Fprintln(os.Stderr, "reading requests:", err)
	}
	return 0
}

// httpSleepRole serves 204 to every request after DELAY_MS milliseconds,
// on 127.0.0.1 and a port it prints on standard output.
func httpSleepRole() int {
	delay, _ := strconv.Atoi(os.Getenv("DELAY_MS"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Duration(delay) * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}
