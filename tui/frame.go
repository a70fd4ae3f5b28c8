package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
)

// The frame around the focused view: header, tabs, banner, result line
// and keys. The layout is computed after every Update.

// layout sizes the components to the room left by the header, the tabs,
// the banner, the flash line and the help.
func (m *Model) layout() {
	m.blocked.shown = m.focused() == m.blocked
	m.help.Width = m.w
	h := m.h - 3 - len(m.banner()) - strings.Count(m.helpView(), "\n") - 1
	h = max(1, h)
	for _, c := range []component{m.slots, m.blocked, m.detail, m.dead, m.audit, m.hot, m.confirm, m.keyv, m.groups} {
		c.SetSize(m.w, h)
	}
}

// helpView is the view's keys at the bottom (all keys after "?"); the
// global ones are on the tabs line.
func (m *Model) helpView() string {
	k := m.keys
	full := [][]key.Binding{{k.Slots, k.Blocked, k.Dead, k.Audit, k.Hot, k.NextTab, k.PrevTab, k.Find, k.Groups, k.Refresh, k.Quit}}
	if m.groupsMode {
		full = [][]key.Binding{{k.Refresh, k.Quit}}
	}
	return m.help.View(keyHelp{view: m.focused(), full: full})
}

// globalHelp is the short help of the global keys, for the tabs line.
func (m *Model) globalHelp() string {
	if m.focused().capturing() {
		return m.help.ShortHelpView([]key.Binding{m.keys.ForceQuit})
	}
	return m.help.ShortHelpView([]key.Binding{m.keys.Help, m.keys.Quit})
}

// View draws the console: header, tabs, the focused view, the result of
// the latest action, and the keys.
func (m *Model) View() string {
	if m.w <= 0 || m.h <= 0 {
		return ""
	}
	lines := []string{m.header(), m.tabsLine()}
	lines = append(lines, m.banner()...)
	var body string
	switch {
	case m.confirmOpen:
		body = m.confirm.View()
	default:
		body = m.focused().View()
	}
	lines = append(lines, splitLines(body)...)
	lines = append(lines, m.flashLine())
	lines = append(lines, splitLines(m.helpView())...)
	return padLines(lines, m.w, m.h)
}

// flashLine is the result of the latest action on one line, with the
// time the library answered.
func (m *Model) flashLine() string {
	t := m.flash.text
	if t != "" && !m.flash.at.IsZero() {
		t = clock(m.flash.at) + " " + t
	}
	return m.sh.styles.of(m.flash.sev).Render(fit(t, m.w))
}

func (m *Model) header() string {
	st := m.sh.styles
	left := fmt.Sprintf("partitionq console · %s/%s", line(m.sh.queue), line(m.sh.group))
	if gs := m.last.status; gs.Slots > 0 {
		left += fmt.Sprintf(" · %s · %s", plural(gs.Slots, "slot"), gs.Engine)
	}
	if m.groupsMode {
		left = "partitionq console · every group"
		if !m.last.at.IsZero() {
			left += " · " + plural(len(m.last.groups), "group")
		}
	}
	var right string
	switch {
	case m.ref.err != nil:
		right = st.crit.Render("✗ DB DOWN · as of " + clock(m.last.at))
	case m.group != nil:
		right = st.warn.Render("no such group")
	case m.last.at.IsZero():
		right = st.dim.Render("connecting…")
	default:
		right = "● live " + clock(m.last.at)
	}
	if m.sh.readOnly {
		right = "READ-ONLY · " + right
	}
	gap := m.w - lipglossWidth(left) - lipglossWidth(right)
	if gap < 1 {
		return fit(st.title.Render(left), m.w-lipglossWidth(right)-1) + " " + right
	}
	return st.title.Render(left) + strings.Repeat(" ", gap) + right
}

func (m *Model) tabsLine() string {
	st := m.sh.styles
	if m.groupsMode {
		left, right := st.activeTab.Render("[Groups]")+" "+st.dim.Render("enter opens one"), m.globalHelp()
		gap := m.w - lipglossWidth(left) - lipglossWidth(right)
		if gap < 1 {
			return fit(left, m.w)
		}
		return left + strings.Repeat(" ", gap) + right
	}
	blocked, _ := countStates(m.last.blocked)
	names := []string{"Slots", fmt.Sprintf("Blocked keys (%d)", blocked),
		fmt.Sprintf("Dead letters (%d)", m.last.status.DeadLetters), "Audit", "Hot keys"}
	// The tabs, spaced out when the line has room for them and the keys'
	// help, tight when it has not.
	var left, right string
	for _, format := range []string{" %d %s ", "%d %s"} {
		var parts []string
		for i, n := range names {
			if format == "%d %s" && tab(i) == tabHot {
				n = "Hot"
			}
			label := fmt.Sprintf(format, i+1, n)
			if tab(i) == m.active && !m.keyOpen {
				parts = append(parts, st.activeTab.Render("["+strings.TrimSpace(label)+"]"))
			} else {
				parts = append(parts, st.tab.Render(label))
			}
		}
		if m.keyOpen {
			parts = append(parts, st.activeTab.Render("[/ "+clip(line(m.keyv.key), 20)+"]"))
		}
		left, right = strings.Join(parts, " "), m.globalHelp()
		if m.w-lipglossWidth(left)-lipglossWidth(right) >= 1 {
			break
		}
	}
	gap := m.w - lipglossWidth(left) - lipglossWidth(right)
	if gap < 1 {
		return fit(left, m.w)
	}
	return left + strings.Repeat(" ", gap) + right
}

// banner says the database does not answer, while it does not.
func (m *Model) banner() []string {
	r := m.ref
	if r.err == nil {
		return nil
	}
	lines := []string{fmt.Sprintf("✗ Database unreachable since %s · %s · next try in %s", clock(r.errSince), plural(r.failures, "failed refresh"), age(r.next))}
	for i, l := range wrap(line(r.err.Error()), m.w-2) {
		if i == 2 {
			break
		}
		lines = append(lines, "  "+l)
	}
	for i := range lines {
		lines[i] = m.sh.styles.banner.Render(fit(lines[i], m.w))
	}
	return lines
}
