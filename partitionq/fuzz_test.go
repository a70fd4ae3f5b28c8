package partitionq_test

// Fuzz tests of the validation of names, keys, types and payloads, and of
// what a send or a setup writes when its input is hostile. The seed corpus
// is in testdata/fuzz/<FuzzName>/ and runs with every go test; make fuzz
// runs each target with -fuzz for a while (FUZZTIME).
//
// Properties:
//   - a value is accepted exactly when it meets the documented rule, checked
//     here by an independent implementation of the rule;
//   - every rejection is a *ValidationError matching ErrInvalid that names
//     the field, says what is wrong and what to do, in a short, printable,
//     valid UTF-8 message (hostile bytes are quoted, never echoed raw or in
//     full);
//   - a rejected send or setup writes nothing; an accepted one stores the
//     strings exactly as given, never as SQL.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// maxErrLen bounds an error message: a clear error quotes at most a short
// prefix of the offending value.
const maxErrLen = 400

// checkRejection checks that err is a clear validation error about field.
func checkRejection(t *testing.T, err error, field string) {
	t.Helper()
	if !errors.Is(err, partitionq.ErrInvalid) {
		t.Fatalf("rejection is not ErrInvalid: %v", err)
	}
	var ve *partitionq.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("rejection is not a *ValidationError: %v", err)
	}
	if ve.Field != field {
		t.Fatalf("rejection names field %q, want %q: %v", ve.Field, field, err)
	}
	if ve.Problem == "" || ve.Fix == "" {
		t.Fatalf("rejection does not say what is wrong and what to do: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, field) {
		t.Fatalf("message does not name %q: %s", field, msg)
	}
	if len(msg) > maxErrLen {
		t.Fatalf("message is %d bytes long (more than %d): %.200s...", len(msg), maxErrLen, msg)
	}
	if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\x1b\r\n") {
		t.Fatalf("message holds raw control or invalid bytes: %q", msg)
	}
}

// textOK is the documented rule for keys, types and payloads, written
// independently of the library: at most max bytes of valid UTF-8, no NUL.
func textOK(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || r == 0 {
			return false
		}
		i += n
	}
	return true
}

// nameOK is the documented rule for queue and group names: 1 to
// MaxNameLen bytes of ASCII letters, digits, '_', '.' and '-', starting
// with a letter or digit.
func nameOK(s string) bool {
	if s == "" || len(s) > partitionq.MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"tenant-1", "", "a\x00b", "\xff", strings.Repeat("k", partitionq.MaxKeyLen), strings.Repeat("k", partitionq.MaxKeyLen+1),
		"'; drop table pgq.queue; --", "ключ", "\U0001F600", "\ufffd", "\x1b[2J"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := partitionq.ValidateKey(key)
		want := key != "" && textOK(key, partitionq.MaxKeyLen)
		switch {
		case want && err != nil:
			t.Fatalf("key %q rejected: %v", key, err)
		case !want && err == nil:
			t.Fatalf("key %q accepted", key)
		case err != nil:
			checkRejection(t, err, "key")
		}
	})
}

func FuzzMessageValidate(f *testing.F) {
	f.Add("k", "FileCreated", []byte(`{"path":"/a"}`))
	f.Add("k", "", []byte(nil))
	f.Add("", "T", []byte("x"))
	f.Add("k", "T\x00", []byte("x"))
	f.Add("k", "T", []byte("x\x00y"))
	f.Add("k", "T", []byte{0xc3, 0x28})
	f.Add("k", strings.Repeat("t", partitionq.MaxTypeLen+1), []byte("x"))
	f.Add("k'--", "'); drop table partitionq.dead_letter; --", []byte("$$ select 1 $$"))
	f.Fuzz(func(t *testing.T, key, typ string, payload []byte) {
		err := partitionq.Message{Key: key, Type: typ, Payload: payload}.Validate()
		field := badField(key, typ, payload)
		switch {
		case field == "" && err != nil:
			t.Fatalf("message %q %q %q rejected: %v", key, typ, payload, err)
		case field != "" && err == nil:
			t.Fatalf("message %q %q %q accepted, want its %s rejected", key, typ, payload, field)
		case err != nil:
			checkRejection(t, err, field)
		}
	})
}

// badField is the first field of a message that breaks the documented
// rules, or "".
func badField(key, typ string, payload []byte) string {
	switch {
	case key == "" || !textOK(key, partitionq.MaxKeyLen):
		return "key"
	case !textOK(typ, partitionq.MaxTypeLen):
		return "type"
	case !textOK(string(payload), 1<<30):
		return "payload"
	}
	return ""
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"files", "a.b_c-d", "", "-x", "_x", ".x", "a b", "é", "g#1/2", strings.Repeat("a", partitionq.MaxNameLen),
		strings.Repeat("a", partitionq.MaxNameLen+1), "q'; drop table x; --", "q\x00", "Q1", "pgq.queue"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := nameOK(name)
		for field, err := range map[string]error{"queue name": partitionq.ValidateQueueName(name), "group name": partitionq.ValidateGroupName(name)} {
			switch {
			case want && err != nil:
				t.Fatalf("%s %q rejected: %v", field, name, err)
			case !want && err == nil:
				t.Fatalf("%s %q accepted", field, name)
			case err != nil:
				checkRejection(t, err, field)
			}
		}
	})
}

// fuzzDB is one database for a fuzz target, with queue "q" and a canary
// table that injected SQL would drop.
type fuzzDB struct {
	db     pgtest.DB
	pool   *pgxpool.Pool
	client *partitionq.Client
	ctx    context.Context
}

func newFuzzDB(f *testing.F) *fuzzDB {
	f.Helper()
	db := pgtest.New(f)
	pool := pgtest.Pool(f, db, 4)
	ctx := context.Background()
	c, err := partitionq.NewClient(ctx, pool, partitionq.Config{})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := c.Setup(ctx, partitionq.GroupSpec{Queue: "q", Group: "g", Slots: 2}); err != nil {
		f.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `create table canary (x int); insert into canary values (1)`); err != nil {
		f.Fatal(err)
	}
	return &fuzzDB{db: db, pool: pool, client: c, ctx: ctx}
}

func (d *fuzzDB) canaryAlive(t *testing.T) {
	t.Helper()
	var n int
	if err := d.pool.QueryRow(d.ctx, `select count(*) from canary`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the canary table was touched: %d rows, %v", n, err)
	}
}

// count is the number of events in queue "q" and of queues.
func (d *fuzzDB) count(t *testing.T) (events, queues int) {
	t.Helper()
	if err := d.pool.QueryRow(d.ctx, d.db.SQL(`select (select count(*) from pgq.event_1), (select count(*) from pgq.queue)`)).Scan(&events, &queues); err != nil {
		t.Fatal(err)
	}
	return events, queues
}

// A batch of three messages whose middle one is fuzzed: a bad one rejects
// the whole batch with a *BatchError naming index 1 and writes nothing; a
// good one is stored exactly as given.
func FuzzSendBatch(f *testing.F) {
	d := newFuzzDB(f)
	f.Add("tenant-1", "FileCreated", []byte(`{"path":"/a"}`))
	f.Add("'; drop table canary; --", "') or 1=1; --", []byte(`$$; drop table canary; $$`))
	f.Add("k", "T", []byte("a\x00b"))
	f.Add("k\x00", "T", []byte("x"))
	f.Add("\xff", "T", []byte("x"))
	f.Add("k", "T", []byte{0xff, 0xfe})
	f.Add(`\x27 e'\\'`, "%s%d", []byte(`\0`))
	f.Add("ev_extra1) or (true", "T", []byte(nil))
	f.Fuzz(func(t *testing.T, key, typ string, payload []byte) {
		m := partitionq.Message{Key: key, Type: typ, Payload: payload}
		before, _ := d.count(t)
		ids, err := d.client.SendBatch(d.ctx, "q", []partitionq.Message{{Key: "before", Payload: []byte("1")}, m, {Key: "after", Payload: []byte("3")}})
		after, queues := d.count(t)
		d.canaryAlive(t)
		if queues != 1 {
			t.Fatalf("%d queues after a send", queues)
		}
		if field := badField(key, typ, payload); field != "" {
			var be *partitionq.BatchError
			if !errors.As(err, &be) || be.Index != 1 || !strings.HasPrefix(err.Error(), "message 1: ") {
				t.Fatalf("bad message %q %q %q: %v, want a *BatchError for index 1", key, typ, payload, err)
			}
			checkRejection(t, be.Err, field)
			if after != before {
				t.Fatalf("a rejected batch wrote %d events", after-before)
			}
			return
		}
		if err != nil || len(ids) != 3 {
			t.Fatalf("good message %q %q %q: %v (ids %v)", key, typ, payload, err, ids)
		}
		if after != before+3 {
			t.Fatalf("a batch of 3 wrote %d events", after-before)
		}
		var gotKey, gotType, gotData string
		if err := d.pool.QueryRow(d.ctx, d.db.SQL(`select ev_extra1, ev_type, ev_data from pgq.event_1 where ev_id = $1`), ids[1].ID).Scan(&gotKey, &gotType, &gotData); err != nil {
			t.Fatal(err)
		}
		if gotKey != key || gotType != typ || gotData != string(payload) {
			t.Fatalf("stored as %q %q %q, sent %q %q %q", gotKey, gotType, gotData, key, typ, payload)
		}
	})
}

// Setup with fuzzed names: a bad queue or group name (or N) is rejected
// before anything is written; good names create exactly that queue and
// group.
func FuzzSetup(f *testing.F) {
	d := newFuzzDB(f)
	f.Add("files", "indexer", 4)
	f.Add("q2", "g'; drop table canary; --", 2)
	f.Add("q3'; drop table canary; --", "g", 2)
	f.Add("ok-queue", "", 1)
	f.Add("ok-queue", "bad group", 1)
	f.Add("ok.queue", "ok_group", 0)
	f.Add("ok.queue", "ok_group", partitionq.MaxSlots+1)
	f.Add("g#1", "g#1/2", 1)
	f.Fuzz(func(t *testing.T, queue, group string, slots int) {
		if slots > 16 { // keep accepted setups cheap; the bound itself is checked by the seeds
			slots = slots%16 + 1
		}
		var queuesBefore, consumersBefore int
		if err := d.pool.QueryRow(d.ctx, d.db.SQL(`select (select count(*) from pgq.queue), (select count(*) from pgq.subscription)`)).Scan(&queuesBefore, &consumersBefore); err != nil {
			t.Fatal(err)
		}
		res, err := d.client.Setup(d.ctx, partitionq.GroupSpec{Queue: queue, Group: group, Slots: slots})
		d.canaryAlive(t)
		var queuesAfter, consumersAfter int
		if err := d.pool.QueryRow(d.ctx, d.db.SQL(`select (select count(*) from pgq.queue), (select count(*) from pgq.subscription)`)).Scan(&queuesAfter, &consumersAfter); err != nil {
			t.Fatal(err)
		}
		var field string
		switch {
		case !nameOK(queue):
			field = "queue name"
		case !nameOK(group):
			field = "group name"
		case slots < 1 || slots > partitionq.MaxSlots:
			field = "number of slots"
		}
		if field != "" {
			if err == nil {
				t.Fatalf("setup of %q %q %d accepted, want its %s rejected", queue, group, slots, field)
			}
			checkRejection(t, err, field)
			if queuesAfter != queuesBefore || consumersAfter != consumersBefore {
				t.Fatalf("a rejected setup wrote: queues %d -> %d, consumers %d -> %d", queuesBefore, queuesAfter, consumersBefore, consumersAfter)
			}
			return
		}
		if queue == "q" && group == "g" && slots != 2 {
			var mm *partitionq.SlotCountMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("setup of q/g with %d slots: %v, want a *SlotCountMismatchError", slots, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("setup of %q %q %d: %v", queue, group, slots, err)
		}
		if res.Queue != queue || res.Group.Group != group || res.Slots != slots {
			t.Fatalf("setup of %q %q %d made %+v", queue, group, slots, res.Group)
		}
		var stored string
		if err := d.pool.QueryRow(d.ctx, d.db.SQL(`select queue_name from pgq.queue where queue_name = $1`), queue).Scan(&stored); err != nil {
			t.Fatalf("queue %q not stored under its name: %v", queue, err)
		}
		if queue != "q" { // keep the database small while fuzzing
			if _, err := d.pool.Exec(d.ctx, d.db.SQL(`select pgq.drop_queue($1, true)`), queue); err != nil {
				t.Fatal(err)
			}
		}
	})
}
