package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"time"
)

// Event is one event of a workload: the seq-th event of its key.
type Event struct {
	Key     string
	KeyIdx  int32
	Seq     int
	Fail    bool // its first handling fails (W3)
	Payload []byte
}

// Workload is a list of events prepared once and given to every system.
type Workload struct {
	Name    string // W1, W2, W3, LAT
	Title   string
	Events  []Event
	Keys    []string       // by key index
	PerKey  map[string]int // events per key, for the order checker
	Handler time.Duration  // what the handler waits per event
	// bySeq[keyIdx][seq] is the event's index, to find an event from its
	// payload's key and seq.
	bySeq [][]int32
}

// fileEvent is the ~200-byte JSON payload: a file event of a tenant.
type fileEvent struct {
	Type   string `json:"type"`
	Tenant string `json:"tenant"`
	Seq    int    `json:"seq"`
	FileID string `json:"file_id"`
	Path   string `json:"path"`
	Size   int    `json:"size"`
	Mime   string `json:"mime"`
	SHA256 string `json:"sha256"`
}

var (
	fileTypes = []string{"file.created", "file.updated", "file.renamed", "file.deleted"}
	mimes     = []string{"application/pdf", "image/png", "text/csv", "application/zip"}
	exts      = []string{"pdf", "png", "csv", "zip"}
)

// generate builds a workload of n events over keys keys; pick chooses the
// key index of each event.
func generate(name, title string, n, keys int, handler time.Duration, failRate float64, r *rand.Rand, pick func() int) *Workload {
	wl := &Workload{Name: name, Title: title, Handler: handler, PerKey: map[string]int{}}
	wl.Keys = make([]string, keys)
	for i := range wl.Keys {
		wl.Keys[i] = fmt.Sprintf("tenant-%04d", i)
	}
	wl.bySeq = make([][]int32, keys)
	wl.Events = make([]Event, n)
	for i := range wl.Events {
		k := pick()
		key := wl.Keys[k]
		seq := wl.PerKey[key]
		wl.PerKey[key] = seq + 1
		m := r.Intn(len(mimes))
		p, _ := json.Marshal(fileEvent{
			Type: fileTypes[r.Intn(len(fileTypes))], Tenant: key, Seq: seq,
			FileID: fmt.Sprintf("f-%08x", r.Uint32()),
			Path:   fmt.Sprintf("/tenants/%s/inbox/2024-%02d/doc-%06d.%s", key, 1+r.Intn(12), seq, exts[m]),
			Size:   1 + r.Intn(50_000_000), Mime: mimes[m],
			SHA256: fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()),
		})
		wl.Events[i] = Event{Key: key, KeyIdx: int32(k), Seq: seq, Fail: failRate > 0 && r.Float64() < failRate, Payload: p}
		wl.bySeq[k] = append(wl.bySeq[k], int32(i))
	}
	return wl
}

// uniformWorkload spreads n events evenly at random over keys keys.
func uniformWorkload(name, title string, n, keys int, handler time.Duration, seed int64) *Workload {
	r := rand.New(rand.NewSource(seed))
	return generate(name, title, n, keys, handler, 0, r, func() int { return r.Intn(keys) })
}

// zipfWorkload draws keys from a Zipf distribution (a few hot tenants) and
// marks failRate of the events to fail once.
func zipfWorkload(name, title string, n, keys int, handler time.Duration, s, v, failRate float64, seed int64) *Workload {
	r := rand.New(rand.NewSource(seed))
	z := rand.NewZipf(r, s, v, uint64(keys-1))
	// Key 0 is not always the hottest: shuffle which tenant is hot.
	perm := r.Perm(keys)
	return generate(name, title, n, keys, handler, failRate, r, func() int { return perm[z.Uint64()] })
}

// prefix returns a workload of the first n events of wl (every key's events
// stay a prefix of its own, so seqs stay valid).
func (wl *Workload) prefix(name string, n int) *Workload {
	if n >= len(wl.Events) {
		return wl
	}
	out := &Workload{Name: name, Title: wl.Title, Handler: wl.Handler, Keys: wl.Keys, PerKey: map[string]int{},
		Events: wl.Events[:n], bySeq: make([][]int32, len(wl.Keys))}
	for i, e := range out.Events {
		out.PerKey[e.Key]++
		out.bySeq[e.KeyIdx] = append(out.bySeq[e.KeyIdx], int32(i))
	}
	return out
}

// index finds an event from its key and seq; -1 when unknown.
func (wl *Workload) index(key string, seq int) int {
	k := -1
	if len(key) == len("tenant-0000") {
		n := 0
		for _, c := range key[len("tenant-"):] {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		k = n
	}
	if k < 0 || k >= len(wl.bySeq) || seq < 0 || seq >= len(wl.bySeq[k]) || wl.Keys[k] != key {
		return -1
	}
	return int(wl.bySeq[k][seq])
}

// indexOfPayload finds an event from its JSON payload.
func (wl *Workload) indexOfPayload(p []byte) int {
	var f struct {
		Tenant string `json:"tenant"`
		Seq    int    `json:"seq"`
	}
	if json.Unmarshal(p, &f) != nil {
		return -1
	}
	return wl.index(f.Tenant, f.Seq)
}

// Skew describes how concentrated a workload's keys are.
type Skew struct {
	HotKey      string
	HotEvents   int
	HotFails    int
	Top10Share  float64
	KeysUsed    int
	Fails       int
	MeanPayload int
}

func (wl *Workload) skew() Skew {
	type kc struct {
		key      string
		n, fails int
	}
	counts := map[string]*kc{}
	s := Skew{}
	bytes := 0
	for _, e := range wl.Events {
		c := counts[e.Key]
		if c == nil {
			c = &kc{key: e.Key}
			counts[e.Key] = c
		}
		c.n++
		if e.Fail {
			c.fails++
			s.Fails++
		}
		bytes += len(e.Payload)
	}
	list := make([]*kc, 0, len(counts))
	for _, c := range counts {
		list = append(list, c)
	}
	sort.Slice(list, func(i, j int) bool {
		return list[i].n > list[j].n || (list[i].n == list[j].n && list[i].key < list[j].key)
	})
	s.KeysUsed = len(list)
	if len(list) > 0 {
		s.HotKey, s.HotEvents, s.HotFails = list[0].key, list[0].n, list[0].fails
	}
	top := 0
	for i := 0; i < 10 && i < len(list); i++ {
		top += list[i].n
	}
	if len(wl.Events) > 0 {
		s.Top10Share = float64(top) / float64(len(wl.Events))
		s.MeanPayload = bytes / len(wl.Events)
	}
	return s
}

// orderedBound is the fastest any per-key ordered system can drain the
// workload with conc handlers at once: no faster than conc handlers allow,
// and no faster than its busiest key, whose events (and the backoff of its
// failures) run one after another.
func (wl *Workload) orderedBound(conc int, backoff time.Duration) float64 {
	if wl.Handler <= 0 {
		return 0
	}
	perKey := map[string]time.Duration{}
	var longest time.Duration
	for _, e := range wl.Events {
		d := wl.Handler
		if e.Fail {
			d += wl.Handler + backoff
		}
		perKey[e.Key] += d
		longest = max(longest, perKey[e.Key])
	}
	keys := len(perKey)
	total := time.Duration(len(wl.Events)) * wl.Handler
	byConc := total / time.Duration(min(conc, keys))
	return float64(len(wl.Events)) / max(byConc, longest).Seconds()
}

// writeJSONL writes the workload for the Node.js side: one line per event,
// [key, seq, fail (0/1), payload].
func (wl *Workload) writeJSONL(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, e := range wl.Events {
		fail := 0
		if e.Fail {
			fail = 1
		}
		line, _ := json.Marshal([]any{e.Key, e.Seq, fail, string(e.Payload)})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
