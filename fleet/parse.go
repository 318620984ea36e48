package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trimtab/trimtab/scheduler"
)

// Scrape failure reasons, the values of the reason label of
// trimtab_scrape_failures_total.
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
	tp   expfmt.TextParser

	// The last successful parse: when the kept lines and the models are
	// the same again (an idle server), its result is reused.
	prev       []byte
	prevModels []string
	prevM      Metrics
	prevOK     bool
}

func newParser(mp *mapper) *parser {
	return &parser{mp: mp, tp: expfmt.NewTextParser(model.UTF8Validation)}
}

// parse maps an exposition to Metrics. openMetrics says the body is
// OpenMetrics 1.0 rather than the Prometheus text format. models are the
// endpoint's models, used to filter series by the mapping's model label.
// Errors are *ScrapeError with reason parse, missing_metric or
// invalid_value.
//
// Both formats are parsed with expfmt.TextParser. An OpenMetrics body is
// first normalised line by line to the text format (the kept lines differ
// only in # EOF, float timestamps and exemplars):
// expfmt v0.73's OpenMetrics decoder parses each line with an ABNF engine
// and takes ~70 ms for a ten-line exposition, far beyond a 50 ms interval.
// TestOpenMetricsMatchesDecoder checks the two agree.
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
	fams, err := p.tp.TextToMetricFamilies(bytes.NewReader(keep))
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
		if !mp.wants(name) {
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

// extract maps parsed families to Metrics.
func (mp *mapper) extract(fams map[string]*dto.MetricFamily, models []string) (Metrics, error) {
	var m Metrics
	var ok bool
	var err error
	if m.Waiting, ok, err = mp.aggregate(fams, mp.waiting, models, false); err != nil {
		return Metrics{}, err
	} else if !ok {
		return Metrics{}, missing("waiting", mp.waiting)
	}
	if m.Running, ok, err = mp.aggregate(fams, mp.running, models, false); err != nil {
		return Metrics{}, err
	} else if !ok {
		return Metrics{}, missing("running", mp.running)
	}
	if len(mp.kv) > 0 {
		if m.KVUtil, ok, err = mp.aggregate(fams, mp.kv, models, true); err != nil {
			return Metrics{}, err
		} else if !ok {
			return Metrics{}, missing("kv_util", mp.kv)
		}
		m.KVUtil = min(m.KVUtil, 1)
	}
	if v, ok, err := mp.aggregate(fams, mp.blockSize, models, true); err != nil {
		return Metrics{}, err
	} else if ok {
		m.CacheBlockSize = int(v)
	}
	if v, ok, err := mp.aggregate(fams, mp.blocks, models, true); err != nil {
		return Metrics{}, err
	} else if ok {
		m.CacheBlocks = int(v)
	}
	if s := mp.latest(fams, mp.cacheInfo, models); s != nil {
		bs, err1 := labelInt(s, mp.bsLabel)
		nb, err2 := labelInt(s, mp.nbLabel)
		if err := errors.Join(err1, err2); err != nil {
			return Metrics{}, &ScrapeError{ReasonInvalidValue, fmt.Errorf("cache_info: %w", err)}
		}
		m.CacheBlockSize, m.CacheBlocks = bs, nb
	}
	if len(models) == 0 && mp.modelLabel != "" {
		m.Models = mp.seenModels(fams, mp.running)
	}
	if s := mp.latest(fams, mp.lora, models); s != nil {
		m.LoRA.Active = splitList(labelValue(s, "running_lora_adapters"))
		m.LoRA.Waiting = splitList(labelValue(s, "waiting_lora_adapters"))
		if v := labelValue(s, "max_lora"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Metrics{}, &ScrapeError{ReasonInvalidValue, fmt.Errorf("lora_info: max_lora %q", v)}
			}
			m.LoRA.Max = n
		}
	}
	return m, nil
}

// seenModels returns the distinct values of the model label on the series
// of the first selector in sels that has any, sorted; nil when none.
func (mp *mapper) seenModels(fams map[string]*dto.MetricFamily, sels []selector) []string {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		var out []string
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) {
				continue
			}
			if v := labelValue(s, mp.modelLabel); v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		slices.Sort(out)
		return out
	}
	return nil
}

func missing(field string, sels []selector) error {
	names := make([]string, len(sels))
	for i, s := range sels {
		names[i] = s.name
	}
	return &ScrapeError{ReasonMissingMetric, fmt.Errorf("%s: none of %s present", field, strings.Join(names, ", "))}
}

// aggregate finds the first selector with matching series and sums them
// (or takes the largest when useMax). ok is false when no selector matched.
func (mp *mapper) aggregate(fams map[string]*dto.MetricFamily, sels []selector, models []string, useMax bool) (v float64, ok bool, err error) {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		byModel := mp.filterByModel(fam, &sels[i], models)
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) || (byModel && !mp.modelIn(s, models)) {
				continue
			}
			x := value(s)
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return 0, false, &ScrapeError{ReasonInvalidValue, fmt.Errorf("%s = %v", sels[i].name, x)}
			}
			switch {
			case !ok:
				v = x
			case useMax:
				v = max(v, x)
			default:
				v += x
			}
			ok = true
		}
		if ok {
			return v, true, nil
		}
	}
	return 0, false, nil
}

// latest returns the matching series with the largest value of the first
// selector that matches any (info gauges whose value is a timestamp or 1).
func (mp *mapper) latest(fams map[string]*dto.MetricFamily, sels []selector, models []string) *dto.Metric {
	for i := range sels {
		fam := fams[sels[i].name]
		if fam == nil {
			continue
		}
		byModel := mp.filterByModel(fam, &sels[i], models)
		var best *dto.Metric
		for _, s := range fam.GetMetric() {
			if !sels[i].matches(s) || (byModel && !mp.modelIn(s, models)) {
				continue
			}
			if best == nil || value(s) > value(best) {
				best = s
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// filterByModel reports whether series of fam should be restricted to the
// endpoint's models: true when the mapping has a model label, the endpoint
// lists models and at least one matching series names one of them. A
// server that labels its series with a name we do not know keeps all its
// series rather than none.
func (mp *mapper) filterByModel(fam *dto.MetricFamily, sel *selector, models []string) bool {
	if mp.modelLabel == "" || len(models) == 0 {
		return false
	}
	for _, s := range fam.GetMetric() {
		if sel.matches(s) && mp.modelIn(s, models) {
			return true
		}
	}
	return false
}

func (mp *mapper) modelIn(s *dto.Metric, models []string) bool {
	v := labelValue(s, mp.modelLabel)
	for _, m := range models {
		if v == m {
			return true
		}
	}
	return false
}

func (sel *selector) matches(s *dto.Metric) bool {
	for _, lm := range sel.labels {
		if labelValue(s, lm.name) != lm.value {
			return false
		}
	}
	return true
}

func labelValue(s *dto.Metric, name string) string {
	for _, lp := range s.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func labelInt(s *dto.Metric, name string) (int, error) {
	v := labelValue(s, name)
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("label %s=%q is not a non-negative integer", name, v)
	}
	return n, nil
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	}
	return math.NaN()
}

// splitList splits a comma-separated label value, dropping empty items.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
