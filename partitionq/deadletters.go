package partitionq

import (
	"context"

	"github.com/partitionq/partitionq/partitionq/internal/store"
)

func (c *Client) countDeadLetters(ctx context.Context, queue, group string) (int64, error) {
	ok, err := store.Installed(ctx, c.pool)
	if err != nil || !ok {
		return 0, err
	}
	return store.CountDeadLetters(ctx, c.pool, queue, group)
}
