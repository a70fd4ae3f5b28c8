package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq/dlqfilter"

	"github.com/partitionq/partitionq/partitionq"
)

type deadKeys struct {
	listKeys
	Open        key.Binding
	Back        key.Binding
	Replay      key.Binding
	ShowAll     key.Binding
	Filter      key.Binding
	ApplyFilter key.Binding
	ClearFilter key.Binding
	ReplayAll   key.Binding
	PurgeAll    key.Binding
}

func newDeadKeys(ro bool) deadKeys {
	k := deadKeys{
		listKeys:    newListKeys(),
		Open:        key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "detail")),
		Back:        key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Replay:      actionBinding(partitionq.AuditReplay, false, partitionq.AuditReplay.Name()),
		ShowAll:     key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "pending/all")),
		Filter:      key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "filter")),
		ApplyFilter: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply filter")),
		ClearFilter: key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter")),
		ReplayAll:   actionBinding(partitionq.AuditReplay, true, partitionq.AuditReplay.Name()+" all shown"),
		PurgeAll:    actionBinding(partitionq.AuditPurge, true, partitionq.AuditPurge.Name()+" all shown"),
	}
	readOnly(ro, &k.Replay, &k.ReplayAll, &k.PurgeAll)
	return k
}

// deadView lists the dead letters of the group (those not replayed, or
// all), and shows one in detail.
type deadView struct {
	sh      *shared
	keys    deadKeys
	w, h    int
	list    []partitionq.DeadLetter
	at      snapshotMsg
	have    bool
	all     bool // replayed ones too
	cursor  int
	offset  int
	detail  bool // showing the selected one
	scroll  int
	pending int64 // not replayed, from the status

	filter     textinput.Model
	filtering  bool   // the filter input has the keyboard
	filterExpr string // the filter applied (partitionq/dlqfilter's words)
	filterErr  error  // why the filter applied selects nothing
}

func newDeadView(sh *shared) *deadView {
	ti := textinput.New()
	ti.Prompt = "filter: "
	ti.Placeholder = "key=K type=T error=TEXT reason=R since=24h before=TIME"
	ti.CharLimit = 1000
	ti.Cursor.SetMode(cursor.CursorStatic)
	return &deadView{sh: sh, keys: newDeadKeys(sh.readOnly), filter: ti}
}

func (v *deadView) SetSize(w, h int) { v.w, v.h = w, h; v.filter.Width = max(10, w-12) }
func (v *deadView) capturing() bool  { return v.filtering }

func (v *deadView) ShortHelp() []key.Binding {
	k := v.keys
	switch {
	case v.filtering:
		return []key.Binding{k.ApplyFilter, k.ClearFilter}
	case v.detail:
		return []key.Binding{k.Back, k.Replay, k.Down}
	}
	return []key.Binding{k.Open, k.Replay, k.Filter, k.ReplayAll, k.PurgeAll, k.ShowAll}
}

func (v *deadView) FullHelp() [][]key.Binding {
	k := v.keys
	return [][]key.Binding{k.all(), {k.Open, k.Back, k.Replay, k.ShowAll}, {k.Filter, k.ApplyFilter, k.ClearFilter, k.ReplayAll, k.PurgeAll}}
}

func (v *deadView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil {
			v.pending = msg.status.DeadLetters
			if msg.plan.deadLetters && msg.plan.deadAll == v.all && msg.plan.deadFilter == v.filterExpr {
				sel := v.selectedID()
				v.list, v.at, v.have, v.filterErr = msg.dead, msg, true, msg.deadErr
				v.keep(sel)
			}
		}
	case tea.KeyMsg:
		return v.onKey(msg)
	}
	return nil
}

func (v *deadView) onKey(msg tea.KeyMsg) tea.Cmd {
	if v.filtering {
		return v.onFilterKey(msg)
	}
	if v.detail {
		if s, ok := v.keys.move(msg, v.scroll, len(v.detailLines()), v.h-1); ok {
			v.scroll = s
			return nil
		}
	} else if c, ok := v.keys.move(msg, v.cursor, len(v.list), v.h-2); ok {
		v.cursor = c
		return nil
	}
	switch {
	case key.Matches(msg, v.keys.Back) && v.detail:
		v.detail = false
	case key.Matches(msg, v.keys.ClearFilter) && v.filterExpr != "":
		return v.applyFilter("")
	case key.Matches(msg, v.keys.Filter) && !v.detail:
		v.filtering = true
		v.filter.SetValue(v.filterExpr)
		v.filter.CursorEnd()
		return v.filter.Focus()
	case (key.Matches(msg, v.keys.ReplayAll) || key.Matches(msg, v.keys.PurgeAll)) && !v.detail && v.have && v.filterErr == nil && len(v.list) > 0:
		kind := actReplayMany
		if key.Matches(msg, v.keys.PurgeAll) {
			kind = actPurgeMany
		}
		return send(confirmMsg{req: v.bulkRequest(kind)})
	case key.Matches(msg, v.keys.ShowAll) && !v.detail:
		v.all, v.have, v.list = !v.all, false, nil
		return send(refreshNowMsg{})
	case key.Matches(msg, v.keys.Open) && !v.detail && len(v.list) > 0:
		v.detail, v.scroll = true, 0
	case key.Matches(msg, v.keys.Replay):
		if d, ok := v.selected(); ok {
			return send(confirmMsg{req: actionRequest{kind: actReplay, dead: d}})
		}
	}
	return nil
}

func (v *deadView) onFilterKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, v.keys.ApplyFilter):
		v.filtering = false
		v.filter.Blur()
		return v.applyFilter(strings.TrimSpace(v.filter.Value()))
	case key.Matches(msg, v.keys.ClearFilter):
		v.filtering = false
		v.filter.Blur()
		return v.applyFilter("")
	}
	var cmd tea.Cmd
	v.filter, cmd = v.filter.Update(msg)
	return cmd
}

// applyFilter shows the dead letters expr selects, read again.
func (v *deadView) applyFilter(expr string) tea.Cmd {
	if expr == v.filterExpr {
		return nil
	}
	v.filterExpr, v.have, v.list, v.filterErr, v.cursor, v.offset = expr, false, nil, nil, 0, 0
	return send(refreshNowMsg{})
}

// bulkRequest is the bulk action on what the view shows: the filter, and
// only those not replayed unless it shows all.
func (v *deadView) bulkRequest(kind actionKind) actionRequest {
	var q partitionq.DeadLetterQuery
	_ = dlqfilter.Apply(&q, v.filterExpr, v.at.at) // it parsed for the list shown
	q.Pending = q.Pending || !v.all
	filter := v.filterExpr
	if !v.all && !strings.Contains(" "+filter+" ", " pending ") {
		filter = strings.TrimSpace(filter + " pending")
	}
	return actionRequest{kind: kind, match: q, filter: filter}
}

func (v *deadView) selected() (partitionq.DeadLetter, bool) {
	if v.cursor < 0 || v.cursor >= len(v.list) {
		return partitionq.DeadLetter{}, false
	}
	return v.list[v.cursor], true
}

func (v *deadView) selectedID() int64 {
	d, _ := v.selected()
	return d.ID
}

func (v *deadView) keep(id int64) {
	v.cursor = max(0, min(v.cursor, len(v.list)-1))
	for i, d := range v.list {
		if d.ID == id {
			v.cursor = i
		}
	}
	if len(v.list) == 0 {
		v.detail = false
	}
}

// columns: the key as wide as the longest listed (up to 24), the reason
// (and the error, from 110 columns on) all the room left.
func (v *deadView) columns() []column {
	var keys, reasons []string
	for _, d := range v.list {
		keys, reasons = append(keys, line(d.Key)), append(reasons, line(d.Reason))
	}
	reason := column{title: "REASON", width: 12}
	if v.w >= 110 {
		reason.width = contentWidth(6, 40, reasons...)
	}
	cols := []column{
		{title: " ", width: 1},
		{title: "ID", width: 5, right: true},
		{title: "KEY", width: contentWidth(3, 24, keys...)},
		{title: "EVENT", width: 7, right: true},
		reason,
		{title: "TRIES", width: 5, right: true},
		{title: "DEAD", width: 6, right: true},
		{title: "STATE", width: 15},
	}
	if v.w >= 110 {
		cols = append(cols, column{title: "LAST ERROR", width: 10})
		return flex(v.w, cols, map[int]int{8: 1})
	}
	return flex(v.w, cols, map[int]int{4: 1})
}

func (v *deadView) View() string {
	if v.detail {
		lines := v.detailLines()
		v.scroll = max(0, min(v.scroll, len(lines)-v.h))
		return padLines(lines[v.scroll:], v.w, v.h)
	}
	st := v.sh.styles
	which := "not replayed"
	if v.all {
		which = "all, replayed ones too"
	}
	lines := []string{fmt.Sprintf("%s not replayed · showing %s, oldest first", plural(int(v.pending), "dead letter"), which)}
	switch {
	case v.filtering:
		lines = append(lines, v.filter.View())
	case v.filterExpr != "":
		lines = append(lines, fit(fmt.Sprintf("filter: %s · %d shown · f: change · esc: clear", line(v.filterExpr), len(v.list)), v.w))
	}
	switch {
	case v.filterErr != nil:
		return padLines(append(lines, wrap(st.crit.Render("✗ "+line(v.filterErr.Error())), v.w)...), v.w, v.h)
	case !v.have:
		return padLines(append(lines, st.dim.Render("Reading the dead letters…")), v.w, v.h)
	case len(v.list) == 0 && v.filterExpr != "":
		return padLines(append(lines, "", "No dead letters match the filter."), v.w, v.h)
	case len(v.list) == 0:
		return padLines(append(lines, "", st.ok.Render("No dead letters.")), v.w, v.h)
	}
	cols := v.columns()
	lines = append(lines, st.header.Render(headerRow(cols)))
	from, to := window(len(v.list), v.h-len(lines), v.cursor, v.offset)
	v.offset = from
	for i := from; i < to; i++ {
		d := v.list[i]
		mark := " "
		if i == v.cursor {
			mark = "▸"
		}
		r := row(cols, mark, fmt.Sprint(d.ID), line(d.Key), fmt.Sprint(d.EventID), line(d.Reason), fmt.Sprint(d.Attempts),
			age(v.at.at.Sub(d.DeadAt)), replayState(d), errText(d.LastError))
		if i == v.cursor {
			r = st.selected.Render(r)
		}
		lines = append(lines, r)
	}
	return padLines(lines, v.w, v.h)
}

func replayState(d partitionq.DeadLetter) string {
	if d.ReplayedAt == nil {
		return "pending"
	}
	if d.ReplayID != nil {
		return fmt.Sprintf("replayed #%d", *d.ReplayID)
	}
	return "replayed"
}

func (v *deadView) detailLines() []string {
	d, ok := v.selected()
	if !ok {
		return nil
	}
	st := v.sh.styles
	var out []string
	for _, l := range wrap(fmt.Sprintf("Dead letter %d · key %s · slot %d · %s", d.ID, line(d.Key), d.Slot, replayState(d)), v.w) {
		out = append(out, st.title.Render(l))
	}
	out = append(out, wrap(fmt.Sprintf("Event #%d %s · sent %s · dead %s (%s ago) · %d attempts", d.EventID, line(d.Type), stamp(d.EventTime), stamp(d.DeadAt), age(v.at.at.Sub(d.DeadAt)), d.Attempts), v.w)...)
	out = append(out, wrap(fmt.Sprintf("Reason: %s · by %s (role %s)", line(d.Reason), orDash(line(d.Actor)), orDash(line(d.DBRole))), v.w)...)
	out = append(out, "")
	out = append(out, errorBlock(st, d.LastError, v.w)...)
	out = append(out, "", st.label.Render("Payload"))
	for _, l := range lines(prettyPayload(d.Payload)) {
		out = append(out, wrap("  "+l, v.w)...)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
