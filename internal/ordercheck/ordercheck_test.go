package ordercheck

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	h := func(k string, s int, ok bool) Handling { return Handling{Key: k, Seq: s, OK: ok} }
	cases := []struct {
		name       string
		sent       map[string]int
		log        []Handling
		dead       map[string][]int
		violations int
		lost       int
		repeats    int
		deadN      int
	}{
		{"in order", map[string]int{"a": 3}, []Handling{h("a", 0, true), h("a", 1, true), h("a", 2, true)}, nil, 0, 0, 0, 0},
		{"redelivery after crash is a repeat", map[string]int{"a": 3},
			[]Handling{h("a", 0, true), h("a", 1, true), h("a", 0, true), h("a", 1, true), h("a", 2, true)}, nil, 0, 0, 2, 0},
		{"overtake", map[string]int{"a": 2}, []Handling{h("a", 1, true), h("a", 0, true)}, nil, 1, 0, 0, 0},
		{"overtake a failing head", map[string]int{"a": 2}, []Handling{h("a", 0, false), h("a", 1, true), h("a", 0, true)}, nil, 1, 0, 0, 0},
		{"lost", map[string]int{"a": 2}, []Handling{h("a", 0, true)}, nil, 0, 1, 0, 0},
		{"dead letter resolves after its last failure", map[string]int{"a": 2},
			[]Handling{h("a", 0, false), h("a", 0, false), h("a", 1, true)}, map[string][]int{"a": {0}}, 0, 0, 0, 1},
		{"handled before the dead letter's last failure", map[string]int{"a": 2},
			[]Handling{h("a", 0, false), h("a", 1, true), h("a", 0, false)}, map[string][]int{"a": {0}}, 1, 0, 0, 1},
		{"keys are independent", map[string]int{"a": 1, "b": 1}, []Handling{h("b", 0, true), h("a", 0, true)}, nil, 0, 0, 0, 0},
	}
	for _, c := range cases {
		r := Check(c.sent, c.log, c.dead)
		if r.Violations != c.violations || r.Lost != c.lost || r.Repeats != c.repeats || r.Dead != c.deadN {
			t.Errorf("%s: %s; want violations %d lost %d repeats %d dead %d", c.name, r, c.violations, c.lost, c.repeats, c.deadN)
		}
	}
}

func TestOverlaps(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }
	run := func(k string, s, from, to int) Run {
		r := Run{Key: k, Seq: s, Worker: "w", Start: at(from)}
		if to >= 0 {
			r.End = at(to)
		}
		return r
	}
	cases := []struct {
		name string
		runs []Run
		want int
	}{
		{"one after another", []Run{run("a", 0, 0, 10), run("a", 1, 10, 20), run("a", 2, 25, 30)}, 0},
		{"keys in parallel", []Run{run("a", 0, 0, 10), run("b", 0, 5, 15)}, 0},
		{"a replay inside a run", []Run{run("a", 0, 0, 100), run("a", 0, 50, 60)}, 1},
		{"a long run covers two later ones", []Run{run("a", 0, 0, 100), run("a", 1, 10, 20), run("a", 2, 30, 40)}, 2},
		{"a run that never ended", []Run{run("a", 0, 0, -1), run("a", 1, 1000, 1010)}, 1},
	}
	for _, c := range cases {
		if n, ex := Overlaps(c.runs); n != c.want {
			t.Errorf("%s: %d overlaps (%v), want %d", c.name, n, ex, c.want)
		}
	}
}

func TestRunLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "runs")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	l := RunLog{W: f}
	t0 := time.Now()
	l.Start("multi\nline key", 3, "pid1", t0)
	l.End("multi\nline key", 3, "pid1", t0.Add(time.Second))
	l.Start("k", 0, "pid2", t0)   // killed before it ended
	fmt.Fprint(f, "S \"k\" 1 pi") // a line cut short by the kill
	f.Close()
	runs, err := ReadRunLogs([]string{p, filepath.Join(dir, "missing")}, map[string]time.Time{"pid2": t0.Add(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Key != "multi\nline key" || !runs[0].End.Equal(t0.Add(time.Second).Truncate(0)) ||
		!runs[1].End.Equal(t0.Add(2*time.Second).Truncate(0)) {
		t.Fatalf("runs %+v", runs)
	}
	r := Report{}.WithRuns(runs)
	if r.Runs != 2 || r.Overlaps != 0 || !r.OK() {
		t.Fatalf("report %s", r)
	}
}
