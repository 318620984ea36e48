package configs

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trimtab/trimtab/scorers"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/configuration.md from the config types")

const (
	configDoc = "../docs/configuration.md"
	module    = "github.com/trimtab/trimtab"
	// regenerate is the command that rewrites configDoc.
	regenerate = "go test ./configs -run TestConfigReference -update-docs"
)

// refRow is one profile key of the configuration reference.
type refRow struct {
	path, typ, def, doc string
}

// refSection is one top-level section of the reference.
type refSection struct {
	title string
	rows  []refRow
}

// docIndex reads field doc comments from the Go source of the packages
// the config types live in.
type docIndex struct {
	root     string                                // repository root
	types    map[string]map[string]*ast.StructType // package path → type name → struct
	typeDocs map[string]map[string]string          // package path → type name → doc comment
}

func newDocIndex(root string) *docIndex {
	return &docIndex{root: root, types: map[string]map[string]*ast.StructType{}, typeDocs: map[string]map[string]string{}}
}

// structOf returns the declaration of the named struct type of pkg.
func (x *docIndex) structOf(t *testing.T, pkg, name string) *ast.StructType {
	t.Helper()
	if !strings.HasPrefix(pkg, module) {
		return nil
	}
	types, ok := x.types[pkg]
	if !ok {
		types = map[string]*ast.StructType{}
		x.types[pkg] = types
		docs := map[string]string{}
		x.typeDocs[pkg] = docs
		dir := filepath.Join(x.root, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")))
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("reading the source of %s: %v", pkg, err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					types[ts.Name.Name] = st
					switch {
					case ts.Doc != nil:
						docs[ts.Name.Name] = ts.Doc.Text()
					case gd.Doc != nil && len(gd.Specs) == 1:
						docs[ts.Name.Name] = gd.Doc.Text()
					}
				}
			}
		}
	}
	return types[name]
}

// fieldDoc returns the doc comment of field of the struct type typ, on
// one line, in the profile's words: the struct's Go field names become
// their YAML keys. A field without its own comment that follows one whose
// comment names it (a pair documented together) gets that comment; a
// section without one gets its type's comment.
func (x *docIndex) fieldDoc(t *testing.T, typ reflect.Type, field string) string {
	st := x.structOf(t, typ.PkgPath(), typ.Name())
	if st == nil {
		return ""
	}
	prev, doc := "", ""
	for _, f := range st.Fields.List {
		d := ""
		if f.Doc != nil {
			d = f.Doc.Text()
		} else if f.Comment != nil {
			d = f.Comment.Text()
		}
		if slices.ContainsFunc(f.Names, func(n *ast.Ident) bool { return n.Name == field }) {
			doc = d
			if doc == "" && strings.Contains(prev, field) {
				doc = prev
			}
			break
		}
		if d != "" {
			prev = d
		}
	}
	if doc == "" {
		if sf, ok := typ.FieldByName(field); ok {
			ft := sf.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != durationType {
				x.structOf(t, ft.PkgPath(), ft.Name())
				if td := x.typeDocs[ft.PkgPath()][ft.Name()]; td != "" {
					doc = strings.Replace(td, ft.Name()+" ", "This section ", 1)
				}
			}
		}
	}
	return yamlWords(strings.Join(strings.Fields(doc), " "), typ)
}

// yamlWords replaces typ's Go field names in doc with their YAML keys:
// the leading word always, others when longer than one letter (a lone
// "K" is as often a formula's variable as the field).
func yamlWords(doc string, typ reflect.Type) string {
	keys := map[string]string{}
	var collect func(reflect.Type)
	collect = func(typ reflect.Type) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("mapstructure"), ",")
			switch {
			case strings.Contains(opts, "squash") && sf.Type.Kind() == reflect.Struct:
				collect(sf.Type)
			case sf.IsExported() && name != "" && name != "-":
				keys[sf.Name] = name
			}
		}
	}
	collect(typ)
	if first, rest, ok := strings.Cut(doc, " "); ok && keys[first] != "" {
		doc = "`" + keys[first] + "` " + rest
	}
	names := make([]string, 0, len(keys))
	for n := range keys {
		if len(n) > 1 {
			names = append(names, regexp.QuoteMeta(n))
		}
	}
	if len(names) == 0 {
		return doc
	}
	re := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\b`)
	return re.ReplaceAllStringFunc(doc, func(n string) string { return "`" + keys[n] + "`" })
}

// typeName is a field type in the user's words.
func typeName(t reflect.Type) string {
	if t == durationType {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Struct {
			return "list"
		}
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "map of " + typeName(t.Key()) + " to " + typeName(t.Elem())
	case reflect.Interface:
		return "any"
	case reflect.Struct:
		return "section"
	}
	return t.String()
}

// fmtDuration writes d as a profile would: 1m, not 1m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// defaultOf is v's value as a profile would write it.
func defaultOf(v reflect.Value) string {
	if v.Type() == durationType {
		return "`" + fmtDuration(time.Duration(v.Int())) + "`"
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "unset"
		}
		return defaultOf(v.Elem())
	case reflect.String:
		return "`" + strconv.Quote(v.String()) + "`"
	case reflect.Float32, reflect.Float64:
		return "`" + strconv.FormatFloat(v.Float(), 'g', -1, 64) + "`"
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return "`[]`"
		}
		parts := make([]string, v.Len())
		for i := range parts {
			if e := v.Index(i); e.Kind() == reflect.String {
				parts[i] = e.String()
			} else {
				parts[i] = strings.Trim(defaultOf(e), "`")
			}
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	case reflect.Map:
		if v.Len() == 0 {
			return "`{}`"
		}
		keys := v.MapKeys()
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprint(k.Interface()) + ": " + strings.Trim(defaultOf(v.MapIndex(k)), "`")
		}
		sort.Strings(parts)
		return "`{" + strings.Join(parts, ", ") + "}`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// walk appends a row per key of the struct value v (type t) under prefix,
// recursing into sections. A list of sections documents its items'
// keys under "path[].".
func (x *docIndex) walk(t *testing.T, v reflect.Value, prefix string, rows *[]refRow) {
	typ := v.Type()
	for i := range typ.NumField() {
		sf := typ.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("mapstructure")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if opts == "squash" || strings.Contains(opts, "squash") {
			x.walk(t, fv, prefix, rows)
			continue
		}
		if name == "" {
			t.Errorf("%s.%s has no mapstructure tag: its YAML key is undocumented", typ, sf.Name)
			continue
		}
		path := prefix + name
		doc := x.fieldDoc(t, typ, sf.Name)
		ft := sf.Type
		switch {
		case ft != durationType && ft.Kind() == reflect.Struct:
			*rows = append(*rows, refRow{path, "section", "", doc})
			x.walk(t, fv, path+".", rows)
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
			*rows = append(*rows, refRow{path, "section", defaultOf(fv), doc})
			inner := fv
			if fv.IsNil() {
				inner = reflect.New(ft.Elem())
			}
			x.walk(t, inner.Elem(), path+".", rows)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			*rows = append(*rows, refRow{path, "list", defaultOf(fv), doc})
			x.walk(t, reflect.New(ft.Elem()).Elem(), path+"[].", rows)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			*rows = append(*rows, refRow{path, "map of " + typeName(ft.Key()) + " to section", defaultOf(fv), doc})
			x.walk(t, reflect.New(ft.Elem()).Elem(), path+".<key>.", rows)
		default:
			*rows = append(*rows, refRow{path, typeName(ft), defaultOf(fv), doc})
		}
	}
}

// errCaptured stops a scorer factory once its config has been seen.
var errCaptured = errors.New("config captured")

// scorerConfigs returns each in-tree scorer type's Config, at its
// defaults, by letting the factory decode into it.
func scorerConfigs(t *testing.T) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for typ, factory := range scorers.InTree() {
		var cfg any
		_, err := factory(typ, func(into any) error { cfg = into; return errCaptured }, scorers.Deps{})
		if !errors.Is(err, errCaptured) || cfg == nil {
			t.Fatalf("scorer %q: the factory did not decode its params (%v)", typ, err)
		}
		v := reflect.ValueOf(cfg)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			t.Fatalf("scorer %q decodes into %T, want a pointer to its Config struct", typ, cfg)
		}
		out[typ] = v.Elem()
	}
	return out
}

// configReference builds the reference's sections: one per top-level
// key of the profile, then one per scorer type's params.
func configReference(t *testing.T) []refSection {
	x := newDocIndex("..")
	var rows []refRow
	x.walk(t, reflect.ValueOf(Default()).Elem(), "", &rows)
	var secs []refSection
	for _, r := range rows {
		top, _, _ := strings.Cut(r.path, ".")
		top, _, _ = strings.Cut(top, "[")
		if len(secs) == 0 || secs[len(secs)-1].title != "`"+top+"`" {
			secs = append(secs, refSection{title: "`" + top + "`"})
		}
		secs[len(secs)-1].rows = append(secs[len(secs)-1].rows, r)
	}
	cfgs := scorerConfigs(t)
	types := make([]string, 0, len(cfgs))
	for typ := range cfgs {
		types = append(types, typ)
	}
	slices.Sort(types)
	for _, typ := range types {
		sec := refSection{title: "`scorers[].params` of `type: " + typ + "`"}
		x.walk(t, cfgs[typ], "params.", &sec.rows)
		if len(sec.rows) == 0 {
			sec.rows = []refRow{{"params", "—", "", "This scorer takes no params."}}
		}
		secs = append(secs, sec)
	}
	return secs
}

func renderConfigReference(secs []refSection) string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

Every key of a trimtab profile (the YAML file ` + "`serve --config`" + `, ` + "`sim --profile`" + ` and
` + "`config validate`" + ` read), with its type, its default — what an absent key means — and what it
does. Durations are written as Go durations (` + "`50ms`, `1m30s`" + `); ` + "`[]`" + ` marks a list's
items and ` + "`<key>`" + ` a map's keys. Unknown keys are an error. Which keys reload without a
restart: [operating-adaptive-mode.md](operating-adaptive-mode.md#enable-it).

This page is generated from the config types and their doc comments; do not edit it by hand.
Regenerate it with:

` + "```sh\n" + regenerate + "\n```\n")
	for _, s := range secs {
		fmt.Fprintf(&b, "\n## %s\n\n| key | type | default | description |\n|---|---|---|---|\n", s.title)
		for _, r := range s.rows {
			def := r.def
			if def == "" {
				def = "—"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, r.typ, strings.ReplaceAll(def, "|", `\|`), strings.ReplaceAll(r.doc, "|", `\|`))
		}
	}
	return b.String()
}

// TestConfigReference: docs/configuration.md is what the config types
// say, key by key. It fails when the page drifts from the code; run
// the regenerate command above to rewrite it.
func TestConfigReference(t *testing.T) {
	secs := configReference(t)
	want := renderConfigReference(secs)
	if *updateDocs {
		if err := os.WriteFile(configDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatalf("%v (generate it: %s)", err, regenerate)
	}
	if string(got) != want {
		t.Errorf("docs/configuration.md is out of date with the config types; run: %s", regenerate)
	}
}

// TestConfigReferenceCoversTheProfile: the reference has a row for keys
// from every corner of the profile, with the defaults the code sets, and
// every key of a section has a description.
func TestConfigReferenceCoversTheProfile(t *testing.T) {
	secs := configReference(t)
	rows := map[string]refRow{}
	for _, s := range secs {
		for _, r := range s.rows {
			rows[s.title+" "+r.path] = r
		}
	}
	for _, tt := range []struct{ key, typ, def string }{
		{"`adaptive` adaptive.theta_off", "number", "`0.05`"},           // configurator.DefaultConfig
		{"`adaptive` adaptive.crowd_slack", "number", "`3`"},            // shares CrowdFactor's comment
		{"`adaptive` adaptive.detector.signal", "string", "`\"herd\"`"}, // detector.SignalHerd
		{"`adaptive` adaptive.detector.interval", "duration", "`50ms`"}, // 50 * time.Millisecond
		{"`adaptive` adaptive.d_min", "number", "unset"},                // a nil *float64
		{"`filters` filters", "list of strings", "`[model, healthy]`"},  // Default()
		{"`scorers` scorers[].weight", "number", "unset"},               // required, no default
		{"`scorers[].params` of `type: prefix` params.block_size", "integer", "`64`"},
	} {
		r, ok := rows[tt.key]
		if !ok {
			t.Errorf("no row %s", tt.key)
			continue
		}
		if r.typ != tt.typ || r.def != tt.def {
			t.Errorf("%s: type %s default %s, want %s %s", tt.key, r.typ, r.def, tt.typ, tt.def)
		}
		if r.doc == "" {
			t.Errorf("%s has no description", tt.key)
		}
	}
	for _, top := range []string{"scheduler", "picker", "filters", "scorers", "adaptive", "endpoints", "scrape", "server", "tracing", "replicas"} {
		found := false
		for _, s := range secs {
			found = found || s.title == "`"+top+"`"
		}
		if !found {
			t.Errorf("no section for %s", top)
		}
	}
}
