// Package envoy holds the Envoy configuration that runs trimtab as the
// endpoint picker (envoy.yaml) and the test that keeps it valid: the file
// decodes strictly into Envoy's bootstrap proto (a misspelt field or an
// unknown type fails) and passes its validation rules, and the ext_proc
// filter is checked against what trimtab's ext_proc server needs. The
// package has no code.
package envoy
