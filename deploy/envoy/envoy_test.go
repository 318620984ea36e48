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

func TestEnvoyConfigOriginalDstUsesDestinationHeader(t *testing.T) {
	doc := load(t)
	sr, _ := doc["static_resources"].(map[string]any)
	clusters, _ := sr["clusters"].([]any)
	for _, c := range clusters {
		c, _ := c.(map[string]any)
		if c["type"] != "ORIGINAL_DST" {
			continue
		}
		od, _ := c["original_dst_lb_config"].(map[string]any)
		if od["use_http_header"] != true || od["http_header_name"] != proxy.DestinationHeader {
			t.Errorf("cluster %v: original_dst_lb_config %v, want use_http_header: true, http_header_name: %s", c["name"], od, proxy.DestinationHeader)
		}
		return
	}
	t.Fatal("envoy.yaml has no ORIGINAL_DST cluster")
}
