package scheduler

// Category says which budget a scorer's weight belongs to when the
// configurator rebalances weights.
type Category uint8

const (
	// CategoryNone scorers keep their profile weight; the configurator
	// never touches them.
	CategoryNone Category = iota
	// CategoryAffinity scorers prefer endpoints that already hold state for
	// the request (prefix cache, session, LoRA adapter).
	CategoryAffinity
	// CategoryDistribution scorers prefer idle endpoints (queue depth, KV
	// utilisation, in-flight requests).
	CategoryDistribution
)

// String returns "none", "affinity" or "distribution".
func (c Category) String() string {
	switch c {
	case CategoryAffinity:
		return "affinity"
	case CategoryDistribution:
		return "distribution"
	default:
		return "none"
	}
}
