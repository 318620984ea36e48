package sim

import (
	"github.com/trimtab/trimtab/scheduler"
	"github.com/trimtab/trimtab/sim/engine"
)

// calibrate steps every replica's calibrator on virtual time and keeps the
// first one's snapshot for the result.
func (r *runner) calibrate() {
	now := Epoch.Add(r.now)
	for i, rt := range r.routers {
		snap := rt.cal.Tick(now)
		if i == 0 {
			r.res.Calibration = snap.Endpoints
			r.res.CalibrationTruth = r.res.CalibrationTruth[:0]
			for _, e := range snap.Endpoints {
				truth := 0.0
				if j, ok := r.addrIdx[e.Address]; ok && e.MeanPromptTokens > 0 {
					truth = TruePrefillTokensPerSecond(r.servers[j].Config(), e.MeanPromptTokens)
				}
				r.res.CalibrationTruth = append(r.res.CalibrationTruth, truth)
			}
		}
	}
}

// usage is what a vLLM server reports of a finished sequence in its
// response's usage object: prompt_tokens, prompt_tokens_details.
// cached_tokens (the prefix-cache hit at admission) and completion_tokens.
func usage(s *engine.Seq) scheduler.Usage {
	return scheduler.Usage{
		PromptTokens:   int64(s.PromptTokens),
		CachedTokens:   int64(s.CachedTokens),
		CachedReported: true,
		OutputTokens:   int64(s.OutputTokens),
	}
}

// TruePrefillTokensPerSecond is the prefill throughput the calibrator
// should learn for an engine cfg whose prompts are typically prompt tokens
// long: the engine prefills max_batched_tokens B prompt tokens per full
// step, which costs step_fixed + B·step_per_prefill_token plus each
// token's attention to the (prompt−1)/2 earlier tokens of its prompt on
// average (cached ones included), prefill_attention_per_1k per 1,000:
//
//	R = B / (step_fixed + B·(step_per_prefill_token + prefill_attention_per_1k·(prompt−1)/2000))
//
// Decodes sharing the step are left out: the calibration is the
// throughput when busy prefilling (scheduler.Calibration).
func TruePrefillTokensPerSecond(cfg engine.Config, prompt float64) float64 {
	b := float64(cfg.MaxBatchedTokens)
	perTok := cfg.StepPerPrefillToken.Seconds() + cfg.PrefillAttentionPer1k.Seconds()*max(prompt-1, 0)/2000
	return b / (cfg.StepFixed.Seconds() + b*perTok)
}
