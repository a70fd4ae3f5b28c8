package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// producerTick is how often the producer sends what the rate allows.
const producerTick = 50 * time.Millisecond

// maxFiles bounds the files a tenant's generator remembers (to overwrite
// or delete them later).
const maxFiles = 30

// tenant is the producer's view of one tenant. Only the producer touches it.
type tenant struct {
	key      string
	sent     int      // events sent: the next event's seq
	files    []string // files it has, as far as the producer knows
	nextFile int
}

// producer sends the tenants' file events at the configured rate, with a
// burst from one tenant now and then. Tenants are not equally busy: their
// weights fall off like a power law, as customers of a real service do.
type producer struct {
	c       *partitionq.Client
	cfg     Config
	run     string
	led     *ledger
	rng     *rand.Rand
	tenants []*tenant
	cum     []float64 // cumulative weights, for picking a tenant
	bursts  int
}

func newProducer(c *partitionq.Client, cfg Config, run string, led *ledger) *producer {
	p := &producer{c: c, cfg: cfg, run: run, led: led,
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	width := max(3, len(strconv.Itoa(cfg.Tenants)))
	total := 0.0
	for i := range cfg.Tenants {
		p.tenants = append(p.tenants, &tenant{key: fmt.Sprintf("tenant-%0*d", width, i+1)})
		total += 1 / math.Pow(float64(i+1), 0.8)
		p.cum = append(p.cum, total)
	}
	return p
}

func (p *producer) keys() []string {
	out := make([]string, len(p.tenants))
	for i, t := range p.tenants {
		out[i] = t.key
	}
	return out
}

// pick chooses a tenant by weight.
func (p *producer) pick() *tenant {
	x := p.rng.Float64() * p.cum[len(p.cum)-1]
	return p.tenants[sort.SearchFloat64s(p.cum, x)]
}

var folders = []struct{ dir, base, ext string }{
	{"photos", "img", "jpg"}, {"docs", "report", "pdf"}, {"videos", "clip", "mp4"}, {"backups", "db", "tar.gz"},
}

// size is a file size between 1 KiB and 4 MiB, spread evenly on a log scale.
func (p *producer) size() int {
	return int(1024 * math.Pow(4096, p.rng.Float64()))
}

// newFile names a new file of t and remembers it.
func (p *producer) newFile(t *tenant, dir string) string {
	t.nextFile++
	f := folders[p.rng.IntN(len(folders))]
	if dir == "" {
		dir = f.dir
	}
	path := fmt.Sprintf("/%s/%s-%04d.%s", dir, f.base, t.nextFile, f.ext)
	t.files = append(t.files, path)
	if len(t.files) > maxFiles {
		t.files = t.files[len(t.files)-maxFiles:]
	}
	return path
}

// next makes t's next event: a new file, an overwrite or a delete of one it
// has.
func (p *producer) next(t *tenant) (typ string, pl payload) {
	pl = payload{Run: p.run, Seq: t.sent}
	r := p.rng.Float64()
	switch {
	case len(t.files) == 0 || r < 0.45:
		typ, pl.Path, pl.Size = FileCreated, p.newFile(t, ""), p.size()
	case r < 0.8:
		typ, pl.Path, pl.Size = FileOverwritten, t.files[p.rng.IntN(len(t.files))], p.size()
	default:
		i := p.rng.IntN(len(t.files))
		typ, pl.Path = FileDeleted, t.files[i]
		t.files = append(t.files[:i], t.files[i+1:]...)
	}
	t.sent++
	return typ, pl
}

// batch collects events to send together. Seqs are taken as events are
// made; if the send fails they are given back.
type batch struct {
	msgs   []partitionq.Message
	seqs   []int // each message's seq in its tenant's order
	counts map[*tenant]int
}

func (p *producer) add(b *batch, t *tenant, typ string, pl payload) {
	body, _ := json.Marshal(pl) // a struct of strings and ints: cannot fail
	b.msgs = append(b.msgs, partitionq.Message{Key: t.key, Type: typ, Payload: body})
	b.seqs = append(b.seqs, pl.Seq)
	if b.counts == nil {
		b.counts = map[*tenant]int{}
	}
	b.counts[t]++
}

// send sends b in one transaction, so that each tenant's events get ids in
// the order they were made. A send is not cut short by the producer's stop
// (the seqs would be uncertain): it has its own timeout.
func (p *producer) send(b *batch) error {
	if len(b.msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, err := p.c.SendBatch(ctx, p.cfg.Queue, b.msgs)
	if err != nil {
		for t, n := range b.counts {
			t.sent -= n
		}
		return fmt.Errorf("demo producer: send %d events: %w", len(b.msgs), err)
	}
	keys, ids := make([]string, len(b.msgs)), make([]int64, len(b.msgs))
	for i, m := range b.msgs {
		keys[i], ids[i] = m.Key, sent[i].ID
	}
	p.led.addSent(keys, b.seqs, ids)
	return nil
}

// BurstSize is how many events a folder upload of a tenant sends at once,
// at a rate of rate events per second: large files, enough to keep the
// tenant's slot busy for a few seconds (a hot key).
func BurstSize(rate float64) int { return max(100, int(5*rate)) }

// burst is one tenant uploading a folder: many events of one key at once.
func (p *producer) burst(b *batch) {
	t := p.tenants[p.rng.IntN(len(p.tenants))]
	p.bursts++
	dir := fmt.Sprintf("uploads/folder-%d", p.bursts)
	for range BurstSize(p.cfg.Rate) {
		size := int(1<<20 + p.rng.Float64()*(3<<20)) // 1 to 4 MiB
		pl := payload{Run: p.run, Seq: t.sent, Path: p.newFile(t, dir), Size: size, Bulk: true}
		t.sent++
		p.add(b, t, FileCreated, pl)
	}
}

// loop sends until ctx ends or a send fails.
func (p *producer) loop(ctx context.Context) error {
	tick := time.NewTicker(producerTick)
	defer tick.Stop()
	last := time.Now()
	var nextBurst time.Time
	if p.cfg.BurstEvery > 0 {
		nextBurst = last.Add(p.cfg.BurstEvery / 3)
	}
	budget := 0.0
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			budget += p.cfg.Rate * now.Sub(last).Seconds()
			last = now
			var b batch
			for ; budget >= 1; budget-- {
				t := p.pick()
				typ, pl := p.next(t)
				p.add(&b, t, typ, pl)
			}
			if !nextBurst.IsZero() && !now.Before(nextBurst) {
				p.burst(&b)
				nextBurst = nextBurst.Add(p.cfg.BurstEvery)
			}
			if err := p.send(&b); err != nil {
				return err
			}
		}
	}
}
