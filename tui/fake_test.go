package tui

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// fakeClient implements Client for the pure model tests: it answers with
// the fixed incident data and records the actions asked of it. Everything
// else (the client adapter, the end-to-end run) uses the real database.
type fakeClient struct {
	mu       sync.Mutex
	err      error                         // every read fails with it when set
	status   func() partitionq.GroupStatus // the status read, when set (else the incident's)
	blocked  []partitionq.BlockedKey
	actions  []string                // "skip tenant-7 #48211 reason"
	result   partitionq.ActionResult // returned by skip, retry now and quarantine
	replay   partitionq.ReplayResult
	actErr   error
	previews []string // keys previewed
	keys     []string // keys looked up (Key)
}

func newFake() *fakeClient { return &fakeClient{blocked: incidentBlocked()} }

func (f *fakeClient) Status(ctx context.Context, queue, group string) (partitionq.GroupStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status != nil {
		return f.status(), f.err
	}
	return incidentStatus(0), f.err
}

func (f *fakeClient) BlockedKeys(ctx context.Context, queue, group string) ([]partitionq.BlockedKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]partitionq.BlockedKey(nil), f.blocked...), f.err
}

func (f *fakeClient) Preview(ctx context.Context, queue, group, key string, limit int) ([]partitionq.PreviewEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.previews = append(f.previews, key)
	for _, b := range f.blocked {
		if b.Key == key {
			if key == "tenant-7" {
				return tenant7Preview(), f.err
			}
			return []partitionq.PreviewEvent{{ID: b.Head.ID, Type: b.Head.Type, Payload: b.Head.Payload, Time: b.Head.Time, Head: true}}, f.err
		}
	}
	return nil, partitionq.ErrNotBlocked
}

func (f *fakeClient) act(a partitionq.ActionRequest) (partitionq.ActionResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, fmt.Sprintf("%s %s #%d %s", a.Action, a.Key, a.HeadID, a.Reason))
	r := f.result
	r.Key = a.Key
	return r, f.actErr
}

func (f *fakeClient) done() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}

// Act records the action by its audit name ("skip", "retry", "quarantine").
func (f *fakeClient) Act(ctx context.Context, r partitionq.ActionRequest) (partitionq.ActionResult, error) {
	return f.act(r)
}

func (f *fakeClient) DeadLetters(ctx context.Context, q partitionq.DeadLetterQuery) ([]partitionq.DeadLetter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return incidentDeadMatching(q), f.err
}

func (f *fakeClient) Replay(ctx context.Context, r partitionq.ReplayRequest) (partitionq.ReplayResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, fmt.Sprintf("replay %d %s", r.ID, r.Reason))
	return f.replay, f.actErr
}

func (f *fakeClient) HotKeys(ctx context.Context, queue, group string, top int) (partitionq.HotKeys, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return partitionq.HotKeys{Queue: queue, Group: group, Pending: 1204, Exact: true,
		Top:    []partitionq.KeyPending{{Key: "tenant-42", Slot: 1, Pending: 1083}, {Key: "tenant-7", Slot: 0, Pending: 40}, {Key: "", Slot: 0, Pending: 3}},
		Oldest: []partitionq.KeyAge{{Slot: 1, Key: "tenant-42", Age: 9800 * time.Millisecond}, {Slot: 0, Key: "tenant-3", Age: 4200 * time.Millisecond}}}, f.err
}

func (f *fakeClient) Audit(ctx context.Context, queue, group string, limit int) ([]partitionq.AuditEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return incidentAudit(), f.err
}

// drive updates m with msg, then runs the commands it returns, feeding
// their messages back, until none is left; a tick is recorded, not slept
// on. It returns every message that went through Update, and the ticks.
func drive(t *testing.T, m *Model, msg tea.Msg) (seen []tea.Msg, ticks []armedTick) {
	t.Helper()
	queue := []tea.Msg{msg}
	var run func(cmd tea.Cmd)
	run = func(cmd tea.Cmd) {
		if cmd == nil {
			return
		}
		switch msg := cmd().(type) {
		case nil:
		case tea.BatchMsg:
			for _, c := range msg {
				run(c)
			}
		case armedTick:
			ticks = append(ticks, msg)
		default:
			queue = append(queue, msg)
		}
	}
	for n := 0; len(queue) > 0; n++ {
		if n > 1000 {
			t.Fatal("drive: more than 1000 messages: a loop?")
		}
		msg := queue[0]
		queue = queue[1:]
		seen = append(seen, msg)
		if _, ok := msg.(tea.QuitMsg); ok {
			continue
		}
		_, cmd := m.Update(msg)
		run(cmd)
	}
	return seen, ticks
}

func (f *fakeClient) Groups(ctx context.Context, q partitionq.GroupsQuery) ([]partitionq.GroupOverview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gs []partitionq.GroupOverview
	for _, g := range incidentGroups() {
		if q.Queue == "" || g.Queue == q.Queue {
			gs = append(gs, g)
		}
	}
	return gs, f.err
}

// Key answers for the incident's blocked keys, and any other key as
// flowing; the incident's dead letters of the key are its.
func (f *fakeClient) Key(ctx context.Context, queue, group, key string) (partitionq.KeyInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := partitionq.ValidateKey(key); err != nil {
		return partitionq.KeyInfo{}, err
	}
	f.keys = append(f.keys, key)
	ki := partitionq.KeyInfo{Queue: queue, Group: group, Key: key, Slot: 3, State: partitionq.KeyFlowing, DedupWindow: time.Hour}
	if key == "hooli" { // a producer's retries, refused
		at := base
		ki.DedupHits = []partitionq.DedupHit{
			{DedupID: "upload-7f3a/FileCreated", EventID: 48210, Hits: 2, SentAt: at.Add(-9 * time.Minute), LastHit: at.Add(-2 * time.Minute), ExpiresAt: at.Add(51 * time.Minute)},
			{DedupID: "upload-77c1/FileDeleted", EventID: 48102, Hits: 1, SentAt: at.Add(-20 * time.Minute), LastHit: at.Add(-19 * time.Minute), ExpiresAt: at.Add(40 * time.Minute)}}
		ki.Duplicates = 3
	}
	for _, b := range f.blocked {
		if b.Key == key {
			ki.Slot, ki.State, ki.Blocked = b.Slot, b.State, &b
			ki.SetAside = []partitionq.PreviewEvent{{ID: b.Head.ID, Type: b.Head.Type, Payload: b.Head.Payload, Time: b.Head.Time, Head: true}}
			if key == "tenant-7" {
				ki.SetAside = tenant7Preview()
			}
		}
	}
	if st := incidentStatus(0); ki.Slot < len(st.SlotStatus) {
		ki.Owner = st.SlotStatus[ki.Slot].Owner
	}
	for _, d := range incidentDead() {
		if d.Key == key {
			ki.DeadLetters = append(ki.DeadLetters, d)
			ki.DeadLetterCount++
			if d.ReplayedAt == nil {
				ki.PendingDeadLetters++
			}
		}
	}
	return ki, f.err
}

func (f *fakeClient) bulk(verb string, r partitionq.BulkRequest) (partitionq.BulkResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !r.DryRun {
		f.actions = append(f.actions, fmt.Sprintf("%s %s (%s) %s", verb, r.Match.Describe(), fmt.Sprint(r.Match.Pending), r.Reason))
	}
	res := partitionq.BulkResult{DryRun: r.DryRun}
	for _, d := range incidentDeadMatching(r.Match) {
		it := partitionq.BulkItem{ID: d.ID, EventID: d.EventID, Key: d.Key, Type: d.Type, Outcome: partitionq.OutcomePurged}
		if verb == "replay" {
			it.Outcome = partitionq.OutcomeReplayed
			if d.ReplayedAt != nil {
				it.Outcome, it.NewEventID = partitionq.OutcomeAlreadyReplayed, *d.ReplayID
				res.AlreadyReplayed++
				res.Items = append(res.Items, it)
				continue
			}
		}
		res.Count++
		res.Items = append(res.Items, it)
	}
	if !r.DryRun {
		res.AuditID = 4
	}
	return res, f.actErr
}

func (f *fakeClient) ReplayMatching(ctx context.Context, r partitionq.BulkRequest) (partitionq.BulkResult, error) {
	return f.bulk("replay", r)
}

func (f *fakeClient) PurgeMatching(ctx context.Context, r partitionq.BulkRequest) (partitionq.BulkResult, error) {
	return f.bulk("purge", r)
}
