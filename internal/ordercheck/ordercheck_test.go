package ordercheck

import "testing"

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
