package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/trimtab/trimtab/scheduler"
)

// Scrape failure reasons, the values of the reason label of
// trimtab_fleet_scrape_failures_total.
const (
	ReasonTimeout       = "timeout"
	ReasonConnect       = "connect"
	ReasonHTTPStatus    = "http_status"
	ReasonTooLarge      = "too_large"
	ReasonParse         = "parse"
	ReasonMissingMetric = "missing_metric"
	ReasonInvalidValue  = "invalid_value"
)

// Reasons lists every failure reason.
var Reasons = []string{ReasonTimeout, ReasonConnect, ReasonHTTPStatus, ReasonTooLarge,
	ReasonParse, ReasonMissingMetric, ReasonInvalidValue}

// ScrapeError is a failed scrape with its classified reason.
type ScrapeError struct {
	// Reason is one of the Reason constants.
	Reason string
	Err    error
}

func (e *ScrapeError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *ScrapeError) Unwrap() error { return e.Err }

// unreachable reports whether the reason means the server did not serve
// its metrics at all (as opposed to serving unusable ones). Only these count
// towards StateUnhealthy.
func unreachable(reason string) bool {
	return reason == ReasonTimeout || reason == ReasonConnect || reason == ReasonHTTPStatus
}

// Metrics are the load figures mapped from one scrape.
type Metrics struct {
	Waiting, Running float64
	// KVUtil is in [0,1]; 0 when the engine does not export it.
	KVUtil                      float64
	LoRA                        scheduler.LoRAState
	CacheBlockSize, CacheBlocks int
	// Models are the model names the server labels its request series
	// with (the mapping's model label, e.g. vLLM's model_name), sorted;
	// filled only when discovery declared no models for the endpoint, so
	// /v1/models and the model filter know what it serves.
	Models []string
}

// parser parses and maps expositions for one scrape loop; it keeps its
// buffers between scrapes and is not safe for concurrent use.
type parser struct {
	mp   *mapper
	keep []byte
	kp   *keptParser

	// The last successful parse: when the kept lines and the models are
	// the same again (an idle server), its result is reused.
	prev       []byte
	prevModels []string
	prevM      Metrics
	prevOK     bool
}

func newParser(mp *mapper) *parser {
	return &parser{mp: mp, kp: newKeptParser()}
}

// parse maps an exposition to Metrics. openMetrics says the body is
// OpenMetrics 1.0 rather than the Prometheus text format. models are the
// endpoint's models, used to filter series by the mapping's model label.
// Errors are *ScrapeError with reason parse, missing_metric or
// invalid_value.
//
// Both formats go through filter, which keeps only the mapping's sample
// lines and labels in the Prometheus text form (an OpenMetrics body is
// normalised line by line: the kept lines differ only in # EOF, float
// timestamps and exemplars), then keptParser, which reads that one-line
// form without allocating at steady state. expfmt's TextParser cost
// ~30 µs and ~150 allocations a scrape on those ten lines, most of a
// scrape's parsing (docs/fleet.md); its OpenMetrics decoder parses each
// line with an ABNF engine and takes ~70 ms for a ten-line exposition.
// TestOpenMetricsMatchesDecoder checks the result against that decoder and
// TestKeptMatchesTextParser against TextParser.
func (p *parser) parse(body []byte, openMetrics bool, models []string) (Metrics, error) {
	keep, err := p.mp.filter(body, p.keep[:0], openMetrics)
	p.keep = keep
	if err != nil {
		p.prevOK = false
		if errors.Is(err, errTooManySeries) {
			return Metrics{}, &ScrapeError{ReasonTooLarge, err}
		}
		return Metrics{}, &ScrapeError{ReasonParse, err}
	}
	if p.prevOK && bytes.Equal(keep, p.prev) && slices.Equal(models, p.prevModels) {
		return p.prevM, nil
	}
	p.prevOK = false
	fams, err := p.kp.parse(keep, p.mp)
	if err != nil {
		return Metrics{}, &ScrapeError{ReasonParse, err}
	}
	m, err := p.mp.extract(fams, models)
	if err != nil {
		return Metrics{}, err
	}
	p.prev = append(p.prev[:0], keep...)
	p.prevModels, p.prevM, p.prevOK = models, m, true
	return m, nil
}

// filter appends to dst the sample lines of body that belong to metric
// families the mapping reads, so the expfmt parser
// only builds what is used: a realistic vLLM exposition is ~300 lines of
// which ~10 are kept. Every sample line's metric name is still checked, so
// garbage input is a parse error, not a silently empty exposition. With om
// set, the kept lines are rewritten to the Prometheus text format and a
// missing # EOF (a truncated body) is an error.
func (mp *mapper) filter(body, dst []byte, om bool) ([]byte, error) {
	line := 0
	eof := false
	// prev is the last sample line's metric name (a slice of body) and
	// prevWanted whether the mapping reads it: an exposition lists a
	// family's series together (a histogram's buckets are most of its
	// lines), and a line that starts with the same checked name followed
	// by a delimiter has that name, found with one comparison.
	var prev []byte
	prevWanted := false
	for len(body) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		s := l
		for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
			s = s[1:]
		}
		if len(s) > 0 && s[len(s)-1] == '\r' {
			s = s[:len(s)-1]
		}
		if len(s) == 0 {
			continue
		}
		if eof {
			return dst, fmt.Errorf("line %d: data after # EOF", line)
		}
		var name []byte
		switch s[0] {
		case '#':
			// Comments, # HELP and # TYPE lines are dropped: every mapped
			// quantity is read as a plain value, and each kept line costs
			// the parser allocations.
			if om && string(s) == "# EOF" {
				eof = true
			}
			continue
		case '{':
			// UTF-8 quoted name: {"name", labels…} value
			if len(s) < 2 || s[1] != '"' {
				return dst, fmt.Errorf("line %d: invalid sample", line)
			}
			end := bytes.IndexByte(s[2:], '"')
			if end < 0 {
				return dst, fmt.Errorf("line %d: unterminated metric name", line)
			}
			name = s[2 : 2+end]
		default:
			if n := len(prev); n > 0 && len(s) > n && (s[n] == '{' || s[n] == ' ' || s[n] == '\t') && bytes.Equal(s[:n], prev) {
				name = s[:n]
				break
			}
			i := 0
			if metricNameByte(s[0], true) {
				i = 1
				for i < len(s) && nameBytes[s[i]] != 0 {
					i++
				}
			}
			if i == 0 || (i < len(s) && s[i] != '{' && s[i] != ' ' && s[i] != '\t') {
				return dst, fmt.Errorf("line %d: invalid metric name in %q", line, truncate(s, 40))
			}
			if i == len(s) {
				return dst, fmt.Errorf("line %d: sample without value", line)
			}
			name = s[:i]
		}
		if !bytes.Equal(name, prev) {
			prev, prevWanted = name, mp.wants(name)
		}
		if !prevWanted {
			continue
		}
		if om {
			s = cutAfterValue(s)
		}
		var err error
		if dst, err = mp.appendSample(dst, s, name); err != nil {
			return dst, fmt.Errorf("line %d: %w", line, err)
		}
		dst = append(dst, '\n')
		if len(dst) > maxKeptBytes {
			return dst, errTooManySeries
		}
	}
	if om && !eof {
		return dst, fmt.Errorf("line %d: OpenMetrics data does not end with # EOF", line)
	}
	return dst, nil
}

// maxKeptBytes bounds the mapped series of one exposition (~5000 lines):
// a real server exports a few per model and engine; a server flooding them
// would otherwise cost the parser ~40 ms of CPU per MiB on every scrape.
const maxKeptBytes = 256 << 10

var errTooManySeries = fmt.Errorf("mapped series exceed %d KiB", maxKeptBytes>>10)

// maxKeptLabels bounds the labels kept on one line: the mapping reads a
// handful, and the text parser's cost grows with the square of a line's
// label count.
const maxKeptLabels = 16

// appendSample appends sample line s, whose metric name is name, to dst in
// the legacy text form, keeping only the labels the mapping reads (selector
// labels, the model label, the info labels): vllm:cache_config_info carries
// fifteen, and the parser's cost is quadratic in them. Series that differ
// only in dropped labels stay separate samples, so sums are unchanged. A
// malformed label set is an error.
func (mp *mapper) appendSample(dst, s, name []byte) ([]byte, error) {
	var j int
	if s[0] == '{' {
		// {"name", labels…} value: the name is quoted, labels follow.
		j = 2 + len(name) + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == ',' {
			j++
		} else if j >= len(s) || s[j] != '}' {
			return dst, errors.New("malformed label set")
		}
	} else {
		j = len(name)
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '{' {
			// no labels
			dst = append(dst, name...)
			return append(dst, s[len(name):]...), nil
		}
		j++
	}
	dst = append(dst, name...)
	dst = append(dst, '{')
	kept := 0
	for {
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) {
			return dst, errors.New("unterminated label set")
		}
		if s[j] == '}' {
			j++
			break
		}
		k := j
		for j < len(s) && s[j] != '=' && s[j] != ' ' && s[j] != '\t' && s[j] != '"' {
			j++
		}
		key := s[k:j]
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if len(key) == 0 || j >= len(s) || s[j] != '=' {
			return dst, errors.New("malformed label set")
		}
		j++
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '"' {
			return dst, errors.New("label value not quoted")
		}
		for j++; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' {
				j++
			}
		}
		if j >= len(s) {
			return dst, errors.New("unterminated label value")
		}
		j++ // closing quote
		if mp.keepsLabel(key) {
			if kept++; kept > maxKeptLabels {
				return dst, fmt.Errorf("more than %d labels read by the mapping", maxKeptLabels)
			}
			if kept > 1 {
				dst = append(dst, ',')
			}
			dst = append(dst, s[k:j]...)
		}
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == ',' {
			j++
		} else if j < len(s) && s[j] != '}' {
			return dst, errors.New("malformed label set")
		}
	}
	dst = append(dst, '}')
	return append(dst, s[j:]...), nil
}

func (mp *mapper) keepsLabel(name []byte) bool {
	for _, l := range mp.labels {
		if string(name) == l {
			return true
		}
	}
	return false
}

// cutAfterValue drops what follows a sample's value (an OpenMetrics
// timestamp in seconds, an exemplar), scanning quoted label values so a
// space or brace inside them is not mistaken for the end of the labels.
func cutAfterValue(s []byte) []byte {
	i := 0
	for i < len(s) && s[i] != '{' && s[i] != ' ' && s[i] != '\t' {
		i++
	}
	if i < len(s) && s[i] == '{' {
		inQuote := false
		for i++; i < len(s); i++ {
			c := s[i]
			switch {
			case inQuote && c == '\\':
				i++
			case c == '"':
				inQuote = !inQuote
			case !inQuote && c == '}':
				goto value
			}
		}
		return s // unterminated: leave it to the parser to reject
	value:
		i++
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for i < len(s) && s[i] != ' ' && s[i] != '\t' {
		i++
	}
	return s[:i]
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
