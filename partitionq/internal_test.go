package partitionq

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	cases := []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second}, {10, 5 * time.Minute}, {1000, 5 * time.Minute}}
	for _, c := range cases {
		if got := backoff(time.Second, 5*time.Minute, c.n); got != c.want {
			t.Errorf("backoff(%d) = %s, want %s", c.n, got, c.want)
		}
	}
}

func TestConsumerNames(t *testing.T) {
	if got := consumerName("indexer", 2, 4); got != "indexer#2/4" {
		t.Fatalf("consumerName = %q", got)
	}
	for name, want := range map[string]struct {
		g       string
		slot, n int
		ok      bool
	}{
		"indexer#2/4":  {"indexer", 2, 4, true},
		"a.b-c#0/1":    {"a.b-c", 0, 1, true},
		"indexer#4/4":  {ok: false}, // slot out of range
		"indexer#1/0":  {ok: false},
		"indexer":      {ok: false},
		"indexer#x/4":  {ok: false},
		"other_system": {ok: false},
	} {
		g, s, n, ok := parseConsumerName(name)
		if ok != want.ok || (ok && (g != want.g || s != want.slot || n != want.n)) {
			t.Errorf("parseConsumerName(%q) = %q %d %d %v, want %+v", name, g, s, n, ok, want)
		}
	}
}

func TestClassify(t *testing.T) {
	if dl, _ := classify(DeadLetterNow(errBoomInternal)); !dl {
		t.Fatal("DeadLetterNow not classified")
	}
	if _, d := classify(RetryAfter(3*time.Second, errBoomInternal)); d != 3*time.Second {
		t.Fatalf("RetryAfter classified as %s", d)
	}
	if dl, d := classify(errBoomInternal); dl || d != 0 {
		t.Fatal("a plain error was classified")
	}
}

type boomErr struct{}

func (boomErr) Error() string { return "boom" }

var errBoomInternal = boomErr{}
