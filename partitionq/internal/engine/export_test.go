package engine

import "github.com/jackc/pgx/v5"

// RawReadable, DecodeRaw and ScanRead are the read's two row decoders.
func RawReadable(rows pgx.Rows) bool { return rawReadable(rows.FieldDescriptions()) }

func DecodeRaw(vals [][]byte, ev *SlotEvent) bool { return decodeRaw(vals, ev, types{}) }

func ScanRead(rows pgx.Rows, ev *SlotEvent) error { return scanRead(rows, ev) }

// Decoded counts the rows the cursor decoded from their wire values.
func Decoded(c *Cursor) int { return c.decoded }
