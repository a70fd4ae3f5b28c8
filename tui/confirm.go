package tui

import (
	"errors"
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/partitionq/partitionq/partitionq"
)

type confirmKeys struct {
	Confirm key.Binding
	Cancel  key.Binding
}

func newConfirmKeys() confirmKeys {
	return confirmKeys{
		Confirm: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "confirm")),
		Cancel:  key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
	}
}

// confirmDialog asks before an action: it says what will happen (for a
// skip, which events run next), and asks for a reason, which goes to the
// audit trail.
type confirmDialog struct {
	sh         *shared
	keys       confirmKeys
	w, h       int
	req        actionRequest
	reason     textinput.Model
	preview    []partitionq.PreviewEvent
	loaded     bool
	previewErr error
	problem    string // why enter did nothing
}

func newConfirmDialog(sh *shared) *confirmDialog {
	ti := textinput.New()
	ti.Prompt = "Reason: "
	ti.Placeholder = "why (kept in the audit trail)"
	ti.CharLimit = 500
	ti.Cursor.SetMode(cursor.CursorStatic)
	return &confirmDialog{sh: sh, keys: newConfirmKeys(), reason: ti}
}

// open starts a dialog for req.
func (v *confirmDialog) open(req actionRequest) tea.Cmd {
	v.req, v.preview, v.loaded, v.previewErr, v.problem = req, nil, false, nil, ""
	v.reason.SetValue("")
	return v.reason.Focus()
}

// previewKey is the key whose waiting events the dialog shows, if any.
func (v *confirmDialog) previewKey() string {
	if v.req.kind == actSkip || v.req.kind == actQuarantine {
		return v.req.key.Key
	}
	return ""
}

func (v *confirmDialog) SetSize(w, h int) { v.w, v.h = w, h; v.reason.Width = max(10, v.boxWidth()-14) }
func (v *confirmDialog) capturing() bool  { return true }

func (v *confirmDialog) ShortHelp() []key.Binding {
	return []key.Binding{v.keys.Confirm, v.keys.Cancel}
}
func (v *confirmDialog) FullHelp() [][]key.Binding {
	return [][]key.Binding{{v.keys.Confirm, v.keys.Cancel}}
}

func (v *confirmDialog) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case snapshotMsg:
		if msg.err == nil && msg.plan.previewKey != "" && msg.plan.previewKey == v.previewKey() {
			v.preview, v.previewErr, v.loaded = msg.preview, msg.previewErr, true
		}
	case tea.KeyMsg:
		return v.onKey(msg)
	}
	return nil
}

func (v *confirmDialog) onKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, v.keys.Cancel):
		v.reason.Blur()
		return send(cancelConfirmMsg{})
	case key.Matches(msg, v.keys.Confirm):
		reason := strings.TrimSpace(v.reason.Value())
		if reason == "" {
			v.problem = "A reason is required: it is kept in the audit trail and the dead letter."
			return nil
		}
		v.reason.Blur()
		req := v.req
		req.reason = reason
		return send(runActionMsg{req: req})
	}
	var cmd tea.Cmd
	v.reason, cmd = v.reason.Update(msg)
	if v.reason.Value() != "" {
		v.problem = ""
	}
	return cmd
}

func (v *confirmDialog) boxWidth() int { return max(30, min(v.w-2, 100)) }

func (v *confirmDialog) View() string {
	st := v.sh.styles
	inner := v.boxWidth() - 4 // border and padding
	var body []string
	add := func(s string) { body = append(body, wrap(s, inner)...) }
	r := v.req
	key := clip(line(r.key.Key), max(8, inner/2))
	draining := r.key.State == partitionq.KeyDraining
	switch r.kind {
	case actSkip:
		body = append(body, st.title.Render(fit(fmt.Sprintf("Skip event #%d of key %s?", r.key.Head.ID, key), inner)))
		if draining {
			for _, l := range wrap(fmt.Sprintf("Key %s is draining: event #%d never failed. The key's failed event was resolved and its events now run in order without help; skip it only if you mean this very event.", key, r.key.Head.ID), inner) {
				body = append(body, st.warn.Render(l))
			}
			add(fmt.Sprintf("Event #%d %s · never failed", r.key.Head.ID, line(r.key.Head.Type)))
		} else {
			add(fmt.Sprintf("Head #%d %s · %d attempts · %s", r.key.Head.ID, line(r.key.Head.Type), r.key.Head.Attempts, clip(errText(r.key.Head.LastError), 3*inner)))
		}
		add("It goes to the dead letters (it can be replayed); the key's waiting events run next, in this order:")
		body = append(body, v.previewBody(inner)...)
	case actQuarantine:
		body = append(body, st.title.Render(fit(fmt.Sprintf("Quarantine key %s?", key), inner)))
		if draining {
			for _, l := range wrap(fmt.Sprintf("Key %s is draining: none of its events has failed since its failed event was resolved.", key), inner) {
				body = append(body, st.warn.Render(l))
			}
		}
		add(fmt.Sprintf("The head #%d and the %s events waiting behind it go to the dead letters, in one transaction:", r.key.Head.ID, count(r.key.Waiting)))
		body = append(body, v.previewBody(inner)...)
		add("Events of the key still in the stream are handled as usual when they come.")
	case actReplay:
		d := r.dead
		body = append(body, st.title.Render(fit(fmt.Sprintf("Replay dead letter %d?", d.ID), inner)))
		add(fmt.Sprintf("Event #%d %s of key %s (%s) is sent again, at the tail of its key's order.", d.EventID, line(d.Type),
			clip(line(d.Key), max(8, inner/2)), clip(line(d.Reason), inner)))
		add("Payload: " + clip(compactPayload(d.Payload), 2*inner))
	}
	body = append(body, "", v.reason.View())
	if v.problem != "" {
		body = append(body, wrap(st.crit.Render(v.problem), inner)...)
	}
	body = append(body, st.dim.Render(fmt.Sprintf("enter: %s · esc: cancel", r.kind.verb())))
	if max := v.h - 2; len(body) > max && max > 0 {
		body = body[len(body)-max:] // keep the input and the keys visible
	}
	box := st.box.Width(v.boxWidth() - 2).Render(strings.Join(body, "\n"))
	return lipgloss.Place(v.w, v.h, lipgloss.Center, lipgloss.Center, box)
}

// previewBody lists the events the skip runs next (without the head).
func (v *confirmDialog) previewBody(width int) []string {
	switch {
	case errors.Is(v.previewErr, partitionq.ErrNotBlocked):
		return []string{v.sh.styles.ok.Render("  The key is no longer blocked: confirming does nothing (already resolved).")}
	case v.previewErr != nil:
		return []string{fit("  could not read them: "+line(v.previewErr.Error()), width)}
	case !v.loaded:
		return []string{v.sh.styles.dim.Render("  reading…")}
	}
	lines := previewLines(v.preview, width, v.req.key.Waiting)
	if limit := 6; len(lines) > limit {
		lines = append(lines[:limit-1], fmt.Sprintf("  … %s waiting in all", count(v.req.key.Waiting)))
	}
	return lines
}
