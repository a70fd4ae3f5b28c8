package tui

import (
	"errors"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

type detailKeys struct {
	listKeys
	Back key.Binding
	Acts keyActions // skip, retry now, quarantine: from partitionq's table
}

func newDetailKeys(ro bool) detailKeys {
	k := detailKeys{
		listKeys: newListKeys(),
		Back:     key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Acts:     newKeyActions(ro),
	}
	k.Up.SetHelp("↑/k", "scroll up")
	k.Down.SetHelp("↓/j", "scroll")
	return k
}

// keyDetail shows one blocked key: its head event (pretty JSON payload),
// the error, and the events waiting behind it.
type keyDetail struct {
	sh       *shared
	keys     detailKeys
	w, h     int
	key      partitionq.BlockedKey
	resolved bool // the key is no longer blocked
	at       snapshotMsg
	preview  []partitionq.PreviewEvent
	loaded   bool
	scroll   int
}

func newKeyDetail(sh *shared) *keyDetail {
	return &keyDetail{sh: sh, keys: newDetailKeys(sh.readOnly)}
}

// open shows key; its waiting events come with the next refresh.
func (v *keyDetail) open(b partitionq.BlockedKey) {
	v.key, v.resolved, v.preview, v.loaded, v.scroll = b, false, nil, false, 0
}

func (v *keyDetail) SetSize(w, h int) { v.w, v.h = w, h }
func (v *keyDetail) capturing() bool  { return false }

func (v *keyDetail) ShortHelp() []key.Binding {
	k := v.keys
	return append(append([]key.Binding{k.Back}, k.Acts.bindings()...), k.Down)
}

func (v *keyDetail) FullHelp() [][]key.Binding {
	k := v.keys
	return [][]key.Binding{k.all(), append([]key.Binding{k.Back}, k.Acts.bindings()...)}
}

func (v *keyDetail) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		v.onSnapshot(msg)
	case tea.KeyMsg:
		return v.onKey(msg)
	}
	return nil
}

func (v *keyDetail) onSnapshot(msg snapshotMsg) {
	if msg.err != nil {
		return
	}
	v.at = msg
	v.resolved = true
	for _, b := range msg.blocked {
		if b.Key == v.key.Key {
			v.key, v.resolved = b, false
		}
	}
	if msg.plan.previewKey == v.key.Key {
		v.preview, v.loaded = msg.preview, true
		if errors.Is(msg.previewErr, partitionq.ErrNotBlocked) {
			v.resolved = true
		}
	}
}

func (v *keyDetail) onKey(msg tea.KeyMsg) tea.Cmd {
	if s, ok := v.keys.move(msg, v.scroll, len(v.lines()), v.h-1); ok {
		v.scroll = s
		return nil
	}
	switch {
	case key.Matches(msg, v.keys.Back):
		return send(closeKeyMsg{})
	case v.resolved:
		return nil
	}
	return v.keys.Acts.request(msg, v.key)
}

// lines renders the whole detail; View shows the part that fits. The
// error is shown whole, its lines kept.
func (v *keyDetail) lines() []string {
	st := v.sh.styles
	b, at := v.key, v.at.at
	var out []string
	title := fmt.Sprintf("Key %s · slot %d · blocked %s (since %s)", line(b.Key), b.Slot, age(at.Sub(b.BlockedSince)), stamp(b.BlockedSince))
	if b.State == partitionq.KeyDraining {
		title = fmt.Sprintf("Key %s · slot %d · draining", line(b.Key), b.Slot)
	}
	for _, l := range wrap(title, v.w) {
		out = append(out, st.title.Render(l))
	}
	if v.resolved {
		out = append(out, wrap(st.ok.Render("Resolved: the key has no events set aside any more (handled, skipped or quarantined). esc goes back."), v.w)...)
	}
	if b.State == partitionq.KeyDraining {
		out = append(out, wrap(fmt.Sprintf("Its failed event was resolved; its next event #%d %s (sent %s) has never failed, and it and the %s behind it run now, in order, as soon as a worker gets to them. Nothing to do.",
			b.Head.ID, line(b.Head.Type), stamp(b.Head.Time), plural(int(b.Waiting), "event")), v.w)...)
	} else {
		out = append(out, wrap(fmt.Sprintf("Head #%d %s · sent %s · %d attempts · next retry %s · %s waiting",
			b.Head.ID, line(b.Head.Type), stamp(b.Head.Time), b.Head.Attempts, nextRetry(b, at), count(b.Waiting)), v.w)...)
		out = append(out, "")
		out = append(out, errorBlock(st, b.Head.LastError, v.w)...)
	}
	out = append(out, "", st.label.Render("Payload"))
	for _, l := range lines(prettyPayload(b.Head.Payload)) {
		out = append(out, wrap("  "+l, v.w)...)
	}
	out = append(out, "")
	waitTitle := fmt.Sprintf("Waiting behind the head (%s; they run in this order once it is resolved)", count(b.Waiting))
	if b.State == partitionq.KeyDraining {
		waitTitle = fmt.Sprintf("Behind it (%s; they run in this order, after it)", count(b.Waiting))
	}
	out = append(out, wrap(st.label.Render(waitTitle), v.w)...)
	switch {
	case !v.loaded:
		out = append(out, st.dim.Render("  reading…"))
	default:
		out = append(out, previewLines(v.preview, v.w, b.Waiting)...)
	}
	return out
}

// previewLines lists the waiting events of a preview (without its head).
func previewLines(evs []partitionq.PreviewEvent, width int, waiting int64) []string {
	var out []string
	n := 0
	for _, ev := range evs {
		if ev.Head {
			continue
		}
		n++
		if n > PreviewLimit {
			break
		}
		out = append(out, fit(fmt.Sprintf("  #%d %s %s %s", ev.ID, clip(line(ev.Type), 24), clock(ev.Time), compactPayload(ev.Payload)), width))
	}
	switch {
	case n == 0:
		out = append(out, "  (none: the key's next events are still in the stream, if any)")
	case waiting > int64(n):
		out = append(out, fmt.Sprintf("  … and %s more", count(waiting-int64(n))))
	}
	return out
}

func (v *keyDetail) View() string {
	lines := v.lines()
	v.scroll = max(0, min(v.scroll, len(lines)-v.h))
	return padLines(lines[v.scroll:], v.w, v.h)
}
