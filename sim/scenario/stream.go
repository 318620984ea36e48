package scenario

import (
	"math/rand/v2"
	"time"
)

// ClassHeaders are the request headers a class sets (RequestClass.Header),
// as the simulator's router sees them: the band as x-trimtab-priority, the
// tenant as a bearer API key, the TTL as x-llm-d-inference-ttl.
var ClassHeaders = []string{"x-trimtab-priority", "authorization", "x-llm-d-inference-ttl"}

// RequestClasses returns the names of sc's request classes in the order
// the simulator reports them — each phase's (by name), then each
// stream's —, each phase's class index, and each stream's; all nil when
// the scenario names no class (no workload or phase class, no stream).
func (sc *Scenario) RequestClasses() (names []string, phase, stream []int) {
	named := sc.Workload.Class != nil || len(sc.Streams) > 0
	for i := range sc.Phases {
		named = named || sc.Phases[i].Work().Class != nil
	}
	if !named {
		return nil, nil, nil
	}
	index := func(c *RequestClass) int {
		n := c.ClassName()
		for i, x := range names {
			if x == n {
				return i
			}
		}
		names = append(names, n)
		return len(names) - 1
	}
	for i := range sc.Phases {
		phase = append(phase, index(sc.Phases[i].Work().Class))
	}
	for k := range sc.Streams {
		stream = append(stream, index(&sc.Streams[k].RequestClass))
	}
	return names, phase, stream
}

// StreamRenderer renders stream k's requests with the simulator's own
// generator and seeds for the stream, so `trimtab bench` sends what
// `trimtab sim` issues; salt as in Renderer. Not safe for concurrent use.
type StreamRenderer struct {
	gen  Generator
	rng  *rand.Rand
	slot int
	salt uint64
	spec Request
}

// NewStreamRenderer returns the renderer of sc's stream k for the run
// seed seed.
func NewStreamRenderer(sc *Scenario, k int, seed, salt uint64) (*StreamRenderer, error) {
	g, err := NewGenerator(sc, &sc.Streams[k].Workload, seed^uint64(k+1)*0x2545f4914f6cdd1d, "")
	if err != nil {
		return nil, err
	}
	return &StreamRenderer{gen: g, rng: rand.New(rand.NewPCG(seed, 0x5700+uint64(k))), salt: salt}, nil
}

// Next renders the stream's next request.
func (s *StreamRenderer) Next() Rendered {
	slot := s.slot
	s.slot = (s.slot + 1) % OpenChatSlots
	s.gen.Next(s.rng, slot, &s.spec)
	var buf []byte
	for _, g := range s.spec.Segs {
		if s.salt != 0 {
			g.Key = MixKey(s.salt, g.Key)
		}
		buf = AppendSegment(buf, g)
	}
	return Rendered{Prompt: buf, OutputTokens: s.spec.Out.Tokens, SessionID: s.spec.SessionID}
}

// Gap draws an open-loop stream's next inter-arrival gap at rate req/s,
// after its request was drawn (Next), as the simulator does.
func (s *StreamRenderer) Gap(rate float64) time.Duration {
	return time.Duration(s.rng.ExpFloat64() / rate * float64(time.Second))
}
