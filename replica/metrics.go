package replica

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the replica sync's metrics, trimtab_replica_*.
type metrics struct {
	sent, applied, picksApplied      prometheus.Counter
	droppedQueue, unknownEndpoint    prometheus.Counter
	duplicateEndpoint, rateLimited   prometheus.Counter
	loadsClamped, forgotten          prometheus.Counter
	refused                          map[string]prometheus.Counter
	refusedVec                       *prometheus.CounterVec
	snapshotsDropped                 *prometheus.CounterVec
	snapshotTooLarge, snapshotSlow   prometheus.Counter
	snapshotUnexpected               prometheus.Counter
	authDesc                         *prometheus.Desc
	snapshotsSent, snapshotsReceived prometheus.Counter
	expired                          prometheus.Counter
	lag                              prometheus.Histogram
	dropped                          *prometheus.CounterVec
	snapshots                        *prometheus.CounterVec
	connectedDesc, picksLoggedDesc   *prometheus.Desc
	picksLogDroppedDesc              *prometheus.Desc
	r                                *Replica
}

func newMetrics(r *Replica, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{r: r}
	m.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_updates_sent_total",
		Help: "Sync batches (picks and loads) sent to peers, counted per peer."})
	m.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_updates_applied_total",
		Help: "Sync batches received from peers and applied."})
	m.picksApplied = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_picks_applied_total",
		Help: "Peers' picks recorded in this replica's prefix index."})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_replica_updates_dropped_total",
		Help: "Sync updates dropped: queue_full (a batch for a slow or absent peer), unknown_endpoint (a peer's pick, load or snapshot part for an endpoint this replica's pool lacks), duplicate_endpoint (a load for an endpoint already in the batch), rate_limited (a peer's picks beyond max_peer_picks_per_second)."}, []string{"reason"})
	m.droppedQueue = m.dropped.WithLabelValues("queue_full")
	m.unknownEndpoint = m.dropped.WithLabelValues("unknown_endpoint")
	m.duplicateEndpoint = m.dropped.WithLabelValues("duplicate_endpoint")
	m.rateLimited = m.dropped.WithLabelValues("rate_limited")
	m.loadsClamped = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_loads_clamped_total",
		Help: "Peers' in-flight and pending-prefill counts clamped to [0, max_peer_in_flight] or [0, max_peer_pending_prefill_bytes]."})
	m.forgotten = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_peers_forgotten_total",
		Help: "Inbound peers without a stream forgotten: 10 × peer_timeout after their last message, or to make room under max_peers."})
	m.refusedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_replica_peers_refused_total",
		Help: "Inbound sync streams refused: unauthenticated (no or a wrong token), unknown_address (not from a configured or discovered peer), bad_hello, layout_differs (another prefix index layout), too_many_peers (max_peers streaming)."}, []string{"reason"})
	m.refused = map[string]prometheus.Counter{}
	for _, reason := range refusalReasons {
		m.refused[reason] = m.refusedVec.WithLabelValues(reason)
	}
	m.snapshotsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_replica_snapshots_dropped_total",
		Help: "Peers' snapshots cut off and their streams dropped: too_large (beyond max_snapshot_bytes), too_slow (unfinished after snapshot_timeout), unexpected (a snapshot part not asked for)."}, []string{"reason"})
	m.snapshotTooLarge = m.snapshotsDropped.WithLabelValues("too_large")
	m.snapshotSlow = m.snapshotsDropped.WithLabelValues("too_slow")
	m.snapshotUnexpected = m.snapshotsDropped.WithLabelValues("unexpected")
	m.authDesc = prometheus.NewDesc("trimtab_replica_auth_info",
		"Always 1; mode is how sync streams are authenticated: mtls, token, mtls+token, or insecure (replicas.insecure: true, none).", []string{"mode"}, nil)
	m.snapshots = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trimtab_replica_snapshots_total",
		Help: "Prefix index snapshots sent to joining peers (sent) and restored from peers (received)."}, []string{"direction"})
	m.snapshotsSent = m.snapshots.WithLabelValues("sent")
	m.snapshotsReceived = m.snapshots.WithLabelValues("received")
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "trimtab_replica_peer_expiries_total",
		Help: "Times a peer stayed silent for peer_timeout and its counts were taken back."})
	m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "trimtab_replica_sync_lag_seconds",
		Help:    "Age of a peer's batch when applied (this replica's clock minus the sender's; includes clock skew between hosts).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}})
	m.connectedDesc = prometheus.NewDesc("trimtab_replica_peers_connected",
		"Peers with an open sync stream: out (this replica streams to them), in (they stream to this replica).", []string{"direction"}, nil)
	m.picksLoggedDesc = prometheus.NewDesc("trimtab_replica_picks_logged_total",
		"Local picks put in the pick log for the peers.", nil, nil)
	m.picksLogDroppedDesc = prometheus.NewDesc("trimtab_replica_pick_log_dropped_total",
		"Local picks dropped because the pick log was full between two flushes.", nil, nil)
	if reg == nil {
		return m, nil
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{m.sent, m.applied, m.picksApplied, m.dropped, m.snapshots, m.expired, m.lag,
		m.loadsClamped, m.forgotten, m.refusedVec, m.snapshotsDropped, m} {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("replica: register metrics: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}

// Describe implements prometheus.Collector for the values read at scrape
// time.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.connectedDesc
	ch <- m.picksLoggedDesc
	ch <- m.picksLogDroppedDesc
	ch <- m.authDesc
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	out := 0
	for _, p := range m.r.peerList() {
		if p.connected.Load() {
			out++
		}
	}
	in := 0
	m.r.mu.Lock()
	for _, b := range m.r.inbound {
		if b.streams > 0 {
			in++
		}
	}
	m.r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.connectedDesc, prometheus.GaugeValue, float64(out), "out")
	ch <- prometheus.MustNewConstMetric(m.connectedDesc, prometheus.GaugeValue, float64(in), "in")
	ch <- prometheus.MustNewConstMetric(m.picksLoggedDesc, prometheus.CounterValue, float64(m.r.picks.Appended()))
	ch <- prometheus.MustNewConstMetric(m.picksLogDroppedDesc, prometheus.CounterValue, float64(m.r.picks.Dropped()))
	ch <- prometheus.MustNewConstMetric(m.authDesc, prometheus.GaugeValue, 1, m.r.auth)
}
