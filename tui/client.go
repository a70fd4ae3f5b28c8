package tui

import (
	"context"

	"github.com/partitionq/partitionq/partitionq"
)

// Client is the part of *partitionq.Client the console uses: reads and
// operator actions, nothing else. Run takes the real client; model tests
// pass a fake.
type Client interface {
	Status(ctx context.Context, queue, group string) (partitionq.GroupStatus, error)
	BlockedKeys(ctx context.Context, queue, group string) ([]partitionq.BlockedKey, error)
	Preview(ctx context.Context, queue, group, key string, limit int) ([]partitionq.PreviewEvent, error)
	// Act runs skip, retry now, quarantine: the table's actions on a key's head.
	Act(ctx context.Context, r partitionq.ActionRequest) (partitionq.ActionResult, error)
	DeadLetters(ctx context.Context, q partitionq.DeadLetterQuery) ([]partitionq.DeadLetter, error)
	Replay(ctx context.Context, r partitionq.ReplayRequest) (partitionq.ReplayResult, error)
	Audit(ctx context.Context, queue, group string, limit int) ([]partitionq.AuditEntry, error)
	Groups(ctx context.Context, q partitionq.GroupsQuery) ([]partitionq.GroupOverview, error)
	Key(ctx context.Context, queue, group, key string) (partitionq.KeyInfo, error)
	ReplayMatching(ctx context.Context, r partitionq.BulkRequest) (partitionq.BulkResult, error)
	PurgeMatching(ctx context.Context, r partitionq.BulkRequest) (partitionq.BulkResult, error)
	HotKeys(ctx context.Context, queue, group string, top int) (partitionq.HotKeys, error)
}

var _ Client = (*partitionq.Client)(nil)
