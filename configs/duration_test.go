package configs

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trimtab/trimtab/scorers"
)

// durationKey is one time.Duration setting a profile can hold.
type durationKey struct {
	// segs is the YAML path; a segment ending in "[]" is a list whose
	// first item holds the rest.
	segs []string
	// scorer is the scorer type when the key is in scorers[0].params.
	scorer string
	// cfg is the scorer's Config type (scorer keys only).
	cfg reflect.Type
	// index leads from the File (or the scorer's Config) to the field; -1
	// steps into the first item of a slice.
	index []int
}

// name is the key as errors name it: "adaptive.min_dwell",
// "scheduler.outlier.base_ejection", "idle_timeout" (scorer params).
func (k durationKey) name() string {
	return strings.ReplaceAll(strings.Join(k.segs, "."), "[]", "[0]")
}

// label names the key in subtests: the profile key, or "<scorer type>
// params <key>".
func (k durationKey) label() string {
	if k.scorer != "" {
		return k.scorer + " params " + k.name()
	}
	return k.name()
}

// durationKeys walks t by reflection, as mapstructure decodes it, and
// returns every time.Duration field under prefix.
func durationKeys(t reflect.Type, segs []string, index []int) []durationKey {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Duration]() {
		return []durationKey{{segs: segs, index: index}}
	}
	switch t.Kind() {
	case reflect.Slice:
		if len(segs) == 0 {
			return nil
		}
		last := slicesClone(segs)
		last[len(last)-1] += "[]"
		return durationKeys(t.Elem(), last, append(slicesCloneInt(index), -1))
	case reflect.Struct:
	default:
		return nil
	}
	var out []durationKey
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("mapstructure")
		name, opts, _ := strings.Cut(tag, ",")
		idx := append(slicesCloneInt(index), i)
		switch {
		case name == "-":
			continue
		case strings.Contains(opts, "squash"):
			out = append(out, durationKeys(sf.Type, segs, idx)...)
			continue
		case name == "":
			name = strings.ToLower(sf.Name)
		}
		out = append(out, durationKeys(sf.Type, append(slicesClone(segs), name), idx)...)
	}
	return out
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
func slicesCloneInt(s []int) []int    { return append([]int(nil), s...) }

// allDurationKeys is every duration key of a profile: the File's own
// fields, and the params of every in-tree scorer (each factory is asked to
// decode into its Config, whose type is recorded).
func allDurationKeys(t *testing.T) []durationKey {
	t.Helper()
	keys := durationKeys(reflect.TypeFor[File](), nil, nil)
	for typ, factory := range scorers.InTree() {
		var cfg reflect.Type
		_, _ = factory(typ, func(into any) error { cfg = reflect.TypeOf(into).Elem(); return nil }, scorers.Deps{})
		if cfg == nil {
			continue // takes no params
		}
		for _, k := range durationKeys(cfg, nil, nil) {
			k.scorer, k.cfg = typ, cfg
			keys = append(keys, k)
		}
	}
	if len(keys) < 10 {
		t.Fatalf("found %d duration keys; the walk is broken", len(keys))
	}
	return keys
}

// profileWith renders a minimal profile with the key set to v.
func profileWith(k durationKey, v any) []byte {
	doc := map[string]any{"scorers": []any{map[string]any{"type": "queue", "weight": 1}}}
	if k.scorer != "" {
		params := map[string]any{}
		setPath(params, k.segs, v)
		doc["scorers"] = []any{map[string]any{"type": k.scorer, "weight": 1, "params": params}}
	} else {
		setPath(doc, k.segs, v)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return out
}

func setPath(m map[string]any, segs []string, v any) {
	seg := segs[0]
	if len(segs) == 1 {
		m[seg] = v
		return
	}
	child := map[string]any{}
	if list, ok := strings.CutSuffix(seg, "[]"); ok {
		m[list] = []any{child}
	} else {
		if c, ok := m[seg].(map[string]any); ok {
			child = c
		}
		m[seg] = child
	}
	setPath(child, segs[1:], v)
}

// field follows k.index from v to the duration.
func field(v reflect.Value, index []int) time.Duration {
	for _, i := range index {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if i < 0 {
			v = v.Index(0)
		} else {
			v = v.Field(i)
		}
	}
	return time.Duration(v.Int())
}

// TestDurationKeysRefuseBareNumbers sets every duration key of the profile
// — found by walking the config types, so a new key is covered without
// editing this test — to a number without a unit, and expects the error to
// name the key and the fix. YAML 15 used to decode as 15 ns.
func TestDurationKeysRefuseBareNumbers(t *testing.T) {
	keys := allDurationKeys(t)
	var sawDwell bool
	for _, k := range keys {
		sawDwell = sawDwell || k.name() == "adaptive.min_dwell"
		for _, bare := range []any{15, 1.5, "15"} {
			t.Run(fmt.Sprintf("%s=%#v", k.label(), bare), func(t *testing.T) {
				data := profileWith(k, bare)
				_, err := Parse(data)
				if err == nil {
					t.Fatalf("accepted:\n%s", data)
				}
				want := fmt.Sprintf("%s: %v has no unit; write %vs", k.name(), bare, bare)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			})
		}
	}
	if !sawDwell {
		t.Error("adaptive.min_dwell not among the keys walked")
	}
}

// TestDurationKeysAcceptUnits decodes "15s", "1m30s" and a bare 0 (the
// same in every unit) into every duration key.
func TestDurationKeysAcceptUnits(t *testing.T) {
	for _, k := range allDurationKeys(t) {
		for _, tt := range []struct {
			in   any
			want time.Duration
		}{
			{"15s", 15 * time.Second},
			{"1m30s", 90 * time.Second}, // 60 s + 30 s
			{"250ms", 250 * time.Millisecond},
			{0, 0},
		} {
			t.Run(fmt.Sprintf("%s=%v", k.label(), tt.in), func(t *testing.T) {
				var got time.Duration
				if k.scorer != "" {
					cfg := reflect.New(k.cfg)
					raw := map[string]any{}
					setPath(raw, k.segs, tt.in)
					if err := Decode(raw, cfg.Interface()); err != nil {
						t.Fatal(err)
					}
					got = field(cfg, k.index)
				} else {
					f, err := decode(profileWith(k, tt.in))
					if err != nil {
						t.Fatal(err)
					}
					got = field(reflect.ValueOf(f), k.index)
				}
				if got != tt.want {
					t.Errorf("decoded %v, want %v", got, tt.want)
				}
			})
		}
	}
}

// TestShippedDurationWithUnitStillLoads guards the path the hook replaced:
// a whole profile with durations written the documented way validates.
func TestShippedDurationWithUnitStillLoads(t *testing.T) {
	f, err := Parse([]byte("scorers:\n  - {type: queue, weight: 1}\nadaptive:\n  min_dwell: 1m30s\n  flap_cooldown: 2m\nscheduler:\n  outlier: {base_ejection: 15s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Adaptive.MinDwell != 90*time.Second || f.Scheduler.Outlier.BaseEjection != 15*time.Second {
		t.Errorf("min_dwell %v, base_ejection %v; want 1m30s, 15s", f.Adaptive.MinDwell, f.Scheduler.Outlier.BaseEjection)
	}
}
