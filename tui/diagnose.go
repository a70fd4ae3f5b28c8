package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// Thresholds of the slot diagnosis.
const (
	// BehindLag: a slot with events pending whose lag passes it is behind.
	BehindLag = 30 * time.Second
	// StallAfter: a slot whose lag passes it while it takes no batch has
	// stalled. It is above PgQ's idle tick period (1 minute), so a slot of
	// an idle queue never looks stalled.
	StallAfter = 2 * time.Minute
	// idleAfter: an owner that took or finished no batch for this long is
	// not advancing.
	idleAfter = time.Minute
	// hotKeyMin: a blocked key holding at least this many waiting events,
	// and most of its slot's, is called a hot key.
	hotKeyMin = 100
	// OwnerGrace: a slot the console has seen without a live owner for
	// less than this is not called out (no warning, no red): a worker that
	// has just started, or a standby taking over, claims it within a second
	// or two.
	OwnerGrace = 5 * time.Second
)

// finding is one line of a diagnosis.
type finding struct {
	sev  severity
	text string
}

// diagnosis says what state a slot is in and why. It is derived from the
// status and the blocked keys only (heuristics: the library has no
// per-key backlog of keys that are not blocked).
type diagnosis struct {
	state    string // one word for the slots table
	sev      severity
	findings []finding
}

func (d *diagnosis) add(sev severity, state, format string, args ...any) {
	d.findings = append(d.findings, finding{sev: sev, text: fmt.Sprintf(format, args...)})
	if sev > d.sev || d.state == "" {
		d.sev, d.state = max(d.sev, sev), state
	}
}

// noTicks says whether the queue seems to get no ticks: every slot's lag
// has passed StallAfter with nothing pending anywhere (events not yet
// ticked are not counted as pending).
func noTicks(st partitionq.GroupStatus) bool {
	if st.Ticks.Stalled { // events wait after the newest tick, and none comes
		return true
	}
	if len(st.SlotStatus) == 0 {
		return false
	}
	for _, s := range st.SlotStatus {
		if s.Lag < StallAfter || s.QueuePending > 0 {
			return false
		}
	}
	return true
}

// ownerName is how the console names the owner of a slot (made safe).
func ownerName(o *partitionq.Owner) string {
	if o == nil {
		return "—"
	}
	if o.Name != "" {
		return line(o.Name)
	}
	return fmt.Sprintf("process %d on %s", o.PID, line(o.Host))
}

// shortOwner names an owner in the slots table: without the default
// identity's "partitionq:" prefix.
func shortOwner(o *partitionq.Owner) string {
	return strings.TrimPrefix(ownerName(o), "partitionq:")
}

// ownerDetail says who owns a slot: its name, the worker's own process
// and host, and the pid of its lease session's PostgreSQL backend, which is
// a server process: the one pg_terminate_backend takes, not the worker.
func ownerDetail(o *partitionq.Owner, at time.Time) string {
	parts := []string{fmt.Sprintf("worker pid %d on %s", o.PID, line(o.Host))}
	if o.BackendPID != 0 {
		parts = append(parts, fmt.Sprintf("PostgreSQL backend pid %d", o.BackendPID))
	}
	if o.Addr != "" { // a role without pg_read_all_stats does not see the address
		parts = append(parts, line(o.Addr))
	}
	if !o.Since.IsZero() {
		parts = append(parts, fmt.Sprintf("owner for %s", age(at.Sub(o.Since))))
	}
	return fmt.Sprintf("owner %s (%s)", ownerName(o), strings.Join(parts, ", "))
}

// slotInput is what the diagnosis of one slot reads.
type slotInput struct {
	s     partitionq.SlotStatus
	group partitionq.GroupStatus
	keys  []partitionq.BlockedKey // the slot's blocked and draining keys, oldest first
	at    time.Time               // the snapshot's time
	// noOwnerFor is how long the console has seen the slot without a live
	// owner (0 on its first look).
	noOwnerFor time.Duration
}

// diagnose tells apart why slot s is behind: no live owner, an owner that
// is not advancing, an owner that advances but too slowly (a hot key or a
// slow handler), blocked keys, or no ticks at all.
func diagnose(in slotInput) diagnosis {
	var d diagnosis
	s, st, at := in.s, in.group, in.at
	var blocked, draining []partitionq.BlockedKey
	for _, k := range in.keys {
		if k.State == partitionq.KeyDraining {
			draining = append(draining, k)
		} else {
			blocked = append(blocked, k)
		}
	}
	ticksMissing := noTicks(st)
	behind := s.Pending > 0 && s.Lag >= BehindLag && !ticksMissing
	switch {
	case s.Owner == nil && in.noOwnerFor < OwnerGrace:
		d.add(sevNone, "unowned", "No live owner yet: a worker that has just started, or a standby taking over, claims slot %d within a second or two.", s.Slot)
	case s.Owner == nil && (behind || s.Lag >= StallAfter):
		d.add(sevCrit, "NO OWNER", "No live owner: no worker runs slot %d, so its keys are not handled (lag %s). Start a worker (partitionq work) or find out why it stopped.", s.Slot, age(s.Lag))
	case s.Owner == nil:
		d.add(sevWarn, "no owner", "No live owner: no worker runs slot %d; its events will wait once they come.", s.Slot)
	case s.Lag >= StallAfter && s.LastSeen >= idleAfter && !ticksMissing:
		open := ""
		if s.InBatch {
			open = ", with a batch open"
		}
		d.add(sevCrit, "STALLED", "Owner not advancing: %s holds the slot but took or finished no batch for %s%s. A handler may hang: see that worker's logs. The slot pins the queue's table rotation until it moves.", ownerName(s.Owner), age(s.LastSeen), open)
	case behind:
		d.add(sevWarn, "behind", "Owner advancing too slowly: %s took a batch %s ago but is %s behind. A hot key (events of one key run one at a time) or a slow handler.", ownerName(s.Owner), age(s.LastSeen), age(s.Lag))
	}
	if s.Owner != nil && s.MovingTo != "" {
		d.add(sevOK, "moving", "Moving to %s to balance the group: %s finishes the runs in flight, records them and hands the slot over (nothing repeats).", line(s.MovingTo), ownerName(s.Owner))
	}
	if lead := behindFastest(s, st); lead > 0 && (behind || d.sev == sevCrit) {
		d.add(sevWarn, "behind", "It is %s events behind the fastest slot of the group.", count(lead))
	}
	if ticksMissing {
		d.add(sevWarn, "no ticks", "No tick for %s on the whole queue: nothing reads its events until one comes; %s.", age(max(s.Lag, st.Ticks.Age)), st.Ticks.Fix())
	}
	if s.BlockedKeys > 0 || len(blocked) > 0 {
		addBlocked(&d, s, blocked, at)
	}
	if n := max(s.DrainingKeys, len(draining)); n > 0 {
		var waiting int64
		for _, k := range draining {
			waiting += k.Waiting + 1
		}
		d.add(sevOK, "draining", "%s draining: %s failed event was resolved, and %s that waited behind it run now, in order (nothing to do).",
			plural(n, "key"), map[bool]string{true: "its", false: "their"}[n == 1], plural(int(waiting), "event"))
	}
	if len(d.findings) == 0 {
		if s.Pending == 0 {
			d.add(sevOK, "ok", "Keeping up: lag %s, nothing pending.", age(s.Lag))
		} else {
			d.add(sevOK, "ok", "Keeping up: lag %s, %s of its own pending, the oldest sent %s ago.", age(s.Lag), count(s.Pending), age(s.Oldest))
		}
	}
	return d
}

// behindFastest is how many more events slot s has pending than the slot
// of the group with the fewest.
func behindFastest(s partitionq.SlotStatus, st partitionq.GroupStatus) int64 {
	least := s.QueuePending
	for _, o := range st.SlotStatus {
		least = min(least, o.QueuePending)
	}
	return s.QueuePending - least
}

func addBlocked(d *diagnosis, s partitionq.SlotStatus, blocked []partitionq.BlockedKey, at time.Time) {
	n := max(s.BlockedKeys, len(blocked))
	var waiting int64
	for _, b := range blocked {
		waiting += b.Waiting
	}
	d.add(sevWarn, "blocked", "%s, %s waiting behind %s (set aside: the slot itself goes on).", plural(n, "blocked key"), plural(int(waiting), "event"), map[bool]string{true: "it", false: "them"}[n == 1])
	if len(blocked) == 0 {
		return
	}
	oldest := blocked[0] // BlockedKeys lists the oldest block first
	d.add(sevWarn, "blocked", "Oldest: %s, blocked %s, %s: %s", line(oldest.Key), age(at.Sub(oldest.BlockedSince)), plural(oldest.Head.Attempts, "attempt"), errText(oldest.Head.LastError))
	hot := blocked[0]
	for _, b := range blocked {
		if b.Waiting > hot.Waiting {
			hot = b
		}
	}
	if hot.Waiting >= hotKeyMin && hot.Waiting*2 >= waiting {
		d.add(sevWarn, "blocked", "Hot key %s holds %s of those waiting events.", line(hot.Key), count(hot.Waiting))
	}
}

// plural says "1 key" or "3 keys" (counts of 1000 and more in short form).
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "sh") || strings.HasSuffix(what, "s") {
		return count(int64(n)) + " " + what + "es"
	}
	return count(int64(n)) + " " + what + "s"
}

// errText is a head's error on one line, made safe.
func errText(e string) string {
	if e == "" {
		return "(no error recorded)"
	}
	return line(e)
}
