package tui

import (
	"slices"
	"testing"

	"github.com/partitionq/partitionq/partitionq"
)

// The blocked keys, key detail and key views offer the actions on a key's
// head that partitionq's table lists, with its keys and names, in its
// order; each has an actionKind (the confirm dialog's and the result
// line's texts), so a row added to the table without one fails here, not
// in an operator's terminal.
func TestKeyActionsComeFromTheTable(t *testing.T) {
	t.Parallel()
	var want []string
	for _, r := range partitionq.AuditActions() {
		if r.On == partitionq.TargetKeyHead && r.Key != "" {
			want = append(want, r.Key+" "+r.Name)
			if k := keyKind(r.Action); k.action() != r.Action {
				t.Errorf("%s: kind %d is %s", r.Action, k, k.action())
			}
		}
	}
	if !slices.Equal(want, []string{"s skip", "r retry now", "Q quarantine"}) {
		t.Errorf("the table's key actions = %q", want)
	}
	views := map[string]keyActions{"blocked": newBlockedKeys(false).Acts, "detail": newDetailKeys(false).Acts, "find": newFindKeys(false).Acts}
	for name, acts := range views {
		var got []string
		for _, b := range acts.bindings() {
			got = append(got, b.Help().Key+" "+b.Help().Desc)
			if !b.Enabled() {
				t.Errorf("%s: %s disabled", name, b.Help().Desc)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s view offers %q, want %q", name, got, want)
		}
	}
	for _, b := range newBlockedKeys(true).Acts.bindings() {
		if b.Enabled() {
			t.Errorf("read-only: %s enabled", b.Help().Desc)
		}
	}
}
