package partitionq

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The table of audit actions lists each action once, with a name, a
// command and its outcomes, and the operator's actions on a key's head are
// the parked package's kinds by the same names (partitionq.set_aside
// records the kind as the action).
func TestAuditActionsTable(t *testing.T) {
	seen := map[AuditAction]bool{}
	for _, r := range AuditActions() {
		if seen[r.Action] || r.Name == "" || r.Command == "" || len(r.Outcomes) == 0 {
			t.Errorf("row %+v: listed twice, or without a name, a command or outcomes", r)
		}
		seen[r.Action] = true
		if info, ok := r.Action.Info(); !ok || info.Name != r.Name || info.Command != r.Command || r.Action.Name() != r.Name {
			t.Errorf("%s: Info = %+v, %v; Name %q", r.Action, info, ok, r.Action.Name())
		}
	}
	for _, a := range []AuditAction{AuditSkip, AuditRetry, AuditQuarantine, AuditReplay, AuditPurge, AuditResize, AuditDropGroup} {
		if !seen[a] {
			t.Errorf("%s is not in AuditActions", a)
		}
	}
	if len(seen) != 7 {
		t.Errorf("AuditActions has %d actions, want the 7 constants", len(seen))
	}
	if _, ok := AuditAction("later").Info(); ok || AuditAction("later").Name() != "later" {
		t.Error("an action the table does not list should be unknown, named as it is")
	}
	if AuditRetry.Name() != "retry now" {
		t.Errorf("AuditRetry.Name() = %q", AuditRetry.Name())
	}
	rows := AuditActions()
	rows[0].Outcomes[0] = "changed"
	if AuditActions()[0].Outcomes[0] == "changed" {
		t.Error("AuditActions returns the table itself, not a copy")
	}
	var onKey []AuditAction
	keys := map[string]AuditActionInfo{} // a console key: the row it acts for
	for _, r := range AuditActions() {
		if r.Summary == "" || r.On == "" {
			t.Errorf("%s: no summary or target", r.Action)
		}
		if (r.On == TargetKeyHead) != (r.kind != "") || (r.kind != "" && string(r.kind) != string(r.Action)) {
			t.Errorf("%s: acts on %s with the parked kind %q: an action on a key's head, and only one, has the kind of its name", r.Action, r.On, r.kind)
		}
		if r.On != TargetKeyHead && (r.Resolves || r.PreviewWaiting) {
			t.Errorf("%s: Resolves or PreviewWaiting on an action not on a key's head", r.Action)
		}
		if r.On == TargetKeyHead {
			onKey = append(onKey, r.Action)
			// Skip and quarantine move the head to the dead letters (the
			// key leaves the blocked keys) and show what runs next or goes
			// with it; retry now leaves the head where it is.
			if moves := r.Action != AuditRetry; r.Resolves != moves || r.PreviewWaiting != moves {
				t.Errorf("%s: Resolves %v, PreviewWaiting %v; want %v", r.Action, r.Resolves, r.PreviewWaiting, moves)
			}
			if r.Key == "" {
				t.Errorf("%s: an action on a key's head without a console key", r.Action)
			}
		}
		for _, k := range []string{r.Key, r.BulkKey} {
			if k == "" {
				continue
			}
			if other, ok := keys[k]; ok && other.On == r.On {
				t.Errorf("console key %q is %s and %s, in the same views", k, other.Action, r.Action)
			}
			keys[k] = r
		}
	}
	if !slices.Equal(onKey, []AuditAction{AuditSkip, AuditRetry, AuditQuarantine}) {
		t.Errorf("actions on a key's head = %v, want skip, retry and quarantine", onKey)
	}
}

// Every action the SQL functions write into the audit trail is in the
// table, and so is every outcome record_action accepts for it.
func TestAuditActionsCoverTheSQL(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("internal", "store", "function", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the schema's functions: %v, %v", files, err)
	}
	written := regexp.MustCompile(`'(\w+)', p_queue, p_grp`) // values (..., 'replay', p_queue, p_grp, ...)
	accepted := regexp.MustCompile(`\('(\w+)', '(\w+)'\)`)   // record_action's (action, outcome) pairs
	recordAction := regexp.MustCompile(`(?s)function partitionq\.record_action\(.*?\$f\$;`)
	named := regexp.MustCompile(`p_action (?:=|when) '(\w+)'`) // drop_group; set_aside's skip
	outcomes := map[string][]string{}
	for _, r := range AuditActions() {
		outcomes[string(r.Action)] = r.Outcomes
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(written.FindAllStringSubmatch(string(b), -1), named.FindAllStringSubmatch(string(b), -1)...) {
			found++
			if m[1] != "worker" && outcomes[m[1]] == nil {
				t.Errorf("%s writes action %q, which AuditActions does not list", filepath.Base(f), m[1])
			}
		}
		for _, m := range accepted.FindAllStringSubmatch(recordAction.FindString(string(b)), -1) {
			found++
			if !slices.Contains(outcomes[m[1]], m[2]) {
				t.Errorf("%s records action %q with outcome %q, which its row of AuditActions does not list", filepath.Base(f), m[1], m[2])
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d actions in the SQL: the patterns no longer match it", found)
	}
}

// Client.Act refuses an action the table says needs a reason when it has
// none, and one that is not an action on a key's head, before it reads
// anything.
func TestActChecksTheTable(t *testing.T) {
	t.Parallel()
	c := &Client{} // Act refuses before it touches the database
	for _, r := range AuditActions() {
		if r.On == TargetKeyHead && !r.ReasonRequired {
			continue // it would go on to the database
		}
		_, err := c.Act(t.Context(), ActionRequest{Action: r.Action, Queue: "q", Group: "g", Key: "k", Reason: " "})
		var ve *ValidationError
		switch {
		case r.On != TargetKeyHead:
			if err == nil || !strings.Contains(err.Error(), "not an action on a key's head") {
				t.Errorf("Act(%s) = %v, want a refusal: not an action on a key's head", r.Action, err)
			}
		case r.ReasonRequired:
			if !errors.As(err, &ve) || ve.Field != "reason" || !strings.Contains(err.Error(), "needs a reason") || !strings.Contains(err.Error(), "--reason") {
				t.Errorf("Act(%s) without a reason = %v, want a *ValidationError for reason naming --reason", r.Action, err)
			}
		}
	}
}
