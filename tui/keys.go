package tui

import (
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
)

// globalKeys work in every view, except while a text input (the filter, a
// reason) has the keyboard: then only forceQuit does.
type globalKeys struct {
	Quit      key.Binding
	ForceQuit key.Binding
	NextTab   key.Binding
	PrevTab   key.Binding
	Slots     key.Binding
	Blocked   key.Binding
	Dead      key.Binding
	Audit     key.Binding
	Hot       key.Binding
	Refresh   key.Binding
	Help      key.Binding
	Find      key.Binding
	Groups    key.Binding
}

func newGlobalKeys() globalKeys {
	return globalKeys{
		Quit:      key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
		ForceQuit: key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit")),
		NextTab:   key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next view")),
		PrevTab:   key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "prev view")),
		Slots:     key.NewBinding(key.WithKeys("1"), key.WithHelp("1", "slots")),
		Blocked:   key.NewBinding(key.WithKeys("2"), key.WithHelp("2", "blocked keys")),
		Dead:      key.NewBinding(key.WithKeys("3"), key.WithHelp("3", "dead letters")),
		Audit:     key.NewBinding(key.WithKeys("4"), key.WithHelp("4", "audit")),
		Hot:       key.NewBinding(key.WithKeys("5"), key.WithHelp("5", "hot keys")),
		Refresh:   key.NewBinding(key.WithKeys("ctrl+r"), key.WithHelp("ctrl+r", "refresh now")),
		Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "keys")),
		Find:      key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "find a key")),
		Groups:    key.NewBinding(key.WithKeys("0"), key.WithHelp("0", "all groups")),
	}
}

// listKeys are the moves shared by the list views.
type listKeys struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
}

func newListKeys() listKeys {
	return listKeys{
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "top")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "bottom")),
	}
}

func (k listKeys) all() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}
}

// move applies a list move to cursor in a list of n rows shown page rows
// at a time, and says whether msg was a move.
func (k listKeys) move(msg interface{ String() string }, cursor, n, page int) (int, bool) {
	switch {
	case key.Matches(msg, k.Up):
		cursor--
	case key.Matches(msg, k.Down):
		cursor++
	case key.Matches(msg, k.PageUp):
		cursor -= max(1, page)
	case key.Matches(msg, k.PageDown):
		cursor += max(1, page)
	case key.Matches(msg, k.Top):
		cursor = 0
	case key.Matches(msg, k.Bottom):
		cursor = n - 1
	default:
		return cursor, false
	}
	return max(0, min(cursor, n-1)), true
}

// readOnly disables action bindings: a disabled binding neither matches
// nor shows in the help.
func readOnly(on bool, bs ...*key.Binding) {
	for _, b := range bs {
		b.SetEnabled(!on)
	}
}

// keyHelp is the help of a view, with the global keys in its full form.
type keyHelp struct {
	view help.KeyMap
	full [][]key.Binding
}

func (k keyHelp) ShortHelp() []key.Binding { return k.view.ShortHelp() }

func (k keyHelp) FullHelp() [][]key.Binding {
	return append(append([][]key.Binding{}, k.view.FullHelp()...), k.full...)
}
