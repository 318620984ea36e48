package configs

import (
	"strings"
	"testing"
	"time"
)

func TestFlowSection(t *testing.T) {
	f, err := Parse([]byte(`scorers:
  - {type: queue, weight: 1}
flow:
  enabled: true
  ttl: 5s
  bands:
    - {name: chat, ttl: 2s}
    - {name: batch, sheddable: true}
  default_band: batch
  model_bands: {llama: chat}
  saturation: {capacity_tokens: 32000, queue_depth: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	fl := f.Flow
	// Untouched keys keep their defaults: threshold 0.8, max_queue 1024.
	if !fl.Enabled || fl.TTL != 5*time.Second || len(fl.Bands) != 2 || fl.Bands[0].TTL != 2*time.Second ||
		!fl.Bands[1].Sheddable || fl.ModelBands["llama"] != "chat" || fl.Saturation.CapacityTokens != 32000 ||
		fl.Saturation.QueueDepth != 3 || fl.Saturation.Threshold != 0.8 || fl.MaxQueue != 1024 {
		t.Fatalf("flow: %+v", fl)
	}
	if _, err := Parse([]byte("scorers:\n  - {type: queue, weight: 1}\nflow:\n  default_band: urgent\n")); err == nil ||
		!strings.Contains(err.Error(), "flow.default_band") {
		t.Fatalf("unknown default band: %v, want an error naming flow.default_band", err)
	}
}
