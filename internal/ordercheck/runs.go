package ordercheck

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Run is one handler run of an event: when it started and when it ended.
// Fault tests judge "one handler per key at any instant" by these, not by
// completions: two runs of one key that were both running at some instant
// overlap, whatever each came to.
type Run struct {
	Key    string
	Seq    int
	Worker string // who ran it (a process id, say)
	Start  time.Time
	// End is when the run ended; the zero time means it never ended as far
	// as the log knows (it counts as running until the end of time).
	End time.Time
}

func (r Run) end() time.Time {
	if r.End.IsZero() {
		return time.Unix(1<<40, 0)
	}
	return r.End
}

// Overlaps counts the runs that started while another run of the same key
// was still running, with a few examples.
func Overlaps(runs []Run) (n int, examples []string) {
	byKey := map[string][]Run{}
	for _, r := range runs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rs := byKey[k]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		var busy Run // the run that ends last of those started so far
		for i, r := range rs {
			if i > 0 && r.Start.Before(busy.end()) {
				n++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("key %s: event %d started (by %s) while event %d ran (by %s, %s to %s)",
						k, r.Seq, r.Worker, busy.Seq, busy.Worker, busy.Start.Format("15:04:05.000"), fmtEnd(busy)))
				}
			}
			if i == 0 || r.end().After(busy.end()) {
				busy = r
			}
		}
	}
	return n, examples
}

func fmtEnd(r Run) string {
	if r.End.IsZero() {
		return "never"
	}
	return r.End.Format("15:04:05.000")
}

// WithRuns adds the verdict on runs to a report: Overlaps and examples.
func (r Report) WithRuns(runs []Run) Report {
	r.Runs = len(runs)
	n, ex := Overlaps(runs)
	r.Overlaps = n
	r.Examples = append(r.Examples, ex...)
	return r
}

// RunLog writes run records, one line each, in the format ReadRunLog
// reads: "S <key> <seq> <worker> <unix ns>" when a run starts, and
// "E <key> <seq> <worker> <unix ns>" when it ends. Keys are quoted (Go
// syntax), so any key fits on a line. A RunLog is not safe for concurrent
// use; give each writer its own or guard it.
type RunLog struct{ W io.Writer }

// Start records the start of a run.
func (l RunLog) Start(key string, seq int, worker string, at time.Time) error {
	_, err := fmt.Fprintf(l.W, "S %s %d %s %d\n", strconv.Quote(key), seq, worker, at.UnixNano())
	return err
}

// End records the end of a run.
func (l RunLog) End(key string, seq int, worker string, at time.Time) error {
	_, err := fmt.Fprintf(l.W, "E %s %d %s %d\n", strconv.Quote(key), seq, worker, at.UnixNano())
	return err
}

// ReadRunLogs reads the run records of the given files (a missing file has
// none) and pairs each start with the next end of the same key, event and
// worker. A run without an end gets the death time of its worker from died
// when known (a worker killed while it ran), else none.
func ReadRunLogs(paths []string, died map[string]time.Time) ([]Run, error) {
	type id struct {
		key    string
		seq    int
		worker string
	}
	var runs []Run
	open := map[id][]int{} // unended runs, by index into runs
	for _, p := range paths {
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		line := 0
		for sc.Scan() {
			line++
			kind, key, seq, worker, at, err := parseRunLine(sc.Text())
			if err != nil {
				// A line cut short by a kill in the middle of its write.
				continue
			}
			k := id{key, seq, worker}
			switch kind {
			case "S":
				open[k] = append(open[k], len(runs))
				runs = append(runs, Run{Key: key, Seq: seq, Worker: worker, Start: at})
			case "E":
				if q := open[k]; len(q) > 0 {
					runs[q[0]].End = at
					open[k] = q[1:]
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	for k, q := range open {
		for _, i := range q {
			if t, ok := died[k.worker]; ok {
				runs[i].End = t
			}
		}
	}
	return runs, nil
}

func parseRunLine(s string) (kind, key string, seq int, worker string, at time.Time, err error) {
	if len(s) < 2 || (s[0] != 'S' && s[0] != 'E') || s[1] != ' ' {
		return "", "", 0, "", time.Time{}, fmt.Errorf("bad run line %q", s)
	}
	kind = s[:1]
	rest := s[2:]
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", "", 0, "", time.Time{}, err
	}
	if key, err = strconv.Unquote(q); err != nil {
		return "", "", 0, "", time.Time{}, err
	}
	f := strings.Fields(rest[len(q):])
	if len(f) != 3 {
		return "", "", 0, "", time.Time{}, fmt.Errorf("bad run line %q", s)
	}
	if seq, err = strconv.Atoi(f[0]); err != nil {
		return "", "", 0, "", time.Time{}, err
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return "", "", 0, "", time.Time{}, err
	}
	return kind, key, seq, f[1], time.Unix(0, ns), nil
}
