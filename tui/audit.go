package tui

import (
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// auditView lists the operator actions on the group, newest first.
type auditView struct {
	sh      *shared
	keys    listKeys
	w, h    int
	entries []partitionq.AuditEntry
	at      time.Time
	have    bool
	cursor  int
	offset  int
}

func newAuditView(sh *shared) *auditView { return &auditView{sh: sh, keys: newListKeys()} }

func (v *auditView) SetSize(w, h int)          { v.w, v.h = w, h }
func (v *auditView) capturing() bool           { return false }
func (v *auditView) ShortHelp() []key.Binding  { return []key.Binding{v.keys.Up, v.keys.Down} }
func (v *auditView) FullHelp() [][]key.Binding { return [][]key.Binding{v.keys.all()} }

func (v *auditView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil && msg.plan.audit {
			v.entries, v.have, v.at = msg.audit, true, msg.at
			v.cursor = max(0, min(v.cursor, len(v.entries)-1))
		}
	case tea.KeyMsg:
		if c, ok := v.keys.move(msg, v.cursor, len(v.entries), v.h-2); ok {
			v.cursor = c
		}
	}
	return nil
}

// columns: actor, role, key and outcome as wide as what they show (up to
// a limit; longer ones keep both ends), the reason all the room left.
func (v *auditView) columns() []column {
	var actors, roles, keys, outcomes []string
	for _, e := range v.entries {
		actors, roles = append(actors, orDash(line(e.Actor))), append(roles, orDash(line(e.DBRole)))
		keys, outcomes = append(keys, line(e.Key)), append(outcomes, line(e.OutcomeText()))
	}
	cols := []column{
		{title: " ", width: 1},
		{title: "AGO", width: 6, right: true},
		{title: "ACTOR", width: contentWidth(5, 16, actors...)},
		{title: "ACTION", width: 10},
		{title: "KEY", width: contentWidth(3, 24, keys...)},
		{title: "EVENT", width: 7, right: true},
		{title: "OUTCOME", width: contentWidth(7, 20, outcomes...)},
		{title: "REASON", width: 6},
	}
	if v.w >= 110 {
		cols[1] = column{title: "AT", width: 19}
		cols = append(cols[:3], append([]column{{title: "ROLE", width: contentWidth(4, 16, roles...)}}, cols[3:]...)...)
		return flex(v.w, cols, map[int]int{8: 1})
	}
	return flex(v.w, cols, map[int]int{7: 1})
}

func (v *auditView) View() string {
	st := v.sh.styles
	lines := []string{fmt.Sprintf("Operator actions on %s/%s, newest first", v.sh.queue, v.sh.group)}
	switch {
	case !v.have:
		return padLines(append(lines, st.dim.Render("Reading the audit trail…")), v.w, v.h)
	case len(v.entries) == 0:
		return padLines(append(lines, "", "No operator actions recorded yet."), v.w, v.h)
	}
	cols := v.columns()
	wide := len(cols) > 8
	lines = append(lines, st.header.Render(headerRow(cols)))
	pane := 0
	if v.h >= 14 {
		pane = 4
	}
	from, to := window(len(v.entries), v.h-2-pane, v.cursor, v.offset)
	v.offset = from
	for i := from; i < to; i++ {
		e := v.entries[i]
		mark := " "
		if i == v.cursor {
			mark = "▸"
		}
		ev := ""
		if e.EventID != 0 {
			ev = fmt.Sprint(e.EventID)
		}
		cells := []string{mark, age(v.at.Sub(e.At)), orDash(line(e.Actor)), line(string(e.Action)), line(e.Key), ev, line(e.OutcomeText()), line(e.Reason)}
		if wide {
			cells[1] = stamp(e.At)
			cells = append(cells[:3], append([]string{line(e.DBRole)}, cells[3:]...)...)
		}
		line := row(cols, cells...)
		if i == v.cursor {
			line = st.selected.Render(line)
		}
		lines = append(lines, line)
	}
	if pane > 0 {
		for len(lines) < v.h-pane {
			lines = append(lines, "")
		}
		lines = append(lines, v.pane(pane)...)
	}
	return padLines(lines, v.w, v.h)
}

// pane shows the selected entry in full.
func (v *auditView) pane(height int) []string {
	if v.cursor >= len(v.entries) {
		return nil
	}
	e := v.entries[v.cursor]
	st := v.sh.styles
	what := fmt.Sprintf("%s %s by %s (role %s): %s", stamp(e.At), line(string(e.Action)), orDash(line(e.Actor)), orDash(line(e.DBRole)), line(e.OutcomeText()))
	if e.Key != "" {
		what += fmt.Sprintf(" · key %s", line(e.Key))
	}
	if e.EventID != 0 {
		what += fmt.Sprintf(" · event #%d", e.EventID)
	}
	out := wrap(what, v.w)
	for i := range out {
		out[i] = st.label.Render(out[i])
	}
	out = append(out, wrap("Reason: "+orDash(line(e.Reason)), v.w)...)
	if len(out) > height {
		out = append(out[:height-1], st.dim.Render(fit("… (the audit trail holds it whole: partitionq audit --json)", v.w)))
	}
	return out
}
