package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RequestClass tags requests for flow control and for the per-class
// results (Result.Classes): the router sees its band as the
// x-trimtab-priority header, its tenant as the API key (Authorization:
// Bearer <tenant>, which flow control hashes into a tenant key) and its
// TTL as x-llm-d-inference-ttl, and classifies them with the policy's
// real flow.Classifier. A policy without flow control ignores all three.
type RequestClass struct {
	// Name keys the class in the results; requests of streams with the
	// same name are one class. Default: the band, else "default".
	Name string `yaml:"name"`
	// Band names the request's priority band ("": the profile's default
	// band; a name the profile lacks also falls back to it, as the real
	// classifier does).
	Band string `yaml:"band"`
	// Tenant is the API key the requests carry ("": none).
	Tenant string `yaml:"tenant"`
	// TTL is the request's own bound on its wait in the router (0: none).
	TTL time.Duration `yaml:"ttl"`
}

// ClassName returns the class's name in the results.
func (c *RequestClass) ClassName() string {
	switch {
	case c == nil:
		return DefaultClass
	case c.Name != "":
		return c.Name
	case c.Band != "":
		return c.Band
	}
	return DefaultClass
}

// DefaultClass names the requests of a workload without a class.
const DefaultClass = "default"

// header returns the request header flow control reads for the class:
// the band, the bearer API key and the TTL.
func (c *RequestClass) Header(name string) string {
	if c == nil {
		return ""
	}
	switch name {
	case "x-trimtab-priority":
		return c.Band
	case "authorization":
		if c.Tenant != "" {
			return "Bearer " + c.Tenant
		}
	case "x-llm-d-inference-ttl":
		if c.TTL > 0 {
			return strconv.FormatFloat(c.TTL.Seconds(), 'f', -1, 64)
		}
	}
	return ""
}

func (c *RequestClass) validate(prefix string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(prefix+format, a...)) }
	if len(c.Name) > 64 || strings.ContainsAny(c.Name, " \t\n") {
		bad("name: %q, want at most 64 bytes without spaces", c.Name)
	}
	if len(c.Band) > 32 || len(c.Tenant) > 64 {
		bad("band, tenant: at most 32 and 64 bytes")
	}
	if c.TTL < 0 || c.TTL > 24*time.Hour {
		bad("ttl: %v, want 0 (none) … 24h", c.TTL)
	}
	return errs
}

// Stream is a second source of requests beside the scenario's load: a
// class of its own (an interactive stream next to batch jobs, a second
// tenant), its own workload and arrivals, from Start until it has issued
// Requests (a closed-loop job: all of them, see Requests) or the run
// stops issuing. Exactly one of Concurrency (closed
// loop: that many clients, each sending its next request when the last
// ends) and Rate (open loop: Poisson arrivals) is set. A batch job that
// submits everything at once is Concurrency = Requests.
type Stream struct {
	RequestClass `yaml:",inline"`
	// Start is when the stream begins, in [0, duration).
	Start time.Duration `yaml:"start"`
	// Requests bounds what the stream issues (0: until the end of
	// Duration). A closed-loop stream with Requests is a job: it issues
	// all of them, after Duration too (the run lasts until they end), so
	// a job's completion and deadlines are measured whole, whatever the
	// router does to its pace.
	Requests int `yaml:"requests"`
	// Concurrency is the closed loop's clients (1 … 100000).
	Concurrency int `yaml:"concurrency"`
	// Rate is the open loop's arrivals per second (> 0).
	Rate float64 `yaml:"rate"`
	// Timeout is the stream's client timeout, its requests' deadline
	// (default: the scenario's timeout).
	Timeout time.Duration `yaml:"timeout"`
	// Workload is the stream's requests: kind uniform, shared-prefix or
	// chat.
	Workload Workload `yaml:"workload"`
}

// Job reports whether the stream is a job: a closed-loop stream with
// Requests, which issues all of them, after Duration too.
func (s *Stream) Job() bool { return s.Requests > 0 && s.Concurrency > 0 }

// validateFlow checks the streams and the workloads' classes.
func (s *Scenario) validateFlow() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c := s.Workload.Class; c != nil {
		errs = append(errs, c.validate("workload.class.")...)
	}
	for i := range s.Phases {
		if c := s.Phases[i].work.Class; c != nil {
			errs = append(errs, c.validate(fmt.Sprintf("phases[%d].workload.class.", i))...)
		}
	}
	if len(s.Streams) > 64 {
		bad("streams: %d, want at most 64", len(s.Streams))
	}
	for i := range s.Streams {
		st := &s.Streams[i]
		f := fmt.Sprintf("streams[%d].", i)
		errs = append(errs, st.RequestClass.validate(f)...)
		if st.Start < 0 || st.Start >= s.Duration {
			bad("%sstart: %v, want in [0, duration)", f, st.Start)
		}
		if st.Requests < 0 || st.Requests > 1e7 {
			bad("%srequests: %d, want 0 (until the end) … 10000000", f, st.Requests)
		}
		if (st.Concurrency > 0) == (st.Rate > 0) {
			bad("%sconcurrency, rate: set exactly one (closed or open loop)", f)
		}
		if st.Concurrency < 0 || st.Concurrency > 100000 {
			bad("%sconcurrency: %d, want 1 … 100000", f, st.Concurrency)
		}
		if st.Rate < 0 || st.Rate > 1e6 {
			bad("%srate: %v, want > 0, at most 1e6", f, st.Rate)
		}
		if st.Timeout < 0 || st.Timeout > 24*time.Hour {
			bad("%stimeout: %v, want 0 (the scenario's) … 24h", f, st.Timeout)
		}
		switch st.Workload.Kind {
		case KindUniform, KindSharedPrefix, KindChat:
			errs = append(errs, st.Workload.validate(f+"workload.", ModeOpen)...)
		default:
			bad("%sworkload.kind: %q, want uniform, shared-prefix or chat", f, st.Workload.Kind)
		}
	}
	return errs
}

// resolveStreams fills the streams' defaults.
func (s *Scenario) resolveStreams() {
	for i := range s.Streams {
		if s.Streams[i].Timeout == 0 {
			s.Streams[i].Timeout = s.Timeout
		}
	}
}
