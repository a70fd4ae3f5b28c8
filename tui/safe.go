package tui

import (
	"strings"

	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// Every text of a snapshot that comes from tenants, producers, handlers or
// operators (keys, types, payloads, errors, reasons, actors, roles, worker
// names) reaches the screen through one of these, which apply the one
// escaping rule of partitionq/termsafe (the CLI applies the same): nothing
// can act on the operator's terminal, and nothing breaks a row or the
// frame. Actions use the texts as the library returned them.

// line is an untrusted text on one line: a cell, a title, a result line.
// Long cells are clipped by row, keeping both ends.
func line(s string) string { return termsafe.Line(s) }

// text is an untrusted text shown whole, on lines of its own (an error in
// the key detail): the same rule, with its newlines as line breaks.
func text(s string) string { return termsafe.Text(s) }

// clip shortens a text made safe by line to width cells, keeping its start
// and its end (termsafe.Clip).
func clip(s string, width int) string { return termsafe.Clip(s, width) }

// lines splits a text made safe by text into its lines.
func lines(s string) []string { return strings.Split(s, "\n") }
