package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/partitionq/partitionq/internal/freshdb"
	"github.com/partitionq/partitionq/partitionq"
)

// producerQueue receives the producer runs; it has one group, never run.
const producerQueue = "producer"

// producer measures writing wl's rows: partitionq's Send (one event per
// call and transaction), SendBatch (all of them in one call: COPY into the
// queue's event table, as the bench's role may), SendBatch of 1,000 a call
// (one statement of insert_event outside a transaction), SendBatchTx of
// 1,000 a call in a transaction each (COPY), SendBatch of 1,000 with a
// dedup id on every message (send once: in a transaction, the ids claimed,
// the events inserted by COPY, the ids recorded) and with the same ids
// again (every message a duplicate), SendBatch by a role with only the
// engine's writer role (insert_event per event), and, on PgQ, COPY of the
// same rows into a plain table, the physical limit.
func (b *bench) producer(ctx context.Context, wl *Workload) error {
	pool, err := b.pool(ctx, b.on.db, 4)
	if err != nil {
		return err
	}
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
	if err != nil {
		pool.Close()
		return err
	}
	if _, err := client.Setup(ctx, partitionq.GroupSpec{Queue: producerQueue, Group: "sink", Slots: 1}); err != nil {
		pool.Close()
		return err
	}
	pool.Close()

	single := wl.prefix(wl.Name, b.cfg.SingleSend)
	b.add(b.produce(ctx, single, fmt.Sprintf("Send, one event a call (first %d events)", len(single.Events)), nil, func(c *partitionq.Client, _ *pgxpool.Pool, ms []partitionq.Message) error {
		for _, m := range ms {
			if _, err := c.Send(ctx, producerQueue, m); err != nil {
				return err
			}
		}
		return nil
	}))
	b.add(b.produce(ctx, wl, fmt.Sprintf("SendBatch, all %d in one call", len(wl.Events)), nil, func(c *partitionq.Client, _ *pgxpool.Pool, ms []partitionq.Message) error {
		_, err := c.SendBatch(ctx, producerQueue, ms)
		return err
	}))
	// Send once: the same batches with and without dedup ids, then the
	// dedup ids again (each message a duplicate: nothing inserted).
	byThousand := func(c *partitionq.Client, _ *pgxpool.Pool, ms []partitionq.Message) error {
		for start := 0; start < len(ms); start += dedupBatch {
			if _, err := c.SendBatch(ctx, producerQueue, ms[start:min(start+dedupBatch, len(ms))]); err != nil {
				return err
			}
		}
		return nil
	}
	withIDs := func(ms []partitionq.Message) {
		for i := range ms {
			ms[i].DedupID = fmt.Sprintf("%s-%d", wl.Name, i)
		}
	}
	b.add(b.produce(ctx, wl, "SendBatch of 1,000 a call", nil, byThousand))
	b.add(b.produce(ctx, wl, "SendBatchTx of 1,000 a call, a transaction each (COPY)", nil, func(c *partitionq.Client, pool *pgxpool.Pool, ms []partitionq.Message) error {
		for start := 0; start < len(ms); start += dedupBatch {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := c.SendBatchTx(ctx, tx, producerQueue, ms[start:min(start+dedupBatch, len(ms))])
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	b.add(b.produce(ctx, wl, "SendBatch of 1,000 a call, each with a dedup id", withIDs, byThousand))
	b.add(b.produce(ctx, wl, "SendBatch of 1,000 a call, the same dedup ids again (all duplicates)", withIDs, byThousand))
	writer := pgx.Identifier{b.cfg.DBPrefix + "_writer_" + b.on.engine}.Sanitize()
	b.add(b.produce(ctx, wl, fmt.Sprintf("SendBatch as a %s_writer role (insert_event per event)", b.on.engine), nil, func(c *partitionq.Client, pool *pgxpool.Pool, ms []partitionq.Message) error {
		if _, err := pool.Exec(ctx, "drop role if exists "+writer); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, "create role "+writer+" nologin in role "+b.on.engine+"_writer"); err != nil {
			return err
		}
		defer pool.Exec(context.WithoutCancel(ctx), "drop role if exists "+writer) // a leftover role is dropped by the next run
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "set local role "+writer); err != nil {
				return err
			}
			_, err := c.SendBatchTx(ctx, tx, producerQueue, ms)
			return err
		})
	}))
	if b.on.engine == freshdb.PgQ {
		b.add(b.copyPlain(ctx, wl))
	}
	return nil
}

// dedupBatch is the size of the SendBatch calls of the send-once rows.
const dedupBatch = 1000

// produce measures send on wl's events as messages (prep, when not nil,
// changes them before the measurement).
func (b *bench) produce(ctx context.Context, wl *Workload, config string, prep func([]partitionq.Message),
	send func(*partitionq.Client, *pgxpool.Pool, []partitionq.Message) error) *Result {
	res := &Result{Workload: "producer", System: SysPartitionq, Config: config, Events: len(wl.Events)}
	msgs := make([]partitionq.Message, len(wl.Events))
	for i, e := range wl.Events {
		msgs[i] = partitionq.Message{Key: e.Key, Type: "file", Payload: e.Payload}
	}
	if prep != nil {
		prep(msgs)
	}
	var elapsed time.Duration
	cost, err := b.measure(ctx, res, b.on.db, func() int { return len(msgs) }, func() error {
		pool, err := b.pool(ctx, b.on.db, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: b.on.engine})
		if err != nil {
			return err
		}
		start := time.Now()
		err = send(client, pool, msgs)
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(len(msgs), elapsed)
	return res
}
