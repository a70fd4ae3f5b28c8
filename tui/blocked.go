package tui

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// blockedSort is an order of the blocked keys.
type blockedSort int

const (
	byAge     blockedSort = iota // oldest block first
	byBacklog                    // most waiting events first
)

func (s blockedSort) String() string { return [...]string{"age", "backlog"}[s] }

type blockedKeys struct {
	listKeys
	Filter      key.Binding
	ApplyFilter key.Binding
	ClearFilter key.Binding
	Sort        key.Binding
	Open        key.Binding
	Acts        keyActions // skip, retry now, quarantine: from partitionq's table
}

func newBlockedKeys(ro bool) blockedKeys {
	k := blockedKeys{
		listKeys:    newListKeys(),
		Filter:      key.NewBinding(key.WithKeys("f"), key.WithHelp("f", "filter")),
		ApplyFilter: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply filter")),
		ClearFilter: key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter")),
		Sort:        key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "sort")),
		Open:        key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "detail")),
		Acts:        newKeyActions(ro),
	}
	return k
}

// blockedView is the incident inbox: the blocked keys of the group.
type blockedView struct {
	sh        *shared
	keys      blockedKeys
	w, h      int
	snap      snapshotMsg
	have      bool
	rows      []partitionq.BlockedKey // filtered and sorted
	cursor    int
	offset    int
	sortBy    blockedSort
	filter    textinput.Model
	filtering bool // the filter input has the keyboard
	// lost is the key that was under the cursor when a refresh found it
	// resolved (it left the list): the cursor now rests on another key,
	// and the next action key only says so, so that a keystroke meant for
	// the resolved key never acts on its neighbour. Moving clears it. Only
	// while the list shows (shown, set by the root after each update): a
	// cursor nobody looked at hands no keystroke on.
	lost  string
	shown bool
	// resolvedHere is the key this console last skipped or quarantined: its
	// leaving the list is no surprise.
	resolvedHere string
}

func newBlockedView(sh *shared) *blockedView {
	ti := textinput.New()
	ti.Prompt = "filter: "
	ti.Placeholder = "key, error or slot:N"
	ti.Cursor.SetMode(cursor.CursorStatic)
	return &blockedView{sh: sh, keys: newBlockedKeys(sh.readOnly), filter: ti}
}

func (v *blockedView) SetSize(w, h int) { v.w, v.h = w, h; v.filter.Width = max(10, w-40) }
func (v *blockedView) capturing() bool  { return v.filtering }

func (v *blockedView) ShortHelp() []key.Binding {
	k := v.keys
	if v.filtering {
		return []key.Binding{k.ApplyFilter, k.ClearFilter}
	}
	if len(v.rows) == 0 {
		return []key.Binding{k.Filter, k.ClearFilter}
	}
	return append(append([]key.Binding{k.Open}, k.Acts.bindings()...), k.Filter, k.Sort)
}

func (v *blockedView) FullHelp() [][]key.Binding {
	k := v.keys
	return [][]key.Binding{k.all(), append(append([]key.Binding{k.Open}, k.Acts.bindings()...), k.Filter, k.ClearFilter, k.Sort)}
}

func (v *blockedView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil {
			sel := v.selectedKey()
			v.snap, v.have = msg, true
			v.apply(sel)
		}
	case showSlotKeysMsg:
		v.filter.SetValue("slot:" + strconv.Itoa(msg.slot))
		v.apply("")
	case tea.KeyMsg:
		if v.filtering {
			return v.onFilterKey(msg)
		}
		return v.onKey(msg)
	}
	return nil
}

func (v *blockedView) onFilterKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, v.keys.ApplyFilter):
		v.filtering = false
		v.filter.Blur()
		return nil
	case key.Matches(msg, v.keys.ClearFilter):
		v.filtering = false
		v.filter.Blur()
		v.filter.SetValue("")
		v.apply(v.selectedKey())
		return nil
	}
	sel := v.selectedKey()
	var cmd tea.Cmd
	v.filter, cmd = v.filter.Update(msg)
	v.apply(sel)
	return cmd
}

func (v *blockedView) onKey(msg tea.KeyMsg) tea.Cmd {
	if c, ok := v.keys.move(msg, v.cursor, len(v.rows), v.tableHeight()); ok {
		v.cursor, v.lost = c, ""
		return nil
	}
	switch {
	case key.Matches(msg, v.keys.Filter):
		v.filtering = true
		v.filter.CursorEnd()
		return v.filter.Focus()
	case key.Matches(msg, v.keys.ClearFilter):
		if v.filter.Value() != "" {
			v.filter.SetValue("")
			v.apply(v.selectedKey())
		}
		return nil
	case key.Matches(msg, v.keys.Sort):
		sel := v.selectedKey()
		v.sortBy = 1 - v.sortBy
		v.apply(sel)
		return nil
	}
	b, ok := v.selected()
	if !ok {
		return nil
	}
	if v.lost != "" && (key.Matches(msg, v.keys.Open) || v.keys.Acts.matches(msg)) {
		v.lost = "" // said once: the next one acts on the key under the cursor
		return nil
	}
	if key.Matches(msg, v.keys.Open) {
		return send(openKeyMsg{key: b})
	}
	return v.keys.Acts.request(msg, b)
}

func (v *blockedView) selected() (partitionq.BlockedKey, bool) {
	if v.cursor < 0 || v.cursor >= len(v.rows) {
		return partitionq.BlockedKey{}, false
	}
	return v.rows[v.cursor], true
}

func (v *blockedView) selectedKey() string {
	b, _ := v.selected()
	return b.Key
}

// apply filters and sorts the keys, keeping the selection on key when it
// is still listed.
func (v *blockedView) apply(keep string) {
	terms := strings.Fields(strings.ToLower(v.filter.Value()))
	v.rows = v.rows[:0]
	for _, b := range v.snap.blocked {
		if matches(b, terms) {
			v.rows = append(v.rows, b)
		}
	}
	if v.sortBy == byBacklog {
		sort.SliceStable(v.rows, func(i, j int) bool { return v.rows[i].Waiting > v.rows[j].Waiting })
	} // else: the library's order, oldest block first
	v.cursor = max(0, min(v.cursor, len(v.rows)-1))
	found := false
	for i, b := range v.rows {
		if b.Key == keep {
			v.cursor, found = i, true
		}
	}
	if keep != "" && !found && len(v.rows) > 0 && v.shown && keep != v.resolvedHere {
		v.lost = keep
	}
	if found || len(v.rows) == 0 {
		v.lost = ""
	}
}

// matches says whether a blocked key matches every filter term: "slot:N"
// matches the slot, any other term a substring of the key, the event type
// or the last error (case-insensitive).
func matches(b partitionq.BlockedKey, terms []string) bool {
	hay := strings.ToLower(b.Key + " " + b.Head.Type + " " + b.Head.LastError)
	for _, t := range terms {
		if n, ok := strings.CutPrefix(t, "slot:"); ok {
			if s, err := strconv.Atoi(n); err == nil {
				if s != b.Slot {
					return false
				}
				continue
			}
		}
		if !strings.Contains(hay, t) {
			return false
		}
	}
	return true
}

// paneHeight is how many lines the selected key's error gets below the table.
func (v *blockedView) paneHeight() int {
	switch {
	case v.h >= 30:
		return 6
	case v.h >= 14:
		return 4
	}
	return 0
}

func (v *blockedView) tableHeight() int {
	h := v.h - 2
	if p := v.paneHeight(); p > 0 {
		h -= p + 1
	}
	return max(1, h)
}

// columns: the key as wide as the longest listed, up to 24 cells and a
// fifth of the width (a longer one keeps both its ends), the error all the room left; head and type
// from 150 columns on (the pane below shows them for the selected key).
func (v *blockedView) columns() []column {
	var keys []string
	for _, b := range v.rows {
		keys = append(keys, line(b.Key))
	}
	keyW := contentWidth(3, min(24, v.w/5), keys...)
	cols := []column{
		{title: " ", width: 1},
		{title: "KEY", width: keyW, max: keyW},
		{title: "SLOT", width: 4, right: true},
		{title: "BLOCKED", width: 7, right: true},
		{title: "TRIES", width: 5, right: true},
		{title: "NEXT", width: 8, right: true},
		{title: "WAIT", width: 5, right: true},
		{title: "LAST ERROR", width: 10},
	}
	if v.w >= 150 {
		cols = append(cols[:7], column{title: "HEAD", width: 8, right: true}, column{title: "TYPE", width: 12, max: 20}, cols[7])
		return flex(v.w, cols, map[int]int{1: 1, 8: 1, 9: 4})
	}
	return flex(v.w, cols, map[int]int{1: 1, 7: 3})
}

func (v *blockedView) View() string {
	st := v.sh.styles
	lines := []string{v.summary()}
	if b, ok := v.selected(); ok && v.lost != "" {
		lines[0] = st.warn.Render(fit(fmt.Sprintf("Key %s was resolved and left the list; ▸ is on %s now: move, or press the action again to act on it",
			line(v.lost), line(b.Key)), v.w))
	}
	if !v.have {
		return padLines(append(lines, st.dim.Render("Reading the blocked keys…")), v.w, v.h)
	}
	if len(v.rows) == 0 {
		text := "No blocked keys: every key is flowing."
		if len(v.snap.blocked) > 0 {
			text = fmt.Sprintf("No blocked key matches the filter (%d blocked in all): esc clears it.", len(v.snap.blocked))
		}
		return padLines(append(lines, "", st.ok.Render(text)), v.w, v.h)
	}
	cols := v.columns()
	lines = append(lines, st.header.Render(headerRow(cols)))
	at := v.snap.at
	from, to := window(len(v.rows), v.tableHeight(), v.cursor, v.offset)
	v.offset = from
	for i := from; i < to; i++ {
		b := v.rows[i]
		mark := " "
		if i == v.cursor {
			mark = "▸"
		}
		cells := []string{mark, line(b.Key), fmt.Sprint(b.Slot), age(at.Sub(b.BlockedSince)), fmt.Sprint(b.Head.Attempts),
			nextRetry(b, at), count(b.Waiting), errText(b.Head.LastError)}
		if b.State == partitionq.KeyDraining {
			cells[3], cells[4], cells[5], cells[7] = "—", "—", "now", "draining (never failed)"
		}
		if len(cols) > 8 {
			cells = append(cells[:7], "#"+fmt.Sprint(b.Head.ID), line(b.Head.Type), cells[7])
		}
		r := row(cols, cells...)
		switch {
		case i == v.cursor:
			r = st.selected.Render(r)
		case b.State == partitionq.KeyDraining:
			r = st.dim.Render(r)
		}
		lines = append(lines, r)
	}
	if ph := v.paneHeight(); ph > 0 {
		for len(lines) < v.h-ph {
			lines = append(lines, "")
		}
		lines = append(lines, v.pane(ph)...)
	}
	return padLines(lines, v.w, v.h)
}

func (v *blockedView) summary() string {
	if v.filtering || v.filter.Value() != "" {
		return fmt.Sprintf("%s  (%d of %d)", v.filter.View(), len(v.rows), len(v.snap.blocked))
	}
	if !v.have {
		return ""
	}
	var waiting int64
	for _, b := range v.snap.blocked {
		waiting += b.Waiting
	}
	blocked, draining := countStates(v.snap.blocked)
	sum := plural(blocked, "blocked key")
	if draining > 0 {
		sum += fmt.Sprintf(" · %d draining", draining)
	}
	return fmt.Sprintf("%s · %s waiting · sorted by %s", sum, plural(int(waiting), "event"), v.sortBy)
}

// pane shows the selected key's head and error (whole when it fits).
func (v *blockedView) pane(height int) []string {
	b, ok := v.selected()
	if !ok {
		return nil
	}
	st := v.sh.styles
	title := fmt.Sprintf("%s · head #%d %s · sent %s", clip(line(b.Key), v.w/2), b.Head.ID, clip(line(b.Head.Type), 24), clock(b.Head.Time))
	out := []string{st.label.Render(fit(title, v.w))}
	if b.State == partitionq.KeyDraining {
		out = append(out, wrap(fmt.Sprintf("Draining: the key's failed event was resolved; its next event, #%d, has never failed, and it and the %s behind it run now, in order. Nothing to do.",
			b.Head.ID, plural(int(b.Waiting), "event")), v.w)...)
	} else {
		out = append(out, errorBlock(st, b.Head.LastError, v.w)...)
	}
	if len(out) > height {
		out = append(out[:height-1], st.dim.Render("… enter shows it all"))
	}
	return out
}

// nextRetry formats when the worker tries the head again, relative to at.
func nextRetry(b partitionq.BlockedKey, at time.Time) string {
	t := b.Head.NextAttempt
	if t.IsZero() || !t.After(at) {
		return "due"
	}
	return "in " + age(t.Sub(at))
}
