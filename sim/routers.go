package sim

import (
	"strconv"

	"github.com/trimtab/trimtab/control"
	"github.com/trimtab/trimtab/fleet"
	"github.com/trimtab/trimtab/flow"
	"github.com/trimtab/trimtab/replica/peerload"
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/scorers/prefix"
	"github.com/trimtab/trimtab/sim/scenario"
)

// Several router replicas in front of one pool (Scenario.Routers): each has
// its own scheduler, scorers and control loop; the spread decides which
// replica a request reaches; with sync, every SyncInterval each replica
// sends its new picks (the PickLog of the prefix scorer prefix.Synced
// names) and its router-local
// loads (peerload.Local), and the others apply them SyncDelay later
// (prefix.Scorer.RecordPeer, peerload.Peers) — the same hooks `trimtab serve`'s
// replica sync uses, with the network replaced by a delay in virtual time.

// router is one replica.
type router struct {
	sched  *scheduler.Scheduler
	ctl    *control.Loop
	cal    *fleet.Calibrator // learns the engines from the router's observations, as serve's does
	signal float64           // the loop's latest signal
	mode   string            // the loop's latest mode

	prefix *prefix.Scorer  // nil when the policy has none
	log    *prefix.PickLog // nil without sync
	peers  *peerload.Peers // nil without sync
	name   string

	// flow is the replica's flow controller (nil: the policy has flow
	// control off); flowClass the class it gives each of the run's
	// classes.
	flow      *flow.Controller
	flowClass []flow.Class
}

// syncMsg is one replica's batch: its picks since the last batch and its
// local loads now.
type syncMsg struct {
	from   int
	chains []prefix.Chain
	loads  []peerload.Load
}

// Pick-log bounds per replica in the simulator: enough for every pick of a
// sync interval at the loads the scenarios reach.
const (
	simLogPicks  = 1 << 14
	simLogHashes = 1 << 22
)

// buildRouters builds the run's replicas. Replica 0 gets the run's seed,
// so one router is exactly the single-router run.
func (r *runner) buildRouters() error {
	n, syncOn := 1, false
	if rt := r.sc.Routers; rt != nil {
		n, syncOn = rt.Replicas, rt.SyncOn() && rt.Replicas > 1
	}
	for i := range n {
		seed := r.cfg.Seed
		if i > 0 {
			seed = r.cfg.Seed ^ (uint64(i) * 0x9e3779b97f4a7c15)
		}
		sched, loop, err := r.cfg.Policy.Build(seed, r.sc)
		if err != nil {
			return err
		}
		ccfg := fleet.DefaultCalibrationConfig()
		if r.cfg.Calibration != nil {
			ccfg = *r.cfg.Calibration
		}
		cal, err := fleet.NewCalibrator(ccfg, sched, fleet.CalibrationDeps{})
		if err != nil {
			return err
		}
		sched.ObserveInto(cal.Ring())
		rt := &router{sched: sched, ctl: loop, cal: cal, name: "router-" + strconv.Itoa(i)}
		if rt.flow, err = r.buildFlow(sched); err != nil {
			return err
		}
		if syncOn {
			rt.prefix, _ = prefix.Synced(sched.Scorers())
			if rt.prefix != nil {
				rt.log, err = prefix.NewPickLog(simLogPicks, simLogHashes)
				if err != nil {
					return err
				}
				rt.prefix.SetPickLog(rt.log)
			}
			rt.peers = peerload.NewPeers(sched)
		}
		r.routers = append(r.routers, rt)
	}
	r.sched, r.ctl = r.routers[0].sched, r.routers[0].ctl
	return nil
}

// syncing reports whether the run models replica sync.
func (r *runner) syncing() bool { return r.routers[0].peers != nil }

// route returns the replica that receives a request from client slot
// (closed loop: the client; open loop: the session slot).
func (r *runner) route(slot int) *router {
	n := len(r.routers)
	if n == 1 {
		return r.routers[0]
	}
	if r.sc.Routers.Spread == scenario.SpreadClientHash {
		return r.routers[int(mix64(uint64(slot)+1)%uint64(n))]
	}
	r.rr++
	return r.routers[r.rr%n]
}

// mix64 is the SplitMix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// sendSync makes every replica's batch and schedules its delivery.
func (r *runner) sendSync() {
	for i, rt := range r.routers {
		m := &syncMsg{from: i}
		if rt.log != nil {
			m.chains = rt.log.Drain(nil)
		}
		m.loads = peerload.Local(rt.sched.Pool(), nil)
		r.res.SyncPicks += len(m.chains)
		r.h.push(event{at: r.now + r.sc.Routers.SyncDelay, kind: evSyncDeliver, msg: m})
	}
}

// deliverSync applies a batch to every replica but its sender.
func (r *runner) deliverSync(m *syncMsg) {
	from := r.routers[m.from].name
	for j, rt := range r.routers {
		if j == m.from {
			continue
		}
		if rt.prefix != nil {
			for _, c := range m.chains {
				rt.prefix.RecordPeer(c.Endpoint, c.Hashes)
			}
		}
		rt.peers.Apply(from, m.loads)
	}
}
