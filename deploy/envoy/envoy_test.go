package envoy_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protojson"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/trimtab/trimtab/proxy"
)

const extProcType = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"

// load decodes envoy.yaml into a generic tree.
func load(t *testing.T) map[string]any {
	t.Helper()
	y, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := sigsyaml.Unmarshal(y, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	return doc
}

// find returns every object in the tree whose "@type" is typ.
func find(v any, typ string) []map[string]any {
	var out []map[string]any
	switch v := v.(type) {
	case map[string]any:
		if v["@type"] == typ {
			out = append(out, v)
		}
		for _, c := range v {
			out = append(out, find(c, typ)...)
		}
	case []any:
		for _, c := range v {
			out = append(out, find(c, typ)...)
		}
	}
	return out
}

// extProcFilter decodes the ext_proc filter's typed_config strictly into
// Envoy's ExternalProcessor proto (a misspelt field fails) and validates it.
func extProcFilter(t *testing.T) *extprocv3.ExternalProcessor {
	t.Helper()
	found := find(load(t), extProcType)
	if len(found) != 1 {
		t.Fatalf("envoy.yaml has %d ext_proc filters, want 1", len(found))
	}
	m := map[string]any{}
	for k, v := range found[0] {
		if k != "@type" {
			m[k] = v
		}
	}
	j, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var ep extprocv3.ExternalProcessor
	if err := protojson.Unmarshal(j, &ep); err != nil {
		t.Fatalf("ext_proc filter does not decode as %s: %v", extProcType, err)
	}
	if err := ep.ValidateAll(); err != nil {
		t.Fatalf("ext_proc filter fails Envoy's validation: %v", err)
	}
	return &ep
}

func TestEnvoyConfigExtProc(t *testing.T) {
	ep := extProcFilter(t)
	pm := ep.GetProcessingMode()
	switch pm.GetRequestBodyMode() {
	case extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocv3.ProcessingMode_BUFFERED:
	default:
		t.Errorf("request_body_mode %v: trimtab can only return the destination in BUFFERED or FULL_DUPLEX_STREAMED", pm.GetRequestBodyMode())
	}
	if pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		t.Errorf("request_trailer_mode %v: full duplex needs SEND so a body ending in trailers is seen", pm.GetRequestTrailerMode())
	}
	if ep.GetAllowModeOverride() && pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		t.Error("allow_mode_override has no effect in FULL_DUPLEX_STREAMED mode (and trimtab never sends mode_override): remove it")
	}
	if ep.GetFailureModeAllow() {
		t.Error("failure_mode_allow: true would let requests through without a destination chosen by trimtab")
	}
	mo := ep.GetMetadataOptions()
	if !slices.Contains(mo.GetForwardingNamespaces().GetUntyped(), proxy.SubsetNamespace) {
		t.Errorf("metadata_options.forwarding_namespaces.untyped %v: want %q so trimtab sees the subset hint",
			mo.GetForwardingNamespaces().GetUntyped(), proxy.SubsetNamespace)
	}
	if !slices.Contains(mo.GetReceivingNamespaces().GetUntyped(), proxy.DestinationNamespace) {
		t.Errorf("metadata_options.receiving_namespaces.untyped %v: want %q, or Envoy drops trimtab's pick from dynamic metadata",
			mo.GetReceivingNamespaces().GetUntyped(), proxy.DestinationNamespace)
	}
}

const overrideHostType = "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost"

// metadataKey renders an Envoy MetadataKey ({key, path: [{key}…]}) as
// "key/path/…".
func metadataKey(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["key"].(string)
	path, _ := m["path"].([]any)
	for _, p := range path {
		p, _ := p.(map[string]any)
		k, _ := p["key"].(string)
		s += "/" + k
	}
	return s
}

// routes returns every route action in the listeners' route configs.
func routes(doc map[string]any) []map[string]any {
	var out []map[string]any
	for _, hcm := range find(doc, "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager") {
		rc, _ := hcm["route_config"].(map[string]any)
		vhs, _ := rc["virtual_hosts"].([]any)
		for _, vh := range vhs {
			vh, _ := vh.(map[string]any)
			rs, _ := vh["routes"].([]any)
			for _, r := range rs {
				r, _ := r.(map[string]any)
				if a, ok := r["route"].(map[string]any); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// Every route's cluster reads trimtab's destination list from the
// envoy.lb metadata, the route retries along it, the cluster records the
// endpoint it connected to in envoy.lb / x-gateway-destination-endpoint-served
// (override_host's selected_host_key), and the ext_proc filter forwards
// envoy.lb back to trimtab on the response messages: without all of these
// the served endpoint never reaches trimtab.
func TestEnvoyConfigReportsServedEndpoint(t *testing.T) {
	ep := extProcFilter(t)
	if fwd := ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(); !slices.Contains(fwd, proxy.DestinationNamespace) {
		t.Errorf("ext_proc metadata_options.forwarding_namespaces.untyped %v: want %q, or trimtab never sees %s",
			fwd, proxy.DestinationNamespace, proxy.ServedKey)
	}
	doc := load(t)
	sr, _ := doc["static_resources"].(map[string]any)
	clusters, _ := sr["clusters"].([]any)
	rs := routes(doc)
	if len(rs) == 0 {
		t.Fatal("envoy.yaml has no route")
	}
	for _, r := range rs {
		name, _ := r["cluster"].(string)
		rp, _ := r["retry_policy"].(map[string]any)
		if n, _ := rp["num_retries"].(float64); n < 1 {
			t.Errorf("route to %q: retry_policy.num_retries %v, want at least 1, or Envoy never tries trimtab's fallbacks", name, rp["num_retries"])
		}
		var cluster map[string]any
		for _, c := range clusters {
			if c, _ := c.(map[string]any); c["name"] == name {
				cluster = c
			}
		}
		if cluster == nil {
			t.Fatalf("route to %q: no such cluster", name)
		}
		oh := find(cluster["load_balancing_policy"], overrideHostType)
		if len(oh) != 1 {
			t.Fatalf("cluster %q has %d override_host policies, want 1", name, len(oh))
		}
		if _, ok := oh[0]["fallback_policy"]; !ok {
			t.Errorf("cluster %q: override_host has no fallback_policy (Envoy requires one)", name)
		}
		var sources []string
		srcs, _ := oh[0]["override_host_sources"].([]any)
		for _, s := range srcs {
			s, _ := s.(map[string]any)
			if h, ok := s["header"]; ok {
				// trimtab overwrites the header, but metadata cannot come from a client at all
				t.Errorf("cluster %q: override_host source header %v: read trimtab's pick from metadata only", name, h)
			}
			sources = append(sources, metadataKey(s["metadata"]))
		}
		if want := proxy.DestinationNamespace + "/" + proxy.DestinationHeader; !slices.Equal(sources, []string{want}) {
			t.Errorf("cluster %q: override_host_sources %v, want [%s]", name, sources, want)
		}
		if got, want := metadataKey(oh[0]["selected_host_key"]), proxy.DestinationNamespace+"/"+proxy.ServedKey; got != want {
			t.Errorf("cluster %q: override_host selected_host_key %q, want %q", name, got, want)
		}
	}
}
