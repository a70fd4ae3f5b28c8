package cli_test

import "time"

// The JSON shapes of docs/cli.md, as a script would decode them. Tests
// decode command output into these and pin the exact keys with pinKeys.

type setupOut struct {
	Queue        string   `json:"queue"`
	Group        string   `json:"group"`
	Slots        int      `json:"slots"`
	Consumers    []string `json:"consumers"`
	QueueCreated bool     `json:"queue_created"`
	Registered   int      `json:"registered"`
	// DedupWindowSeconds is the queue's dedup window.
	DedupWindowSeconds float64 `json:"dedup_window_seconds"`
}

type sendOut struct {
	Queue        string `json:"queue"`
	Sent         int    `json:"sent"`
	FirstEventID int64  `json:"first_event_id"`
	LastEventID  int64  `json:"last_event_id"`
	// The one event of the flags:
	EventID   *int64 `json:"event_id"`
	Duplicate *bool  `json:"duplicate"`
	// The lines of standard input refused as duplicates:
	Duplicates []struct {
		Line    int    `json:"line"`
		DedupID string `json:"dedup_id"`
		EventID int64  `json:"event_id"`
	} `json:"duplicates"`
}

type statusOut struct {
	Queue       string    `json:"queue"`
	Group       string    `json:"group"`
	Engine      string    `json:"engine"`
	SlotCount   int       `json:"slot_count"`
	DeadLetters int64     `json:"dead_letters"`
	Pending     int64     `json:"pending"`
	At          time.Time `json:"at"`
	Slots       []struct {
		Slot     int    `json:"slot"`
		Consumer string `json:"consumer"`
		Owner    *struct {
			Name             string    `json:"name"`
			Host             string    `json:"host"`
			PID              int32     `json:"pid"`
			BackendPID       int32     `json:"backend_pid"`
			Addr             string    `json:"addr"`
			Since            time.Time `json:"since"`
			Epoch            int64     `json:"epoch"`
			LeaseLeftSeconds float64   `json:"lease_left_seconds"`
		} `json:"owner"`
		LagSeconds         float64  `json:"lag_seconds"`
		LastSeenSeconds    float64  `json:"last_seen_seconds"`
		InBatch            bool     `json:"in_batch"`
		Pending            int64    `json:"pending"`
		OldestSeconds      float64  `json:"oldest_seconds"`
		SinceFinishSeconds *float64 `json:"since_finish_seconds"`
		Rates              ratesOut `json:"rates"`
		QueuePending       int64    `json:"queue_pending"`
		BlockedKeys        int      `json:"blocked_keys"`
		DrainingKeys       int      `json:"draining_keys"`
		SetAside           int64    `json:"set_aside"`
	} `json:"slots"`
}

type ratesOut struct {
	Handled10s float64 `json:"handled_10s"`
	Failed10s  float64 `json:"failed_10s"`
	Handled1m  float64 `json:"handled_1m"`
	Failed1m   float64 `json:"failed_1m"`
}

type blockedOut struct {
	Queue       string          `json:"queue"`
	Group       string          `json:"group"`
	BlockedKeys []blockedKeyOut `json:"blocked_keys"`
}

type blockedKeyOut struct {
	Key   string `json:"key"`
	Slot  int    `json:"slot"`
	State string `json:"state"`
	Head  struct {
		EventID     int64      `json:"event_id"`
		Type        string     `json:"type"`
		Payload     string     `json:"payload"`
		SentAt      time.Time  `json:"sent_at"`
		Attempts    int        `json:"attempts"`
		NextAttempt *time.Time `json:"next_attempt"`
		LastError   string     `json:"last_error"`
	} `json:"head"`
	Waiting      int64     `json:"waiting"`
	BlockedSince time.Time `json:"blocked_since"`
}

type actionOut struct {
	Action       string  `json:"action"`
	Outcome      string  `json:"outcome"`
	Queue        string  `json:"queue"`
	Group        string  `json:"group"`
	Key          string  `json:"key"`
	Slot         int     `json:"slot"`
	EventID      int64   `json:"event_id"`
	Count        int     `json:"count"`
	NextEventIDs []int64 `json:"next_event_ids"`
	Resolved     *struct {
		How          string     `json:"how"`
		Reason       string     `json:"reason"`
		Actor        string     `json:"actor"`
		DBRole       string     `json:"db_role"`
		At           *time.Time `json:"at"`
		DeadLetterID *int64     `json:"dead_letter_id"`
	} `json:"resolved"`
}

type previewOut struct {
	Queue  string `json:"queue"`
	Group  string `json:"group"`
	Key    string `json:"key"`
	State  string `json:"state"`
	Events []struct {
		EventID int64     `json:"event_id"`
		Type    string    `json:"type"`
		Payload string    `json:"payload"`
		SentAt  time.Time `json:"sent_at"`
		Head    bool      `json:"head"`
	} `json:"events"`
}

type deadLetterOut struct {
	ID            int64      `json:"id"`
	EventID       int64      `json:"event_id"`
	Slot          int        `json:"slot"`
	Key           string     `json:"key"`
	Type          string     `json:"type"`
	Payload       string     `json:"payload"`
	SentAt        time.Time  `json:"sent_at"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	Reason        string     `json:"reason"`
	Actor         string     `json:"actor"`
	DBRole        string     `json:"db_role"`
	DeadAt        time.Time  `json:"dead_at"`
	ReplayedAt    *time.Time `json:"replayed_at"`
	ReplayEventID *int64     `json:"replay_event_id"`
}

type dlqListOut struct {
	Queue       string          `json:"queue"`
	Group       string          `json:"group"`
	DeadLetters []deadLetterOut `json:"dead_letters"`
}

type replayOut struct {
	ID         int64  `json:"id"`
	Outcome    string `json:"outcome"`
	NewEventID int64  `json:"new_event_id"`
}

// purgeOut is the --json output of dlq purge; bulkOut's with Purged.
type purgeOut struct {
	Purged int64 `json:"purged"`
}

// bulkOut is the --json output of dlq purge and of a bulk dlq replay
// (several ids, filters or --all): Replayed and AlreadyReplayed for a
// replay, Purged for a purge.
type bulkOut struct {
	Action          string `json:"action"`
	DryRun          bool   `json:"dry_run"`
	Queue           string `json:"queue"`
	Group           string `json:"group"`
	Filter          string `json:"filter"`
	Replayed        *int   `json:"replayed"`
	AlreadyReplayed *int   `json:"already_replayed"`
	Purged          *int64 `json:"purged"`
	AuditID         int64  `json:"audit_id"`
	DeadLetters     []struct {
		ID         int64  `json:"id"`
		EventID    int64  `json:"event_id"`
		Key        string `json:"key"`
		Type       string `json:"type"`
		Outcome    string `json:"outcome"`
		NewEventID *int64 `json:"new_event_id"`
	} `json:"dead_letters"`
	UnmatchedIDs []int64 `json:"unmatched_ids"`
}

type groupsOut struct {
	Groups []struct {
		Queue        string   `json:"queue"`
		Group        string   `json:"group"`
		SlotCount    int      `json:"slot_count"`
		OwnedSlots   int      `json:"owned_slots"`
		Workers      []string `json:"workers"`
		Backlog      int64    `json:"backlog"`
		LagSeconds   float64  `json:"lag_seconds"`
		SetAside     int64    `json:"set_aside"`
		BlockedKeys  int      `json:"blocked_keys"`
		DrainingKeys int      `json:"draining_keys"`
		DeadLetters  int64    `json:"dead_letters"`
		Broken       string   `json:"broken"`
		Dropped      bool     `json:"dropped"`
	} `json:"groups"`
}

type keyOut struct {
	Queue string `json:"queue"`
	Group string `json:"group"`
	Key   string `json:"key"`
	Slot  int    `json:"slot"`
	Owner *struct {
		Name  string `json:"name"`
		Epoch int64  `json:"epoch"`
	} `json:"owner"`
	State    string         `json:"state"`
	Blocked  *blockedKeyOut `json:"blocked"`
	SetAside []struct {
		EventID int64     `json:"event_id"`
		Type    string    `json:"type"`
		Payload string    `json:"payload"`
		SentAt  time.Time `json:"sent_at"`
		Head    bool      `json:"head"`
	} `json:"set_aside"`
	DeadLetters        []deadLetterOut `json:"dead_letters"`
	DeadLetterCount    int64           `json:"dead_letter_count"`
	PendingDeadLetters int64           `json:"pending_dead_letters"`
	DedupWindowSeconds float64         `json:"dedup_window_seconds"`
	DedupHits          []struct {
		DedupID   string    `json:"dedup_id"`
		EventID   int64     `json:"event_id"`
		Hits      int64     `json:"hits"`
		SentAt    time.Time `json:"sent_at"`
		LastHitAt time.Time `json:"last_hit_at"`
		ExpiresAt time.Time `json:"expires_at"`
	} `json:"dedup_hits"`
	Duplicates int64 `json:"duplicates"`
}

type auditOut struct {
	Queue   string `json:"queue"`
	Group   string `json:"group"`
	Entries []struct {
		ID      int64     `json:"id"`
		At      time.Time `json:"at"`
		DBRole  string    `json:"db_role"`
		Actor   string    `json:"actor"`
		Action  string    `json:"action"`
		Key     string    `json:"key"`
		EventID int64     `json:"event_id"`
		Reason  string    `json:"reason"`
		Outcome string    `json:"outcome"`
	} `json:"entries"`
}

type versionOut struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}
