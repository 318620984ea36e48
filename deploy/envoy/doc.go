// Package envoy holds the Envoy configuration that runs trimtab as the
// endpoint picker (envoy.yaml) and the tests that keep it consistent with
// trimtab: the ext_proc filter decodes strictly into Envoy's
// ExternalProcessor proto (a misspelt field fails) and passes its
// validation rules, and the filter, the route and the model-server
// cluster are checked against what trimtab's ext_proc server needs — the
// body modes, the subset hint and the pick in envoy.lb metadata, retries
// along the fallbacks, and the served endpoint reported back to trimtab.
// The package has no code.
package envoy
