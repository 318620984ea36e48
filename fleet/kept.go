package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
)

// keptParser turns the kept lines of an exposition (mapper.filter's output:
// `name{label="value",…} value [timestamp]`, one sample a line, only the
// mapping's families and labels) into untyped metric families for
// mapper.extract. It accepts and rejects what expfmt.TextParser does on
// such lines (value syntax, escapes, UTF-8 label values, duplicate label
// names, timestamp) but builds nothing new at steady state: the metrics,
// label pairs and label strings of the previous scrape are reused line by
// line, so a server whose label values do not change costs no allocation.
// Not safe for concurrent use.
type keptParser struct {
	fams    map[string]*dto.MetricFamily
	famPool map[string]*dto.MetricFamily // every family built so far, by name
	metrics []*keptMetric                // by kept line, reused
	unq     []byte                       // unescaping scratch
}

// keptMetric is one sample's storage: the dto message and what its
// pointers point to.
type keptMetric struct {
	m      dto.Metric
	u      dto.Untyped
	v      float64
	pairs  []dto.LabelPair
	ptrs   []*dto.LabelPair
	names  []string
	values []string
}

func newKeptParser() *keptParser {
	return &keptParser{fams: map[string]*dto.MetricFamily{}, famPool: map[string]*dto.MetricFamily{}}
}

// parse parses kept (every line ending in '\n'); mp supplies the canonical
// family and label names. The families it returns are valid until the
// next call.
func (kp *keptParser) parse(kept []byte, mp *mapper) (map[string]*dto.MetricFamily, error) {
	for _, f := range kp.fams {
		f.Metric = f.Metric[:0]
	}
	clear(kp.fams)
	line := 0
	for len(kept) > 0 {
		i := bytes.IndexByte(kept, '\n')
		if i < 0 {
			i = len(kept)
		}
		l := kept[:i]
		kept = kept[min(i+1, len(kept)):]
		if line == len(kp.metrics) {
			kp.metrics = append(kp.metrics, &keptMetric{})
		}
		km := kp.metrics[line]
		line++
		name, err := kp.sample(l, km, mp)
		if err != nil {
			return nil, fmt.Errorf("mapped line %d: %w", line, err)
		}
		f := kp.famPool[name]
		if f == nil {
			t, n := dto.MetricType_UNTYPED, name // n escapes, name does not
			f = &dto.MetricFamily{Name: &n, Type: &t}
			kp.famPool[name] = f
		}
		kp.fams[name] = f
		f.Metric = append(f.Metric, &km.m)
	}
	return kp.fams, nil
}

// sample parses one kept line into km and returns its family name, one of
// mp.names.
func (kp *keptParser) sample(l []byte, km *keptMetric, mp *mapper) (string, error) {
	j := 0
	for j < len(l) && l[j] != '{' && l[j] != ' ' && l[j] != '\t' {
		j++
	}
	name, ok := mp.canonicalName(l[:j])
	if !ok {
		return "", fmt.Errorf("unexpected metric %q", truncate(l[:j], 40))
	}
	km.names, km.values = km.names[:0], km.values[:0]
	if j < len(l) && l[j] == '{' {
		j++
		for {
			j = skipBlank(l, j)
			if j < len(l) && l[j] == '}' {
				j++
				break
			}
			k := j
			for j < len(l) && l[j] != '=' && l[j] != ' ' && l[j] != '\t' {
				j++
			}
			key, ok := mp.canonicalLabel(l[k:j])
			if !ok {
				return "", fmt.Errorf("unexpected label %q", truncate(l[k:j], 40))
			}
			if j = skipBlank(l, j); j >= len(l) || l[j] != '=' {
				return "", errors.New("malformed label set")
			}
			if j = skipBlank(l, j+1); j >= len(l) || l[j] != '"' {
				return "", errors.New("label value not quoted")
			}
			var val []byte
			var err error
			if val, j, err = kp.labelValue(l, j+1); err != nil {
				return "", err
			}
			for _, n := range km.names {
				if n == key {
					return "", fmt.Errorf("duplicate label name %s", key)
				}
			}
			n := len(km.names)
			km.names = append(km.names, key)
			if n < cap(km.values) && km.values[:n+1][n] == string(val) {
				km.values = km.values[:n+1] // same value as last time: keep its string
			} else {
				km.values = append(km.values, string(val))
			}
			if j = skipBlank(l, j); j < len(l) && l[j] == ',' {
				j++
			} else if j >= len(l) || l[j] != '}' {
				return "", errors.New("malformed label set")
			}
		}
	}
	// value [timestamp]
	j = skipBlank(l, j)
	v := j
	for j < len(l) && l[j] != ' ' && l[j] != '\t' {
		j++
	}
	if v == j {
		return "", errors.New("sample without value")
	}
	if bytes.ContainsAny(l[v:j], "pP_") {
		return "", fmt.Errorf("unsupported character in value %q", truncate(l[v:j], 40))
	}
	x, err := strconv.ParseFloat(string(l[v:j]), 64)
	if err != nil {
		return "", fmt.Errorf("value %q: %w", truncate(l[v:j], 40), err)
	}
	if j < len(l) { // a blank after the value: a timestamp must follow
		j = skipBlank(l, j)
		t := j
		for j < len(l) && l[j] != ' ' && l[j] != '\t' {
			j++
		}
		if _, err := strconv.ParseInt(string(l[t:j]), 10, 64); err != nil {
			return "", fmt.Errorf("expected integer as timestamp, got %q", truncate(l[t:j], 40))
		}
		if j < len(l) { // even a blank, as expfmt's TextParser says
			return "", fmt.Errorf("spurious string after timestamp: %q", truncate(l[j:], 40))
		}
	}
	km.fill(x)
	return name, nil
}

// labelValue reads a quoted label value starting after its opening quote
// at l[j:], unescaping \\, \" and \n, and returns it (valid until the next
// call) with the index after the closing quote.
func (kp *keptParser) labelValue(l []byte, j int) ([]byte, int, error) {
	start := j
	for j < len(l) && l[j] != '"' && l[j] != '\\' {
		j++
	}
	var val []byte
	if j < len(l) && l[j] == '"' {
		val = l[start:j] // no escapes: no copy
	} else {
		kp.unq = append(kp.unq[:0], l[start:j]...)
		for ; j < len(l) && l[j] != '"'; j++ {
			if l[j] != '\\' {
				kp.unq = append(kp.unq, l[j])
				continue
			}
			if j++; j >= len(l) {
				break
			}
			switch l[j] {
			case '\\', '"':
				kp.unq = append(kp.unq, l[j])
			case 'n':
				kp.unq = append(kp.unq, '\n')
			default:
				return nil, j, fmt.Errorf("invalid escape sequence '\\%c'", l[j])
			}
		}
		val = kp.unq
	}
	if j >= len(l) {
		return nil, j, errors.New("unterminated label value")
	}
	if !utf8.Valid(val) {
		return nil, j, fmt.Errorf("invalid label value %q", truncate(val, 40))
	}
	return val, j + 1, nil
}

// fill points km's dto message at its value and labels.
func (km *keptMetric) fill(x float64) {
	km.v = x
	km.u.Value = &km.v
	km.m.Untyped = &km.u
	n := len(km.names)
	if cap(km.pairs) < n {
		km.pairs = make([]dto.LabelPair, n)
		km.ptrs = make([]*dto.LabelPair, n)
	}
	km.pairs, km.ptrs = km.pairs[:n], km.ptrs[:n]
	for i := range n {
		km.pairs[i].Name, km.pairs[i].Value = &km.names[i], &km.values[i]
		km.ptrs[i] = &km.pairs[i]
	}
	km.m.Label = km.ptrs
}

func skipBlank(l []byte, j int) int {
	for j < len(l) && (l[j] == ' ' || l[j] == '\t') {
		j++
	}
	return j
}

// canonicalName returns the mapping's own string for family name b.
func (mp *mapper) canonicalName(b []byte) (string, bool) {
	for _, n := range mp.names {
		if n == string(b) {
			return n, true
		}
	}
	return "", false
}

// canonicalLabel returns the mapping's own string for label name b.
func (mp *mapper) canonicalLabel(b []byte) (string, bool) {
	for _, n := range mp.labels {
		if n == string(b) {
			return n, true
		}
	}
	return "", false
}
