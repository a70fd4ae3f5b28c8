package partitionq

import (
	"testing"
)

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
