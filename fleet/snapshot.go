package fleet

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/trimtab/trimtab/scheduler"
)

// Snapshot is one immutable view of the pool: who the ready endpoints are
// and what their model servers last reported. Neither the snapshot nor the
// slices and maps reachable from it may be modified by anyone; share it
// freely between goroutines.
type Snapshot struct {
	// Version increases by one with every publication (1 is the first).
	Version uint64
	// Time is when the snapshot was built; endpoint states are evaluated
	// at this instant.
	Time time.Time
	// Endpoints are the ready endpoints, sorted by Address, with
	// discovery data merged with scraped metrics. In-flight counts are
	// not part of a snapshot (the scheduler attaches its own).
	Endpoints []scheduler.Endpoint
}

// Lookup returns the endpoint with the address, or nil.
func (s *Snapshot) Lookup(address string) *scheduler.Endpoint {
	i := sort.Search(len(s.Endpoints), func(i int) bool { return s.Endpoints[i].Address >= address })
	if i < len(s.Endpoints) && s.Endpoints[i].Address == address {
		return &s.Endpoints[i]
	}
	return nil
}

// Count returns how many endpoints are in state st.
func (s *Snapshot) Count(st scheduler.State) int {
	n := 0
	for i := range s.Endpoints {
		if s.Endpoints[i].State == st {
			n++
		}
	}
	return n
}

// Target is one endpoint as discovery sees it, before any scrape.
type Target struct {
	// Address is "host:port" of the model server; it identifies the
	// endpoint.
	Address string
	// Name is a human label (pod name); may be empty.
	Name string
	// Models the endpoint serves; empty means any.
	Models []string
	// Labels from discovery; may be nil.
	Labels map[string]string
	// Capacity is the relative capacity weight (0 means 1).
	Capacity float64
	// Engine overrides the pool's scrape engine for this endpoint ("" =
	// pool default).
	Engine string
	// Ready endpoints are scraped and published; not-ready ones are known
	// (for churn accounting) but left out of snapshots.
	Ready bool
}

// Sink receives what a Discoverer finds. Fleet implements it.
type Sink interface {
	// Update replaces the whole target list. The sink takes ownership of
	// the slice. Calls are serialised by the discoverer.
	Update(targets []Target)
	// Error reports a discovery problem that did not change the list
	// (a bad edit of the endpoints file, a malformed InferencePool).
	Error(err error)
}

// Discoverer finds endpoints. Run reports the full target list to sink on
// start and after every change, until ctx is done; it returns nil when ctx
// ends and an error only when discovery cannot start. It must call sink
// from one goroutine at a time and stop calling it before returning.
type Discoverer interface {
	Run(ctx context.Context, sink Sink) error
}

// Fixed is a Discoverer that reports one fixed target list and nothing
// after it: for a router in front of servers that never change (trimtab
// bench, tests).
type Fixed []Target

// Run reports the list, then waits for ctx.
func (f Fixed) Run(ctx context.Context, sink Sink) error {
	sink.Update(slices.Clone([]Target(f)))
	<-ctx.Done()
	return nil
}
