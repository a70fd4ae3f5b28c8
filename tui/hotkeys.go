package tui

import (
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// HotKeysTop is how many keys the hot keys view lists.
const HotKeysTop = 20

// hotKeysView lists the keys with the most pending events, each slot's
// busiest key and the key of each slot's oldest pending event
// (Client.HotKeys: exact, or sampled with its error).
type hotKeysView struct {
	sh     *shared
	keys   listKeys
	w, h   int
	hot    partitionq.HotKeys
	have   bool
	cursor int
	offset int
}

func newHotKeysView(sh *shared) *hotKeysView { return &hotKeysView{sh: sh, keys: newListKeys()} }

func (v *hotKeysView) SetSize(w, h int)          { v.w, v.h = w, h }
func (v *hotKeysView) capturing() bool           { return false }
func (v *hotKeysView) ShortHelp() []key.Binding  { return []key.Binding{v.keys.Up, v.keys.Down} }
func (v *hotKeysView) FullHelp() [][]key.Binding { return [][]key.Binding{v.keys.all()} }

func (v *hotKeysView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil && msg.plan.hotKeys {
			v.hot, v.have = msg.hot, true
			v.cursor = max(0, min(v.cursor, len(v.hot.Top)-1))
		}
	case tea.KeyMsg:
		if c, ok := v.keys.move(msg, v.cursor, len(v.hot.Top), v.h-4); ok {
			v.cursor = c
		}
	}
	return nil
}

// pendingOf is a key's count, with its error when sampled.
func (v *hotKeysView) pendingOf(k partitionq.KeyPending) string {
	if v.hot.Exact || k.Error == 0 {
		return count(k.Pending)
	}
	return count(k.Pending) + " ±" + count(k.Error)
}

func hotKey(k string) string {
	if k == "" {
		return "(no key)"
	}
	return line(k)
}

func (v *hotKeysView) View() string {
	st := v.sh.styles
	hk := v.hot
	how := fmt.Sprintf("exact: all %s counted", plural(int(hk.Pending), "pending event"))
	if !hk.Exact {
		how = fmt.Sprintf("estimated from a sample of %s of %s, ± 95%%", count(hk.Sampled), plural(int(hk.Pending), "pending event"))
	}
	lines := []string{fmt.Sprintf("Keys of %s/%s with the most pending events (%s)", v.sh.queue, v.sh.group, how)}
	switch {
	case !v.have:
		return padLines(append(lines[:0], "Keys with the most pending events", st.dim.Render("Counting the keys…")), v.w, v.h)
	case len(hk.Top) == 0:
		return padLines(append(lines, "", "Nothing pending: no hot key."), v.w, v.h)
	}
	var names []string
	for _, k := range hk.Top {
		names = append(names, hotKey(k.Key))
	}
	cols := flex(v.w, []column{
		{title: " ", width: 1},
		{title: "KEY", width: contentWidth(3, 40, names...)},
		{title: "SLOT", width: 4, right: true},
		{title: "PENDING", width: 16, right: true},
		{title: "SHARE", width: 6, right: true},
		{title: "SLOT'S OLDEST PENDING", width: 21},
	}, map[int]int{5: 1})
	oldest := map[int]partitionq.KeyAge{}
	for _, o := range hk.Oldest {
		oldest[o.Slot] = o
	}
	lines = append(lines, st.header.Render(headerRow(cols)))
	from, to := window(len(hk.Top), v.h-2, v.cursor, v.offset)
	v.offset = from
	for i := from; i < to; i++ {
		k := hk.Top[i]
		mark := " "
		if i == v.cursor {
			mark = "▸"
		}
		share := "—"
		if hk.Pending > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(k.Pending)/float64(hk.Pending))
		}
		old := "—"
		if o, ok := oldest[k.Slot]; ok {
			old = fmt.Sprintf("%s, %s ago", hotKey(o.Key), age(o.Age.Round(time.Millisecond)))
		}
		r := row(cols, mark, hotKey(k.Key), fmt.Sprint(k.Slot), v.pendingOf(k), share, old)
		if i == v.cursor {
			r = st.selected.Render(r)
		}
		lines = append(lines, r)
	}
	return padLines(lines, v.w, v.h)
}
