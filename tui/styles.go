package tui

import "github.com/charmbracelet/lipgloss"

// styles are the console's styles. Colour is never the only signal: every
// state also has a word or a mark, so the console reads the same on a
// monochrome terminal (and in the golden files, which use no colour).
type styles struct {
	title     lipgloss.Style
	dim       lipgloss.Style
	header    lipgloss.Style // table header rows
	selected  lipgloss.Style
	ok        lipgloss.Style
	warn      lipgloss.Style
	crit      lipgloss.Style
	tab       lipgloss.Style
	activeTab lipgloss.Style
	box       lipgloss.Style // the confirm dialog
	label     lipgloss.Style
	banner    lipgloss.Style // the database-unreachable line
}

func defaultStyles() styles {
	return styles{
		title:     lipgloss.NewStyle().Bold(true),
		dim:       lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "245", Dark: "243"}),
		header:    lipgloss.NewStyle().Bold(true).Foreground(lipgloss.AdaptiveColor{Light: "240", Dark: "250"}),
		selected:  lipgloss.NewStyle().Reverse(true),
		ok:        lipgloss.NewStyle().Foreground(lipgloss.Color("2")),
		warn:      lipgloss.NewStyle().Foreground(lipgloss.Color("3")),
		crit:      lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		tab:       lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "240", Dark: "248"}),
		activeTab: lipgloss.NewStyle().Bold(true).Underline(true),
		box:       lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1),
		label:     lipgloss.NewStyle().Bold(true),
		banner:    lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
	}
}

// severity orders how bad a state is; it picks the style of a row or line.
type severity int

const (
	sevNone severity = iota
	sevOK
	sevWarn
	sevCrit
)

func (s styles) of(sev severity) lipgloss.Style {
	switch sev {
	case sevOK:
		return s.ok
	case sevWarn:
		return s.warn
	case sevCrit:
		return s.crit
	}
	return lipgloss.NewStyle()
}
