package scheduler

// Filter type strings as used in profiles.
const (
	FilterModel   = "model"
	FilterHealthy = "healthy"
)

// ModelFilter keeps endpoints that serve the request's model. It never fails
// open: an endpoint that does not serve a model cannot answer for it.
type ModelFilter struct{}

// Filter implements Filter.
func (ModelFilter) Filter(req *Request, in, out []*Endpoint) []*Endpoint {
	for _, e := range in {
		if e.Serves(req.Model) {
			out = append(out, e)
		}
	}
	return out
}

// HealthyFilter drops stale and unhealthy endpoints. It fails open on
// stale metrics only: when no fresh endpoint is left it keeps the stale
// ones, because a guess is better than refusing traffic while metrics are
// late. Unhealthy endpoints (unreachable: their scrapes were refused, timed
// out or answered with an HTTP error several times in a row) are never
// kept; when every candidate is unhealthy Pick returns ErrUnreachable.
type HealthyFilter struct{}

// Filter implements Filter.
func (HealthyFilter) Filter(req *Request, in, out []*Endpoint) []*Endpoint {
	for _, e := range in {
		if e.State == StateFresh {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		for _, e := range in {
			if e.State != StateUnhealthy {
				out = append(out, e)
			}
		}
	}
	return out
}

// EmptyError implements EmptyErrorer: a pool left empty by this filter is
// unreachable, not missing the model.
func (HealthyFilter) EmptyError() error { return ErrUnreachable }
