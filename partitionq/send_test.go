package partitionq_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// A large batch is loaded with COPY into the queue's current event table
// when the session may (here: the superuser), and goes through
// insert_event otherwise (a role with the engine's writer role only, as
// producers are: pgq_writer, pgque_writer).
// The rows are the same either way, each id belongs to its own message and
// the ids rise in input order; the engine's own checks still apply. The
// server counts which engine functions each path called (track_functions).
func TestSendPathsWriteTheSameRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	buf := make([]byte, 4)
	_, _ = rand.Read(buf)
	role := "pq_send_path_" + hex.EncodeToString(buf)
	if _, err := b.pool.Exec(b.ctx, "create role "+role+" nologin in role "+b.db.Schema+"_writer"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := b.pool.Exec(b.ctx, "drop role "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})

	type row struct {
		ID                 int64
		Type, Data, Key    string
		Owner, Retry       *int32
		Ex2, Ex3, Ex4      *string
		AtTxStart, OfTheTx bool
	}
	// calls reads this backend's count of calls of the engine's insert
	// function (not yet reported: read before and after).
	calls := func(tx pgx.Tx) (n int64, err error) {
		err = tx.QueryRow(b.ctx, `select coalesce(sum(calls), 0) from pg_stat_xact_user_functions
			where schemaname = $1 and funcname = 'insert_event_raw'`, b.db.Schema).Scan(&n)
		return n, err
	}
	send := func(asRole string, ms []partitionq.Message) (ids []int64, engineCalls int64, rows []row) {
		t.Helper()
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, "set local track_functions = 'all'"); err != nil {
				return err
			}
			before, err := calls(tx)
			if err != nil {
				return err
			}
			if asRole != "" {
				if _, err := tx.Exec(b.ctx, "set local role "+asRole); err != nil {
					return err
				}
			}
			sent, err := b.client.SendBatchTx(b.ctx, tx, "q", ms)
			if err != nil {
				return err
			}
			ids = resultIDs(sent)
			if _, err := tx.Exec(b.ctx, "reset role"); err != nil {
				return err
			}
			after, err := calls(tx)
			if err != nil {
				return err
			}
			engineCalls = after - before
			// ev_txid: bigint on PgQ, xid8 on PgQue; as text, both are the
			// transaction's full id.
			rs, err := tx.Query(b.ctx, b.db.SQL(`
				select ev_id, ev_type, ev_data, ev_extra1, ev_owner, ev_retry, ev_extra2, ev_extra3, ev_extra4,
				       ev_time = now(), ev_txid::text = pg_current_xact_id()::text
				  from pgq.event_template where ev_id = any($1)`), ids)
			if err != nil {
				return err
			}
			rows, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.ID, &x.Type, &x.Data, &x.Key, &x.Owner, &x.Retry, &x.Ex2, &x.Ex3, &x.Ex4, &x.AtTxStart, &x.OfTheTx)
				return x, err
			})
			return err
		})
		if err != nil {
			t.Fatalf("send as %q: %v", asRole, err)
		}
		return ids, engineCalls, rows
	}
	var ms []partitionq.Message
	for i := range engine.BulkInsertMin + 36 {
		ms = append(ms, partitionq.Message{Key: fmt.Sprintf("tenant-%d", i%7), Type: []string{"FileCreated", "FileOverwritten", "FileDeleted"}[i%3],
			Payload: []byte(fmt.Sprintf(`{"path":"/f%d"}`, i))})
	}
	check := func(path string, ids []int64, rows []row) {
		t.Helper()
		if len(ids) != len(ms) || len(rows) != len(ms) {
			t.Fatalf("%s: %d ids, %d rows, want %d", path, len(ids), len(rows), len(ms))
		}
		byID := map[int64]row{}
		for _, r := range rows {
			byID[r.ID] = r
		}
		for i, m := range ms {
			if i > 0 && ids[i] <= ids[i-1] {
				t.Fatalf("%s: ids do not rise in input order at %d: %d after %d", path, i, ids[i], ids[i-1])
			}
			want := row{ID: ids[i], Type: m.Type, Data: string(m.Payload), Key: m.Key, AtTxStart: true, OfTheTx: true}
			if got := byID[ids[i]]; got != want {
				t.Fatalf("%s: message %d: row %+v, want %+v", path, i, got, want)
			}
		}
	}
	bulkIDs, n, rows := send("", ms)
	if n != 0 {
		t.Errorf("superuser: insert_event_raw called %d times, want 0 (COPY)", n)
	}
	check("COPY", bulkIDs, rows)
	viaIDs, n, rows := send(role, ms)
	if n != int64(len(ms)) {
		t.Errorf("%s_writer role: insert_event_raw called %d times, want %d (insert_event)", b.db.Schema, n, len(ms))
	}
	check("insert_event", viaIDs, rows)
	if viaIDs[0] <= bulkIDs[len(bulkIDs)-1] {
		t.Errorf("ids of the second batch start at %d, not after the first's last %d (one sequence)", viaIDs[0], bulkIDs[len(bulkIDs)-1])
	}

	// The engine's own checks apply: its limit of events per transaction
	// (PgQ only: PgQue has none), and a queue closed to inserts (set in
	// the queue's row, as an administrator does).
	sets := []string{"queue_disable_insert = true"}
	if b.db.Schema == "pgq" {
		sets = []string{"queue_per_tx_limit = 5", "queue_per_tx_limit = null, queue_disable_insert = true"}
	}
	for _, set := range sets {
		if _, err := b.pool.Exec(b.ctx, b.db.SQL("update pgq.queue set "+set+" where queue_name = 'q'")); err != nil {
			t.Fatal(err)
		}
		if ids, err := b.client.SendBatch(b.ctx, "q", ms); err == nil {
			t.Errorf("with %s, a batch of %d was sent: ids %v", set, len(ms), ids[:3])
		}
	}
}
