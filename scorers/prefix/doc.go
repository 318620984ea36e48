// Package prefix is the prefix scorer (profile type "prefix"): an affinity
// scorer that prefers endpoints likely to hold a request's prompt prefix in
// their KV cache, judged from an approximate index of what this router and
// its peers sent where (Scorer has the formula and the index's layout;
// README.md the contract).
//
// The package also holds the index's side of replica sync: PickLog, the
// bounded buffer of recorded picks a sync layer drains; RecordPeer, Export
// and Restore, which write a peer's picks and snapshots into the index;
// SyncKey, what two indexes must share to be exchanged; and Synced, which
// of a profile's prefix scorers is shared.
//
// Concurrency: every method is safe for concurrent use. The index is
// sharded; Score reads a shard without a lock (a sequence lock, falling
// back to the read lock) and recording takes a shard's write lock only when
// it changes something. The joins in progress (join_spread_fill) are
// sixteen rings of 64 entries, each under its own mutex. Nothing in the package starts a goroutine; the
// index metrics are computed at scrape time by a collector. Per-request
// scratch lives in the scheduler's CycleState slot, so a warm scorer
// allocates nothing per request.
//
// The package imports scheduler and scorers/internal only; package scorers
// imports it, so its registry (scorers.InTree) builds the prefix scorer
// like any other.
package prefix
