package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

type groupsKeys struct {
	listKeys
	Open key.Binding
}

func newGroupsKeys() groupsKeys {
	return groupsKeys{listKeys: newListKeys(), Open: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open group"))}
}

// groupsView lists every consumer group of every queue
// (Client.Groups): where the console starts without a group, and where
// "0" goes back to. Enter opens the selected group.
type groupsView struct {
	sh     *shared
	keys   groupsKeys
	w, h   int
	list   []partitionq.GroupOverview
	have   bool
	cursor int
	offset int
}

func newGroupsView(sh *shared) *groupsView { return &groupsView{sh: sh, keys: newGroupsKeys()} }

func (v *groupsView) SetSize(w, h int) { v.w, v.h = w, h }
func (v *groupsView) capturing() bool  { return false }

func (v *groupsView) ShortHelp() []key.Binding {
	return []key.Binding{v.keys.Open, v.keys.Down, v.keys.Up}
}

func (v *groupsView) FullHelp() [][]key.Binding {
	return [][]key.Binding{v.keys.all(), {v.keys.Open}}
}

func (v *groupsView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil && msg.plan.groups {
			sel := v.selected()
			v.list, v.have = msg.groups, true
			v.cursor = max(0, min(v.cursor, len(v.list)-1))
			for i, g := range v.list {
				if g.Queue == sel.Queue && g.Group == sel.Group {
					v.cursor = i
				}
			}
		}
	case tea.KeyMsg:
		if c, ok := v.keys.move(msg, v.cursor, len(v.list), v.h-2); ok {
			v.cursor = c
			return nil
		}
		if key.Matches(msg, v.keys.Open) && len(v.list) > 0 {
			g := v.list[v.cursor]
			return send(openGroupMsg{queue: g.Queue, group: g.Group})
		}
	}
	return nil
}

func (v *groupsView) selected() partitionq.GroupOverview {
	if v.cursor < 0 || v.cursor >= len(v.list) {
		return partitionq.GroupOverview{}
	}
	return v.list[v.cursor]
}

// lagText is a lag to the millisecond under a second, else as age.
func lagText(d time.Duration) string {
	if d > 0 && d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return age(d)
}

// groupState is a group's mark and severity: what needs a look first.
func groupState(g partitionq.GroupOverview) (string, severity) {
	switch {
	case g.Dropped:
		return "• dropped", sevWarn // its dead letters wait: 3 Dead letters of it
	case g.Broken != "":
		return "✗ broken", sevCrit
	case g.Owned < g.Slots:
		return fmt.Sprintf("✗ %d unowned", g.Slots-g.Owned), sevCrit
	case g.BlockedKeys > 0:
		return "! blocked", sevWarn
	}
	return "● ok", sevOK
}

func (v *groupsView) columns() []column {
	var names []string
	for _, g := range v.list {
		names = append(names, line(g.Queue)+"/"+line(g.Group))
	}
	cols := []column{
		{title: " ", width: 1},
		{title: "GROUP", width: contentWidth(5, 40, names...)},
		{title: "STATE", width: 12},
		{title: "OWNED", width: 7, right: true},
		{title: "BACKLOG", width: 7, right: true},
		{title: "LAG", width: 6, right: true},
		{title: "BLOCKED", width: 7, right: true},
		{title: "DEAD", width: 5, right: true},
		{title: "WORKERS", width: 10},
	}
	return flex(v.w, cols, map[int]int{8: 1})
}

func (v *groupsView) View() string {
	st := v.sh.styles
	lines := []string{"Every consumer group of every queue · enter opens one, 0 comes back here"}
	switch {
	case !v.have:
		return padLines(append(lines, st.dim.Render("Reading the groups…")), v.w, v.h)
	case len(v.list) == 0:
		return padLines(append(lines, "", "No consumer groups yet: set one up with partitionq setup --queue Q --group G --slots N."), v.w, v.h)
	}
	cols := v.columns()
	lines = append(lines, st.header.Render(headerRow(cols)))
	from, to := window(len(v.list), v.h-3, v.cursor, v.offset)
	v.offset = from
	for i := from; i < to; i++ {
		g := v.list[i]
		mark := " "
		if i == v.cursor {
			mark = "▸"
		}
		state, sev := groupState(g)
		workers := make([]string, len(g.Workers))
		for j, w := range g.Workers {
			workers[j] = line(w)
		}
		r := row(cols, mark, line(g.Queue)+"/"+line(g.Group), state, fmt.Sprintf("%d/%d", g.Owned, g.Slots), count(g.Backlog), lagText(g.Lag),
			fmt.Sprint(g.BlockedKeys), count(g.DeadLetters), orDash(strings.Join(workers, ", ")))
		switch {
		case i == v.cursor:
			r = st.selected.Render(r)
		case sev != sevOK:
			r = st.of(sev).Render(r)
		}
		lines = append(lines, r)
	}
	if g := v.selected(); g.Broken != "" {
		lines = append(lines, "", st.crit.Render(fit(fmt.Sprintf("%s/%s: %s", line(g.Queue), line(g.Group), line(g.Broken)), v.w)))
	}
	return padLines(lines, v.w, v.h)
}
