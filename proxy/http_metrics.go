package proxy

import "github.com/prometheus/client_golang/prometheus"

// httpMetrics are the HTTP proxy's own metrics, besides the per-endpoint
// pathMetrics it shares with ext_proc. Children are resolved at
// construction, so counting allocates nothing.
type httpMetrics struct {
	// stream idle timeouts, by stage
	timeoutFirstByte, timeoutMidStream prometheus.Counter
	// connections refused on arrival, by cap
	refusedTotal, refusedPerClient prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_proxy_stream_timeouts_total",
		Help: "Endpoint responses cut after http.stream_idle_timeout without a body byte, by stage (first_byte: none had arrived; mid_stream: some had).",
	}, []string{"stage"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trimtab_proxy_connections_refused_total",
		Help: "Client connections refused on arrival, by the cap they were over (max_connections: the proxy's; max_connections_per_client: their address's).",
	}, []string{"reason"})
	m := &httpMetrics{
		timeoutFirstByte: timeouts.WithLabelValues("first_byte"),
		timeoutMidStream: timeouts.WithLabelValues("mid_stream"),
		refusedTotal:     refused.WithLabelValues("max_connections"),
		refusedPerClient: refused.WithLabelValues("max_connections_per_client"),
	}
	if reg != nil {
		reg.MustRegister(timeouts, refused)
	}
	return m
}

// streamTimeout counts a body cut by the idle timeout after got bytes.
func (m *httpMetrics) streamTimeout(got int64) {
	if got == 0 {
		m.timeoutFirstByte.Inc()
	} else {
		m.timeoutMidStream.Inc()
	}
}

// connRefused counts a connection refused over the proxy's cap, or over
// its client address's (perClient).
func (m *httpMetrics) connRefused(perClient bool) {
	if perClient {
		m.refusedPerClient.Inc()
	} else {
		m.refusedTotal.Inc()
	}
}
