package fleet

import (
	"context"

	"github.com/trimtab/trimtab/scheduler"
)

// Pool is where Feed installs snapshots; *scheduler.Scheduler is one.
type Pool interface {
	SetEndpoints([]scheduler.Endpoint)
}

var _ Pool = (*scheduler.Scheduler)(nil)

// Feed installs the current snapshot's endpoints into pool, and those of
// every later snapshot, until ctx is done; it returns nil then. Run it
// beside Run, which publishes the snapshots.
func (f *Fleet) Feed(ctx context.Context, pool Pool) error {
	updates, cancel := f.Subscribe()
	defer cancel()
	for {
		if snap := f.Load(); snap != nil {
			pool.SetEndpoints(snap.Endpoints)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-updates:
		}
	}
}
