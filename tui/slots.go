package tui

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// slotSort is an order of the slots table.
type slotSort int

const (
	bySlot slotSort = iota
	byLag
	byPending
	byBlocked
	slotSorts
)

func (s slotSort) String() string {
	return [...]string{"slot", "lag", "pending", "blocked keys"}[s]
}

type slotsKeys struct {
	listKeys
	Sort key.Binding
	Open key.Binding
}

func newSlotsKeys() slotsKeys {
	return slotsKeys{
		listKeys: newListKeys(),
		Sort:     key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "sort")),
		Open:     key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "its blocked keys")),
	}
}

func (k slotsKeys) ShortHelp() []key.Binding { return []key.Binding{k.Up, k.Down, k.Open, k.Sort} }
func (k slotsKeys) FullHelp() [][]key.Binding {
	return [][]key.Binding{k.all(), {k.Open, k.Sort}}
}

// slotsView is the table of slots, with the diagnosis of the selected one.
type slotsView struct {
	sh     *shared
	keys   slotsKeys
	w, h   int
	snap   snapshotMsg // the latest good snapshot
	have   bool
	err    error // a group-level error (no such queue or group) that replaces the table
	hist   *history
	order  []int // slot indexes in display order
	cursor int   // position in order
	offset int
	sortBy slotSort
	placed bool // the selection was put on the worst slot once; from then on it stays where it is
	// unowned holds, by slot, when the console first saw it without a
	// live owner (since it last had one).
	unowned map[int]time.Time
}

func newSlotsView(sh *shared) *slotsView {
	return &slotsView{sh: sh, keys: newSlotsKeys(), hist: newHistory(), unowned: map[int]time.Time{}}
}

func (v *slotsView) SetSize(w, h int)          { v.w, v.h = w, h }
func (v *slotsView) capturing() bool           { return false }
func (v *slotsView) ShortHelp() []key.Binding  { return v.keys.ShortHelp() }
func (v *slotsView) FullHelp() [][]key.Binding { return v.keys.FullHelp() }

func (v *slotsView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		v.onSnapshot(msg)
	case tea.KeyMsg:
		return v.onKey(msg)
	}
	return nil
}

func (v *slotsView) onSnapshot(msg snapshotMsg) {
	if msg.err != nil {
		if isGroupMissing(msg.err) {
			v.err, v.have = msg.err, false
		}
		return // keep showing the last good snapshot
	}
	sel := v.selectedSlot()
	v.snap, v.have, v.err = msg, true, nil
	v.hist.add(msg.status, msg.at)
	for _, s := range msg.status.SlotStatus {
		_, seen := v.unowned[s.Slot]
		switch {
		case s.Owner != nil:
			delete(v.unowned, s.Slot)
		case !seen:
			v.unowned[s.Slot] = msg.at
		}
	}
	v.sort()
	if !v.placed {
		// At 3 a.m., open on where it hurts; then the selection stays on
		// its slot, whatever the next refreshes find worst.
		sel, v.placed = v.worstSlot(), true
	}
	v.selectSlot(sel)
}

// input is what the diagnosis of slot status s reads.
func (v *slotsView) input(s partitionq.SlotStatus) slotInput {
	in := slotInput{s: s, group: v.snap.status, keys: blockedOf(v.snap.blocked, s.Slot), at: v.snap.at}
	if since, ok := v.unowned[s.Slot]; ok {
		in.noOwnerFor = v.snap.at.Sub(since)
	}
	return in
}

// worstSlot is the slot in the worst state (the first of them in the
// table's order).
func (v *slotsView) worstSlot() int {
	worst, sev := v.selectedSlot(), sevNone
	for _, i := range v.order {
		s := v.snap.status.SlotStatus[i]
		if d := diagnose(v.input(s)); d.sev > sev {
			worst, sev = s.Slot, d.sev
		}
	}
	return worst
}

func (v *slotsView) onKey(msg tea.KeyMsg) tea.Cmd {
	if !v.have {
		return nil
	}
	if c, ok := v.keys.move(msg, v.cursor, len(v.order), v.tableHeight()); ok {
		v.cursor = c
		return nil
	}
	switch {
	case key.Matches(msg, v.keys.Sort):
		sel := v.selectedSlot()
		v.sortBy = (v.sortBy + 1) % slotSorts
		v.sort()
		v.selectSlot(sel)
	case key.Matches(msg, v.keys.Open):
		if s := v.selectedSlot(); s >= 0 {
			return send(showSlotKeysMsg{slot: s})
		}
	}
	return nil
}

func (v *slotsView) selectedSlot() int {
	if v.cursor < 0 || v.cursor >= len(v.order) {
		return -1
	}
	return v.snap.status.SlotStatus[v.order[v.cursor]].Slot
}

func (v *slotsView) selectSlot(slot int) {
	v.cursor = 0
	for i, idx := range v.order {
		if v.snap.status.SlotStatus[idx].Slot == slot {
			v.cursor = i
		}
	}
}

func (v *slotsView) sort() {
	ss := v.snap.status.SlotStatus
	v.order = make([]int, len(ss))
	for i := range v.order {
		v.order[i] = i
	}
	key := func(s partitionq.SlotStatus) int64 {
		switch v.sortBy {
		case byLag:
			return int64(s.Lag)
		case byPending:
			return s.Pending
		case byBlocked:
			return int64(s.BlockedKeys)
		}
		return 0
	}
	sort.SliceStable(v.order, func(i, j int) bool {
		a, b := ss[v.order[i]], ss[v.order[j]]
		if ka, kb := key(a), key(b); ka != kb {
			return ka > kb // the worst first
		}
		return a.Slot < b.Slot
	})
}

// countStates counts the blocked and the draining keys of a list.
func countStates(keys []partitionq.BlockedKey) (blocked, draining int) {
	for _, k := range keys {
		if k.State == partitionq.KeyDraining {
			draining++
		} else {
			blocked++
		}
	}
	return blocked, draining
}

// blockedOf returns the blocked (and draining) keys of a slot, oldest first.
func blockedOf(all []partitionq.BlockedKey, slot int) []partitionq.BlockedKey {
	var out []partitionq.BlockedKey
	for _, b := range all {
		if b.Slot == slot {
			out = append(out, b)
		}
	}
	return out
}

// whyMin is the least room the diagnosis of the selected slot gets; it
// takes whatever the table leaves.
func (v *slotsView) whyMin() int {
	if v.h >= 16 {
		return 7
	}
	return 0
}

// tableHeight is how many slot rows fit.
func (v *slotsView) tableHeight() int {
	h := v.h - 2 // summary line, header row
	if w := v.whyMin(); w > 0 {
		h -= w + 1
	}
	return max(1, min(h, len(v.order)))
}

func (v *slotsView) columns() []column {
	wide := v.w >= 110
	var owners []string
	for _, s := range v.snap.status.SlotStatus {
		owners = append(owners, shortOwner(s.Owner))
	}
	ow := contentWidth(5, 24, owners...)
	cols := []column{
		{title: " ", width: 1},
		{title: "SLOT", width: 4, right: true},
		{title: "OWNER", width: ow, max: ow},
		{title: "LAG", width: 6, right: true},
		{title: "PENDING", width: 7},
		{title: "", width: 5, right: true},
		{title: "HANDLED/s", width: 9},
		{title: "", width: 5, right: true},
		{title: "FAIL/s", width: 6, right: true},
		{title: "BLK", width: 3, right: true},
		{title: "STATE", width: 8},
	}
	if wide {
		cols = append(cols,
			column{title: "OLDEST", width: 6, right: true},
			column{title: "FINISH", width: 6, right: true},
			column{title: "ASIDE", width: 5, right: true},
			column{title: "CONSUMER", width: 10})
		return flex(v.w, cols, map[int]int{2: 3, 4: 3, 6: 3, 14: 1})
	}
	return flex(v.w, cols, map[int]int{2: 2, 4: 2, 6: 2, 10: 1})
}

func (v *slotsView) View() string {
	st := v.sh.styles
	switch {
	case v.err != nil:
		var out []string
		for _, l := range emptyGroupText(v.err, v.sh) {
			out = append(out, wrap(l, v.w)...)
		}
		return padLines(out, v.w, v.h)
	case !v.have:
		return padLines([]string{st.dim.Render("Reading the group's status…")}, v.w, v.h)
	}
	ss := v.snap.status.SlotStatus
	lines := []string{v.summary()}
	cols := v.columns()
	lines = append(lines, st.header.Render(headerRow(cols)))
	from, to := window(len(v.order), v.tableHeight(), v.cursor, v.offset)
	v.offset = from
	at := v.snap.at
	for i := from; i < to; i++ {
		s := ss[v.order[i]]
		d := diagnose(v.input(s))
		mark := " "
		if d.sev == sevCrit {
			mark = "!"
		}
		if i == v.cursor {
			mark = "▸"
		}
		slot, state := fmt.Sprint(s.Slot), d.state
		if r := s.Resize; r != nil && d.sev < sevCrit { // a resize in flight: what the slot does in it
			switch {
			case r.Old && r.AtCutover:
				slot, state = fmt.Sprintf("%d/%d", s.Slot, s.Slots), "handoff"
			case r.Old:
				slot, state = fmt.Sprintf("%d/%d", s.Slot, s.Slots), "to cut"
			case len(r.Waiting) > 0:
				state = "waits"
			}
		}
		owner := shortOwner(s.Owner)
		if s.MovingTo != "" && s.Owner != nil {
			owner += "→" + strings.TrimPrefix(line(s.MovingTo), "partitionq:")
		}
		cells := []string{mark, slot, owner, age(s.Lag),
			v.hist.pendingLine(s.Slot, at, cols[4].width), pendingCount(s.Pending, s.PendingMax),
			v.hist.handledLine(s.Slot, at, cols[6].width), rate(s.Rates.Handled10s), rate(s.Rates.Failed10s),
			fmt.Sprint(s.BlockedKeys), state}
		if len(cols) > 11 {
			oldest, finish := "—", "never"
			if s.Pending > 0 {
				oldest = age(s.Oldest)
			}
			if s.SinceFinish >= 0 {
				finish = age(s.SinceFinish)
			}
			cells = append(cells, oldest, finish, count(s.SetAside), s.Consumer)
		}
		line := row(cols, cells...)
		switch {
		case i == v.cursor:
			line = st.selected.Render(line)
		case d.sev >= sevWarn:
			line = st.of(d.sev).Render(line)
		}
		lines = append(lines, line)
	}
	if v.whyMin() > 0 {
		lines = append(lines, "")
		lines = append(lines, v.why(v.h-len(lines))...)
	}
	return padLines(lines, v.w, v.h)
}

// groupSpark is the width of the group's sparklines in the summary line.
const groupSpark = 10

// summary is the line above the table: the group at a glance, or an
// empty state.
func (v *slotsView) summary() string {
	st := v.snap.status
	var stalled, noOwner, starting, behind int
	for _, s := range st.SlotStatus {
		in := v.input(s)
		in.keys = nil
		switch diagnose(in).state {
		case "STALLED":
			stalled++
		case "NO OWNER", "no owner":
			noOwner++
		case "unowned":
			starting++
		case "behind":
			behind++
		}
	}
	parts := []string{plural(st.Slots, "slot")}
	if n := len(st.Workers); n > 0 {
		parts[0] += " · " + plural(n, "worker")
	}
	if r := st.Resize; r != nil {
		cut := "waiting for the cutover tick"
		if r.Cutover != 0 {
			cut = plural(len(r.Remaining), "old slot") + " to hand off"
		}
		parts[0] = fmt.Sprintf("resizing %d→%d: %s", r.From, r.To, cut)
	}
	if v.sortBy != bySlot {
		parts = append(parts, "sorted by "+v.sortBy.String())
	}
	for _, p := range []struct {
		n    int
		what string
	}{{stalled, "stalled"}, {noOwner, "without owner"}, {starting, "not owned yet"}, {behind, "behind"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	blocked, draining := countStates(v.snap.blocked)
	if blocked > 0 {
		parts = append(parts, plural(blocked, "blocked key"))
	}
	if draining > 0 {
		parts = append(parts, fmt.Sprintf("%d draining", draining))
	}
	r := st.Rates
	if st.Pending == 0 && r.Handled1m == 0 && r.Failed1m == 0 && len(v.snap.blocked) == 0 {
		parts = append(parts, "no traffic: nothing pending, nothing handled in the last minute")
		return strings.Join(parts, " · ")
	}
	// The group's backlog and rates, with their sparklines when the line
	// has room for them; without the number of slots (the header says it)
	// when it has room for neither.
	line := ""
	for i, spark := range []int{groupSpark, 0, 0} {
		if i == 2 && st.Resize == nil { // the resize says more than the number of slots: it stays
			parts = parts[1:]
		}
		pending, handled := pendingCount(st.Pending, st.PendingMax)+" pending", rate(r.Handled10s)+"/s handled"
		if spark > 0 {
			pending += " " + v.hist.pendingLine(-1, v.snap.at, spark)
			handled += " " + v.hist.handledLine(-1, v.snap.at, spark)
		}
		all := append(parts[:len(parts):len(parts)], pending, handled)
		if r.Failed10s > 0 || r.Failed1m > 0 {
			all = append(all, rate(r.Failed10s)+"/s failed")
		}
		if line = strings.Join(all, " · "); lipglossWidth(line) <= v.w {
			break
		}
	}
	return line
}

// why renders the diagnosis of the selected slot in height lines.
func (v *slotsView) why(height int) []string {
	st := v.sh.styles
	if v.cursor >= len(v.order) {
		return nil
	}
	s := v.snap.status.SlotStatus[v.order[v.cursor]]
	d := diagnose(v.input(s))
	owner := "no live owner"
	if o := s.Owner; o != nil {
		owner = ownerDetail(o, v.snap.at)
	}
	title := fmt.Sprintf("Why · slot %d · %s · %s", s.Slot, s.Consumer, owner)
	var lines []string
	for _, l := range wrap(title, v.w) {
		lines = append(lines, st.label.Render(l))
	}
	marks := map[severity]string{sevOK: "✓", sevWarn: "!", sevCrit: "✗"}
	if r := s.Resize; r != nil {
		var text string
		switch {
		case r.Old && r.AtCutover:
			text = fmt.Sprintf("Resize: slot %d of the old %d has drained to the cutover; its owner hands its blocked keys to the new slots, then it leaves.", s.Slot, s.Slots)
		case r.Old:
			text = fmt.Sprintf("Resize: slot %d of the old %d drains its events up to the cutover tick, then hands off.", s.Slot, s.Slots)
		case len(r.Waiting) > 0:
			text = fmt.Sprintf("Resize: new slot %d takes keys from old %s; it starts once %s handed off.", s.Slot,
				slotsWord(r.Parents), slotsWord(r.Waiting)+map[bool]string{true: " is", false: " are"}[len(r.Waiting) == 1])
		default:
			text = fmt.Sprintf("Resize: new slot %d runs: its old %s handed off.", s.Slot,
				slotsWord(r.Parents)+map[bool]string{true: " is", false: " are"}[len(r.Parents) == 1])
		}
		for i, l := range wrap(text, v.w-2) {
			prefix := "  "
			if i == 0 {
				prefix = "· "
			}
			lines = append(lines, st.dim.Render(prefix+l))
		}
	}
	for _, f := range d.findings {
		for i, l := range wrap(f.text, v.w-2) {
			prefix := "  "
			if i == 0 {
				prefix = marks[f.sev] + " "
			}
			lines = append(lines, st.of(f.sev).Render(prefix+l))
		}
	}
	if bs := blockedOf(v.snap.blocked, s.Slot); len(bs) > 0 && len(lines)+2 < height {
		lines = append(lines, "", st.label.Render(fmt.Sprintf("Blocked keys of slot %d (enter lists them)", s.Slot)))
		cols := flex(v.w, []column{{width: 1}, {width: 16, max: 32}, {width: 17}, {width: 12}, {width: 10}}, map[int]int{1: 1, 4: 3})
		for _, b := range bs {
			if b.State == partitionq.KeyDraining {
				lines = append(lines, row(cols, "", line(b.Key), "draining", count(b.Waiting+1)+" to run", "never failed: its events run next, in order"))
				continue
			}
			lines = append(lines, row(cols, "", line(b.Key), "blocked "+age(v.snap.at.Sub(b.BlockedSince)), count(b.Waiting)+" waiting", errText(b.Head.LastError)))
		}
	}
	if len(lines) > height {
		lines = append(lines[:height-1], st.dim.Render("  …"))
	}
	return lines
}

// isGroupMissing says whether err means the queue or group does not exist:
// an empty state, not a failure to retry with backoff.
func isGroupMissing(err error) bool {
	return errors.Is(err, partitionq.ErrNoSuchQueue) || errors.Is(err, partitionq.ErrNoSuchGroup)
}

// emptyGroupText explains a missing queue or group, with the command that
// creates it on a line of its own.
func emptyGroupText(err error, sh *shared) []string {
	setup := fmt.Sprintf("  partitionq setup --queue %s --group %s --slots N", sh.queue, sh.group)
	switch {
	case errors.Is(err, partitionq.ErrNoSuchQueue):
		return []string{fmt.Sprintf("No queue %q in this database. Create it and the group with:", sh.queue), "", setup, "",
			"The console keeps looking, and shows the group once it exists."}
	case errors.Is(err, partitionq.ErrNoSuchGroup):
		return []string{fmt.Sprintf("No consumer group %q on queue %q. Create it with:", sh.group, sh.queue), "", setup, "",
			"The console keeps looking, and shows the group once it exists."}
	}
	return []string{line(err.Error())}
}

// slotsWord names slots: "slot 1", "slots 1,3".
func slotsWord(xs []int) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	if len(xs) == 1 {
		return "slot " + out[0]
	}
	return "slots " + strings.Join(out, ",")
}

// pendingCount is an exact count, or "≥N" when the count is a range (the
// queue's census catching up; status gives both ends).
func pendingCount(lo, hi int64) string {
	if hi > lo {
		return "≥" + count(lo)
	}
	return count(lo)
}
