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

// HealthyFilter drops stale and unhealthy endpoints, but fails open: when
// that would drop every candidate it keeps them all, because a guess is
// better than refusing traffic while metrics are late.
type HealthyFilter struct{}

// Filter implements Filter.
func (HealthyFilter) Filter(req *Request, in, out []*Endpoint) []*Endpoint {
	for _, e := range in {
		if e.State == StateFresh {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		out = append(out, in...)
	}
	return out
}
