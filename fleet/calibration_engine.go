package fleet

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// EngineFile renders what the calibrator learned as an engine file for
// `trimtab sim --engine FILE`: YAML with the keys of a scenario's engine:
// section (sim/engine.Config), for an engine of capacity 1, from the
// fleet medians of the endpoints' values divided by their capacity:
//
//   - block_size, num_blocks: the scraped cache config (the prior where no
//     endpoint reported one);
//   - step_fixed, step_per_decode_seq, step_per_context_token: the
//     engine's decode step line (EndpointCalibration's Engine* terms),
//     fitted against the batch each request decoded in and the context
//     that batch attended to, less the prefill that shared its steps;
//   - step_per_prefill_token: 1/R − step_fixed/max_batched_tokens, less
//     the prior's prefill attention at the mean prompt, so that the
//     simulator's engine prefills at the learned R;
//   - max_num_seqs, max_batched_tokens and prefill_attention_per_1k: the
//     prior's (the router cannot observe them).
//
// Comments say which values are learned and from how many samples.
func (c *Calibrator) EngineFile() []byte {
	s := c.Snapshot()
	p := c.cfg.Prior
	var rs, fixeds, perSeqs, perCtxs, kvs, bss, prompts []float64
	samples, learned := 0, 0
	for _, e := range s.Endpoints {
		capy := e.Capacity
		rs = append(rs, e.Calibration.PrefillTokensPerSecond/capy)
		fixeds = append(fixeds, e.EngineStepFixedSeconds*capy)
		perSeqs = append(perSeqs, e.EngineStepPerSeqSeconds*capy)
		perCtxs = append(perCtxs, e.EngineStepPerContextTokenSeconds*capy)
		kvs = append(kvs, e.Calibration.KVCapacityTokens/capy)
		bss = append(bss, float64(e.BlockSize))
		if e.MeanPromptTokens > 0 {
			prompts = append(prompts, e.MeanPromptTokens)
		}
		samples += e.Calibration.Samples
		if e.Source == "learned" {
			learned++
		}
	}
	r := orPrior(medianOf(rs), p.PrefillTokensPerSecond())
	fixed := orPrior(medianOf(fixeds), p.StepFixed.Seconds())
	perSeq, perCtx := medianOf(perSeqs), medianOf(perCtxs)
	if len(perSeqs) == 0 {
		perSeq, perCtx = p.StepPerDecodeSeq.Seconds(), p.StepPerContextToken.Seconds()
	}
	bs := int(orPrior(medianOf(bss), float64(p.BlockSize)))
	blocks := int(orPrior(medianOf(kvs), float64(p.NumBlocks*p.BlockSize))) / max(bs, 1)
	prompt := medianOf(prompts)
	b := float64(p.MaxBatchedTokens)
	attn := p.PrefillAttentionPer1k.Seconds() * max(prompt-1, 0) / 2000
	perTok := max(1/r-fixed/b-attn, 0)

	var w strings.Builder
	fmt.Fprintf(&w, "# Engine learned by trimtab's calibrator at %s from %d endpoints\n", s.At.UTC().Format(time.RFC3339), len(s.Endpoints))
	fmt.Fprintf(&w, "# (%d learned, %d observations; fleet medians per unit of capacity):\n", learned, samples)
	fmt.Fprintf(&w, "# prefill %.0f tokens/s, decode step %.2f ms + %.1f µs per sequence + %.1f ns per context token, mean prompt %.0f tokens.\n", r, fixed*1e3, perSeq*1e6, perCtx*1e9, prompt)
	w.WriteString("# max_num_seqs, max_batched_tokens and prefill_attention_per_1k are the prior's. See docs/calibration.md.\n")
	fmt.Fprintf(&w, "block_size: %d\n", bs)
	fmt.Fprintf(&w, "num_blocks: %d\n", max(blocks, 1))
	fmt.Fprintf(&w, "max_num_seqs: %d\n", p.MaxNumSeqs)
	fmt.Fprintf(&w, "max_batched_tokens: %d\n", p.MaxBatchedTokens)
	fmt.Fprintf(&w, "step_fixed: %dns\n", max(nanos(fixed), 1))
	fmt.Fprintf(&w, "step_per_prefill_token: %dns\n", nanos(perTok))
	fmt.Fprintf(&w, "step_per_decode_seq: %dns\n", nanos(perSeq))
	fmt.Fprintf(&w, "step_per_context_token: %dns\n", nanos(perCtx))
	fmt.Fprintf(&w, "prefill_attention_per_1k: %dns\n", p.PrefillAttentionPer1k.Nanoseconds())
	return []byte(w.String())
}

func orPrior(v, prior float64) float64 {
	if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
		return v
	}
	return prior
}

func nanos(sec float64) int64 { return int64(math.Round(sec * 1e9)) }

// Paths of the calibrator's admin views.
const (
	PathCalibration       = "/debug/calibration"
	PathCalibrationEngine = "/debug/calibration/engine.yaml"
)

// Handler serves the last snapshot as JSON (PathCalibration): per
// endpoint the published values, their source (prior, blended, learned),
// the samples and the fitted terms.
func (c *Calibrator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c.Snapshot())
	})
}

// EngineHandler serves EngineFile (PathCalibrationEngine).
func (c *Calibrator) EngineHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(c.EngineFile())
	})
}
