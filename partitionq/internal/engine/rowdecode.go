package engine

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A read's rows are the hot path of a worker: W1's CPU profile had pgx's
// generic Scan of the eleven columns, its growing slice and the event
// copies at about a fifth of partitionq's client CPU per event. The
// decoder below reads the wire values of the read's known column types
// directly; for any other shape it returns false and the caller scans.

// The read's columns (readSQL): slot, ev_id, ev_time, ev_retry, ev_type,
// ev_data, ev_extra1, ev_extra2, ev_extra3, ev_extra4, ev_extra1 is null.
var readOIDs = [...]uint32{pgtype.Int8OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int4OID,
	pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.BoolOID}

// rawReadable reports whether the rows' columns are the read's, integers,
// time and flag in binary (text is the same in either format).
func rawReadable(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(readOIDs) {
		return false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != readOIDs[i] {
			return false
		}
		if fd.DataTypeOID != pgtype.TextOID && fd.Format != pgtype.BinaryFormatCode {
			return false
		}
	}
	return true
}

// postgresEpoch is 2000-01-01 UTC, where timestamptz counts from, in
// microseconds since the Unix epoch.
const postgresEpoch = 946684800 * 1_000_000

// types interns event types: a batch has few (FileCreated, ...), so an
// event's type costs no allocation after the first of its kind. Bounded:
// past typesMax distinct types a read stops remembering new ones.
type types map[string]string

const typesMax = 256

func (t types) of(b []byte) string {
	if s, ok := t[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if len(t) < typesMax {
		t[s] = s
	}
	return s
}

// decodeRaw fills ev from one row's wire values (rawReadable's shape). It
// reports false for a value it does not expect (a NULL where the query
// has none, an infinite time): the caller then scans the row.
func decodeRaw(vals [][]byte, ev *SlotEvent, tt types) bool {
	for i, v := range vals {
		if v == nil && (i < 7 || i == 10) { // only the extras 2-4 may be NULL
			return false
		}
	}
	if len(vals[0]) != 8 || len(vals[1]) != 8 || len(vals[2]) != 8 || len(vals[3]) != 4 || len(vals[10]) != 1 {
		return false
	}
	us := int64(binary.BigEndian.Uint64(vals[2]))
	if us == infinityMicros || us == -infinityMicros-1 {
		return false
	}
	us += postgresEpoch
	ev.Slot = int(int64(binary.BigEndian.Uint64(vals[0])))
	ev.ID = int64(binary.BigEndian.Uint64(vals[1]))
	ev.Time = time.Unix(us/1_000_000, (us%1_000_000)*1000)
	ev.Retry = int32(binary.BigEndian.Uint32(vals[3]))
	ev.Type = tt.of(vals[4])
	ev.Data = string(vals[5])
	ev.Key = string(vals[6])
	ev.Extra2, ev.Extra3, ev.Extra4 = optText(vals[7]), optText(vals[8]), optText(vals[9])
	ev.NoKey = vals[10][0] != 0
	return true
}

// infinityMicros is timestamptz's 'infinity' (math.MaxInt64; '-infinity'
// is math.MinInt64).
const infinityMicros = 1<<63 - 1

func optText(v []byte) *string {
	if v == nil {
		return nil
	}
	s := string(v)
	return &s
}

// scanRead scans one row of a read the generic way.
func scanRead(r pgx.Rows, ev *SlotEvent) error {
	return r.Scan(&ev.Slot, &ev.ID, &ev.Time, &ev.Retry, &ev.Type, &ev.Data, &ev.Key, &ev.Extra2, &ev.Extra3, &ev.Extra4, &ev.NoKey)
}
