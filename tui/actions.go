package tui

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// keyAction is the console's binding for an operator action on a blocked
// key's head: a row of partitionq's table of actions.
type keyAction struct {
	key.Binding
	info partitionq.AuditActionInfo
}

// keyActions are the actions on a blocked key's head that the blocked
// keys, key detail and key views offer: one per row of
// partitionq.AuditActions that acts on a key's head and has a console key,
// in the table's order. A row added there shows in all three.
type keyActions []keyAction

// newKeyActions builds the bindings from the table; disabled when ro.
func newKeyActions(ro bool) keyActions {
	var out keyActions
	for _, r := range partitionq.AuditActions() {
		if r.On != partitionq.TargetKeyHead || r.Key == "" {
			continue
		}
		b := actionBinding(r.Action, false, r.Name)
		readOnly(ro, &b)
		out = append(out, keyAction{Binding: b, info: r})
	}
	return out
}

// bindings returns the actions' bindings, for a view's help.
func (ks keyActions) bindings() []key.Binding {
	out := make([]key.Binding, len(ks))
	for i, k := range ks {
		out[i] = k.Binding
	}
	return out
}

// matches reports whether msg is one of the actions' keys.
func (ks keyActions) matches(msg tea.KeyMsg) bool { return key.Matches(msg, ks.bindings()...) }

// request returns the command for msg on blocked key b: the confirm
// dialog for an action the table says to confirm first or to give a
// reason for, else the action itself; nil when msg is none of the
// actions' keys.
func (ks keyActions) request(msg tea.KeyMsg, b partitionq.BlockedKey) tea.Cmd {
	for _, k := range ks {
		if !key.Matches(msg, k.Binding) {
			continue
		}
		req := keyRequest(k.info, b)
		if k.info.Confirm || k.info.ReasonRequired {
			return send(confirmMsg{req: req})
		}
		return send(runActionMsg{req: req})
	}
	return nil
}

// actionBinding is the console's binding for action a from its row of
// partitionq.AuditActions: its Key on the selected item, or its BulkKey
// (bulk); helpText is what the help says. A disabled binding when the row
// has no such key.
func actionBinding(a partitionq.AuditAction, bulk bool, helpText string) key.Binding {
	r, _ := a.Info()
	k := r.Key
	if bulk {
		k = r.BulkKey
	}
	if k == "" {
		return key.NewBinding(key.WithDisabled())
	}
	return key.NewBinding(key.WithKeys(k), key.WithHelp(k, helpText))
}
