package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

type findKeys struct {
	listKeys
	Go     key.Binding
	Back   key.Binding
	Again  key.Binding
	Acts   keyActions // skip, retry now, quarantine: from partitionq's table
	Replay key.Binding
}

func newFindKeys(ro bool) findKeys {
	k := findKeys{
		listKeys: newListKeys(),
		Go:       key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "find")),
		Back:     key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "back")),
		Again:    key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "another key")),
		Acts:     newKeyActions(ro),
		Replay:   actionBinding(partitionq.AuditReplay, true, "replay its dead letters"),
	}
	readOnly(ro, &k.Replay)
	return k
}

// keyView finds one key ("/"): a prompt for the key, then everything about
// it: its slot and owner, its state (flowing, blocked, draining), its
// set-aside events, its dead letters and its recent dedup hits (duplicates
// refused), refreshed with the rest; the
// actions on a blocked key and the replay of its dead letters are a key
// away.
type keyView struct {
	sh        *shared
	keys      findKeys
	w, h      int
	input     textinput.Model
	prompting bool   // the prompt has the keyboard
	key       string // the key shown (after enter)
	info      partitionq.KeyInfo
	err       error // the key read's own error (an invalid key)
	at        snapshotMsg
	have      bool
	scroll    int
}

func newKeyView(sh *shared) *keyView {
	ti := textinput.New()
	ti.Prompt = "Find key: "
	ti.Placeholder = "a partition key, exactly"
	ti.CharLimit = 1000
	ti.Cursor.SetMode(cursor.CursorStatic)
	return &keyView{sh: sh, keys: newFindKeys(sh.readOnly), input: ti}
}

// prompt opens the prompt, empty.
func (v *keyView) prompt() tea.Cmd {
	v.prompting = true
	v.input.SetValue("")
	return v.input.Focus()
}

func (v *keyView) SetSize(w, h int) { v.w, v.h = w, h; v.input.Width = max(10, w-14) }
func (v *keyView) capturing() bool  { return v.prompting }

func (v *keyView) ShortHelp() []key.Binding {
	k := v.keys
	if v.prompting {
		return []key.Binding{k.Go, k.Back}
	}
	if v.info.Blocked != nil && v.info.State == partitionq.KeyBlocked {
		return append(append([]key.Binding{k.Back}, k.Acts.bindings()...), k.Replay, k.Again)
	}
	return []key.Binding{k.Back, k.Replay, k.Again, k.Down}
}

func (v *keyView) FullHelp() [][]key.Binding {
	k := v.keys
	return [][]key.Binding{k.all(), append(append([]key.Binding{k.Go, k.Back, k.Again}, k.Acts.bindings()...), k.Replay)}
}

func (v *keyView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil && msg.plan.findKey != "" && msg.plan.findKey == v.key {
			v.info, v.err, v.at, v.have = msg.key, msg.keyErr, msg, true
		}
	case tea.KeyMsg:
		if v.prompting {
			return v.onPromptKey(msg)
		}
		return v.onKey(msg)
	}
	return nil
}

func (v *keyView) onPromptKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, v.keys.Back):
		v.prompting = false
		v.input.Blur()
		if v.key == "" {
			return send(closeFindMsg{})
		}
		return nil
	case key.Matches(msg, v.keys.Go):
		k := v.input.Value()
		if k == "" {
			return nil
		}
		v.prompting = false
		v.input.Blur()
		v.key, v.info, v.err, v.have, v.scroll = k, partitionq.KeyInfo{}, nil, false, 0
		return send(refreshNowMsg{})
	}
	var cmd tea.Cmd
	v.input, cmd = v.input.Update(msg)
	return cmd
}

func (v *keyView) onKey(msg tea.KeyMsg) tea.Cmd {
	if s, ok := v.keys.move(msg, v.scroll, len(v.lines()), v.h-1); ok {
		v.scroll = s
		return nil
	}
	blocked := v.have && v.info.Blocked != nil
	switch {
	case key.Matches(msg, v.keys.Back):
		return send(closeFindMsg{})
	case key.Matches(msg, v.keys.Again):
		return v.prompt()
	case v.keys.Acts.matches(msg) && blocked:
		return v.keys.Acts.request(msg, *v.info.Blocked)
	case key.Matches(msg, v.keys.Replay) && v.have && v.info.PendingDeadLetters > 0:
		q := partitionq.DeadLetterQuery{Key: v.key, Pending: true}
		return send(confirmMsg{req: actionRequest{kind: actReplayMany, match: q, filter: "key=" + quoteFilter(v.key) + " pending"}})
	}
	return nil
}

// quoteFilter writes a filter value, quoted when it holds spaces or quotes.
func quoteFilter(s string) string {
	if !strings.ContainsAny(s, " \t\"\\") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func (v *keyView) lines() []string {
	st := v.sh.styles
	ki, at := v.info, v.at.at
	var out []string
	switch {
	case v.key == "":
		return nil
	case !v.have:
		return []string{st.dim.Render("Looking up key " + line(v.key) + "…")}
	case v.err != nil:
		return wrap(st.crit.Render("✗ "+line(v.err.Error())), v.w)
	}
	owner := st.warn.Render("no live owner: its events wait for a worker")
	if o := ki.Owner; o != nil {
		owner = fmt.Sprintf("owned by %s (epoch %d)", line(o.Name), o.Epoch)
	}
	for _, l := range wrap(fmt.Sprintf("Key %s · slot %d · %s", line(ki.Key), ki.Slot, owner), v.w) {
		out = append(out, st.title.Render(l))
	}
	switch b := ki.Blocked; {
	case b == nil:
		out = append(out, wrap(st.ok.Render("● flowing: nothing set aside; its events run as they arrive."), v.w)...)
	case b.State == partitionq.KeyDraining:
		out = append(out, wrap(st.warn.Render(fmt.Sprintf("◐ draining: its failed event was resolved; event #%d and the %s behind it run next, in order. Nothing to do.",
			b.Head.ID, plural(int(b.Waiting), "event"))), v.w)...)
	default:
		out = append(out, wrap(st.crit.Render(fmt.Sprintf("✗ blocked %s (since %s) on event #%d %s · %d attempts · next retry %s · %s waiting",
			age(at.Sub(b.BlockedSince)), stamp(b.BlockedSince), b.Head.ID, line(b.Head.Type), b.Head.Attempts, nextRetry(*b, at), count(b.Waiting))), v.w)...)
		out = append(out, errorBlock(st, b.Head.LastError, v.w)...)
	}
	if len(ki.SetAside) > 0 {
		out = append(out, "", st.label.Render(fmt.Sprintf("Set aside in slot %d, in the order they run", ki.Slot)))
		for _, ev := range ki.SetAside {
			mark := " "
			if ev.Head {
				mark = "▸"
			}
			out = append(out, fit(fmt.Sprintf(" %s #%d %s %s %s", mark, ev.ID, clip(line(ev.Type), 24), clock(ev.Time), compactPayload(ev.Payload)), v.w))
		}
		if b := ki.Blocked; b != nil && b.Waiting+1 > int64(len(ki.SetAside)) {
			out = append(out, fmt.Sprintf("   … and %s more", count(b.Waiting+1-int64(len(ki.SetAside)))))
		}
	}
	out = append(out, "", st.label.Render(fmt.Sprintf("Dead letters: %d (%d not replayed)", ki.DeadLetterCount, ki.PendingDeadLetters)))
	for _, d := range ki.DeadLetters {
		out = append(out, fit(fmt.Sprintf("   %d · #%d %s · %s · %s ago · %s · %s", d.ID, d.EventID, clip(line(d.Type), 20), clip(line(d.Reason), 30),
			age(at.Sub(d.DeadAt)), replayState(d), errText(d.LastError)), v.w))
	}
	if len(ki.DeadLetters) == 0 {
		out = append(out, "   (none)")
	}
	out = append(out, "", st.label.Render(fmt.Sprintf("Duplicates refused: %s (dedup window %s)", count(ki.Duplicates), age(ki.DedupWindow))))
	for _, h := range ki.DedupHits {
		out = append(out, fit(fmt.Sprintf("   %s · #%d · %s · last %s ago", clip(line(h.DedupID), 40), h.EventID, plural(int(h.Hits), "hit"),
			age(at.Sub(h.LastHit))), v.w))
	}
	return out
}

func (v *keyView) View() string {
	var top []string
	if v.prompting {
		top = append(top, v.input.View(), v.sh.styles.dim.Render("enter: find · esc: back"), "")
	}
	lines := append(top, v.lines()...)
	if len(lines) == 0 {
		lines = []string{v.sh.styles.dim.Render("Type a key and press enter.")}
	}
	v.scroll = max(0, min(v.scroll, len(lines)-v.h))
	return padLines(lines[v.scroll:], v.w, v.h)
}
