package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// producerQueue receives the producer runs; it has one group, never run.
const producerQueue = "producer"

// producer measures writing wl's rows: partitionq's Send (one event per
// call and transaction), SendBatch (all of them in one call), and COPY of
// the same rows into a plain table, the physical limit.
func (b *bench) producer(ctx context.Context, wl *Workload) error {
	pool, err := b.pool(ctx, b.pgqDB, 4)
	if err != nil {
		return err
	}
	client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: "pgq"})
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
	b.add(b.produce(ctx, single, fmt.Sprintf("Send, one event a call (first %d events)", len(single.Events)), func(c *partitionq.Client, ms []partitionq.Message) error {
		for _, m := range ms {
			if _, err := c.Send(ctx, producerQueue, m); err != nil {
				return err
			}
		}
		return nil
	}))
	b.add(b.produce(ctx, wl, fmt.Sprintf("SendBatch, all %d in one call", len(wl.Events)), func(c *partitionq.Client, ms []partitionq.Message) error {
		_, err := c.SendBatch(ctx, producerQueue, ms)
		return err
	}))
	b.add(b.copyPlain(ctx, wl))
	return nil
}

func (b *bench) produce(ctx context.Context, wl *Workload, config string, send func(*partitionq.Client, []partitionq.Message) error) *Result {
	res := &Result{Workload: "producer", System: SysPartitionq, Config: config, Events: len(wl.Events)}
	msgs := make([]partitionq.Message, len(wl.Events))
	for i, e := range wl.Events {
		msgs[i] = partitionq.Message{Key: e.Key, Type: "file", Payload: e.Payload}
	}
	var elapsed time.Duration
	cost, err := b.measure(ctx, b.pgqDB, func() int { return len(msgs) }, func() error {
		pool, err := b.pool(ctx, b.pgqDB, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err := partitionq.NewClient(ctx, pool, partitionq.Config{EngineSchema: "pgq"})
		if err != nil {
			return err
		}
		start := time.Now()
		err = send(client, msgs)
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		res.Err = err.Error()
	}
	res.Cost, res.Seconds, res.Rate = cost, elapsed.Seconds(), rate(len(msgs), elapsed)
	return res
}
