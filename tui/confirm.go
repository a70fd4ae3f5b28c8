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
	// bulk is the dry run of a bulk action (loaded when it came).
	bulk    partitionq.BulkResult
	bulkErr error
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
	v.bulk, v.bulkErr = partitionq.BulkResult{}, nil
	v.reason.SetValue("")
	return v.reason.Focus()
}

// previewKey is the key whose waiting events the dialog shows, if any.
func (v *confirmDialog) previewKey() string {
	if v.req.kind == actKeyHead && v.req.row.PreviewWaiting {
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
	case bulkPreviewMsg:
		if msg.req.kind == v.req.kind && msg.req.filter == v.req.filter {
			v.bulk, v.bulkErr, v.loaded = msg.res, msg.err, true
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
		if v.req.kind.bulk() {
			switch {
			case !v.loaded:
				v.problem = "Wait for the count of the dead letters selected."
				return nil
			case v.bulkErr != nil:
				v.problem = "Nothing can be done: " + line(v.bulkErr.Error())
				return nil
			case v.bulk.Count == 0:
				v.problem = "No dead letter to " + v.req.verb() + ": esc goes back."
				return nil
			}
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
	switch {
	case r.kind == actKeyHead:
		body = append(body, v.keyHeadBody(inner)...)
	case r.kind == actReplay:
		d := r.dead
		body = append(body, st.title.Render(fit(fmt.Sprintf("Replay dead letter %d?", d.ID), inner)))
		add(fmt.Sprintf("Event #%d %s of key %s (%s) is sent again, at the tail of its key's order.", d.EventID, line(d.Type),
			clip(line(d.Key), max(8, inner/2)), clip(line(d.Reason), inner)))
		add("Payload: " + clip(compactPayload(d.Payload), 2*inner))
	case r.kind.bulk():
		body = append(body, v.bulkBody(inner)...)
	}
	body = append(body, "", v.reason.View())
	if v.problem != "" {
		body = append(body, wrap(st.crit.Render(v.problem), inner)...)
	}
	body = append(body, st.dim.Render(fmt.Sprintf("enter: %s · esc: cancel", r.verb())))
	if max := v.h - 2; len(body) > max && max > 0 {
		body = body[len(body)-max:] // keep the input and the keys visible
	}
	box := st.box.Width(v.boxWidth() - 2).Render(strings.Join(body, "\n"))
	return lipgloss.Place(v.w, v.h, lipgloss.Center, lipgloss.Center, box)
}

// keyHeadBody says what an action on a key's head will do: skip and
// quarantine in their own words, any other action from its row of
// partitionq's table (its name and summary); with the key's waiting
// events when the row says to preview them.
func (v *confirmDialog) keyHeadBody(inner int) []string {
	st, r := v.sh.styles, v.req
	var body []string
	add := func(s string) { body = append(body, wrap(s, inner)...) }
	key := clip(line(r.key.Key), max(8, inner/2))
	draining := r.key.State == partitionq.KeyDraining
	switch r.row.Action {
	case partitionq.AuditSkip:
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
	case partitionq.AuditQuarantine:
		body = append(body, st.title.Render(fit(fmt.Sprintf("Quarantine key %s?", key), inner)))
		if draining {
			for _, l := range wrap(fmt.Sprintf("Key %s is draining: none of its events has failed since its failed event was resolved.", key), inner) {
				body = append(body, st.warn.Render(l))
			}
		}
		add(fmt.Sprintf("The head #%d and the %s events waiting behind it go to the dead letters, in one transaction:", r.key.Head.ID, count(r.key.Waiting)))
		body = append(body, v.previewBody(inner)...)
		add("Events of the key still in the stream are handled as usual when they come.")
	default:
		body = append(body, st.title.Render(fit(fmt.Sprintf("%s event #%d of key %s?", capital(r.verb()), r.key.Head.ID, key), inner)))
		add(line(r.row.Summary) + ".")
		if r.row.PreviewWaiting {
			add(fmt.Sprintf("The key's %s waiting events:", count(r.key.Waiting)))
			body = append(body, v.previewBody(inner)...)
		}
	}
	return body
}

// bulkBody says what a bulk replay or purge selects, from its dry run.
func (v *confirmDialog) bulkBody(width int) []string {
	st, r := v.sh.styles, v.req
	var out []string
	add := func(s string) { out = append(out, wrap(s, width)...) }
	what := "every dead letter shown"
	if r.filter != "" {
		what = "filter " + line(r.filter)
	}
	switch {
	case !v.loaded:
		out = append(out, st.title.Render(fit(fmt.Sprintf("%s the dead letters of %s?", capital(r.verb()), what), width)), st.dim.Render("  counting…"))
		return out
	case v.bulkErr != nil:
		out = append(out, st.title.Render(fit(fmt.Sprintf("%s the dead letters of %s?", capital(r.verb()), what), width)))
		for _, l := range wrap("✗ "+line(v.bulkErr.Error()), width) {
			out = append(out, st.crit.Render(l))
		}
		return out
	}
	res := v.bulk
	if r.kind == actReplayMany {
		out = append(out, st.title.Render(fit(fmt.Sprintf("Replay %s (%s)?", plural(res.Count, "dead letter"), what), width)))
		add("They are sent again in one transaction, in the order of their original events: each key's in its original order, at the tail of the key.")
		if res.AlreadyReplayed > 0 {
			add(fmt.Sprintf("%s replayed before are left as they are.", plural(res.AlreadyReplayed, "dead letter")))
		}
	} else {
		out = append(out, st.title.Render(fit(fmt.Sprintf("Purge %s (%s) for good?", plural(res.Count, "dead letter"), what), width)))
		add("They are deleted in one transaction and cannot be replayed afterwards.")
	}
	n := 0
	for _, it := range res.Items {
		if it.Outcome == partitionq.OutcomeAlreadyReplayed {
			continue
		}
		if n++; n > 5 {
			out = append(out, fmt.Sprintf("  … and %d more", res.Count-5))
			break
		}
		out = append(out, fit(fmt.Sprintf("  %d · key %s · #%d %s", it.ID, clip(line(it.Key), 24), it.EventID, clip(line(it.Type), 24)), width))
	}
	add("One audit entry records it, with the count.")
	return out
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// previewBody lists the key's waiting events (without the head): what
// a skip runs next, what a quarantine moves with the head.
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
