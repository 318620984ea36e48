package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descCalPrefill = prometheus.NewDesc("trimtab_fleet_calibration_prefill_tokens_per_second",
		"Prefill throughput the calibrator publishes for the endpoint: uncached prompt tokens per second when busy prefilling (the prior blended with what was learned).",
		[]string{"endpoint"}, nil)
	descCalDecode = prometheus.NewDesc("trimtab_fleet_calibration_decode_step_seconds",
		"Decode step time the calibrator publishes for the endpoint at its recent batch: the time between two output tokens of a running request.",
		[]string{"endpoint"}, nil)
	descCalPerSeq = prometheus.NewDesc("trimtab_fleet_calibration_decode_seconds_per_sequence",
		"What each running request adds to the endpoint's decode step, in seconds: the slope of the step fitted against the batch each request decoded in, its class's median when it has a class of two or more (the prior blended with what was learned).",
		[]string{"endpoint"}, nil)
	descCalEnginePerSeq = prometheus.NewDesc("trimtab_fleet_calibration_engine_decode_seconds_per_sequence",
		"What each running request adds to the endpoint's decode step apart from its context, in seconds: the engine's own step line fitted against the batch and the context it attended to, less the prefill sharing the steps (until the context term is identified, it holds the context).",
		[]string{"endpoint"}, nil)
	descCalEngineBatch = prometheus.NewDesc("trimtab_fleet_calibration_engine_decode_batch_seconds",
		"What each decoding sequence adds to the endpoint's decode step as the trade law's batch cost reads it (÷ the engine line's fixed seconds), in seconds: the engine line's per-sequence term, less, until a window identifies the context term, the prior's cost per context token at the context that term was fitted at.",
		[]string{"endpoint"}, nil)
	descCalPerCtx = prometheus.NewDesc("trimtab_fleet_calibration_engine_decode_seconds_per_context_token",
		"What each token of context the running requests attend to adds to the endpoint's decode step, in seconds (the engine's step line; the one last identified while contexts are too alike, 0 before any: the context charged to the sequence).",
		[]string{"endpoint"}, nil)
	descCalOutput = prometheus.NewDesc("trimtab_fleet_calibration_output_tokens",
		"Mean output of the endpoint's recent requests, in tokens (0: none reported one).",
		[]string{"endpoint"}, nil)
	descCalKV = prometheus.NewDesc("trimtab_fleet_calibration_kv_capacity_tokens",
		"KV cache capacity the calibrator publishes for the endpoint, in tokens (scraped cache_config_info, else the prior).",
		[]string{"endpoint"}, nil)
	descCalSamples = prometheus.NewDesc("trimtab_fleet_calibration_samples",
		"Observations the endpoint's prefill estimate rests on (0: the prior alone).",
		[]string{"endpoint"}, nil)
	descCalLearned = prometheus.NewDesc("trimtab_fleet_calibration_learned",
		"1 when the endpoint's calibration rests on at least min_samples observations, 0 while it is the prior or blended with it.",
		[]string{"endpoint"}, nil)
	descCalProbes = prometheus.NewDesc("trimtab_fleet_calibration_probes_wanted",
		"Requests the calibrator last asked the scheduler to send the endpoint as probes (scheduler.probe): its share of what its class lacks of min_samples prefill points (0: none).",
		[]string{"endpoint"}, nil)
	descCalObserved = prometheus.NewDesc("trimtab_fleet_calibration_observations_total",
		"Finished requests the request path recorded for the calibrator.", nil, nil)
	descCalDropped = prometheus.NewDesc("trimtab_fleet_calibration_observations_dropped_total",
		"Observations dropped because the calibrator's buffer was full between two steps (calibration.buffer).", nil, nil)
	descCalMin = prometheus.NewDesc("trimtab_fleet_calibration_min_samples",
		"The calibrator's min_samples: observations after which an estimate no longer leans on the prior.", nil, nil)
)

// calCollector reports the calibrator's last snapshot at scrape time.
type calCollector struct{ c *Calibrator }

func (cc *calCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalPrefill, descCalDecode, descCalPerSeq, descCalEnginePerSeq, descCalEngineBatch, descCalPerCtx, descCalOutput, descCalKV, descCalSamples, descCalLearned, descCalProbes, descCalObserved, descCalDropped, descCalMin} {
		ch <- d
	}
}

func (cc *calCollector) Collect(ch chan<- prometheus.Metric) {
	s := cc.c.Snapshot()
	for _, e := range s.Endpoints {
		a := e.Address
		ch <- prometheus.MustNewConstMetric(descCalPrefill, prometheus.GaugeValue, e.Calibration.PrefillTokensPerSecond, a)
		ch <- prometheus.MustNewConstMetric(descCalDecode, prometheus.GaugeValue, e.Calibration.DecodeStepSeconds, a)
		ch <- prometheus.MustNewConstMetric(descCalPerSeq, prometheus.GaugeValue, e.Calibration.DecodeSecondsPerSeq, a)
		ch <- prometheus.MustNewConstMetric(descCalEnginePerSeq, prometheus.GaugeValue, e.Calibration.EngineDecodeSecondsPerSeq, a)
		ch <- prometheus.MustNewConstMetric(descCalEngineBatch, prometheus.GaugeValue, e.Calibration.EngineDecodeBatchSeconds, a)
		ch <- prometheus.MustNewConstMetric(descCalPerCtx, prometheus.GaugeValue, e.Calibration.EngineDecodeSecondsPerContextToken, a)
		ch <- prometheus.MustNewConstMetric(descCalOutput, prometheus.GaugeValue, e.Calibration.OutputTokens, a)
		ch <- prometheus.MustNewConstMetric(descCalKV, prometheus.GaugeValue, e.Calibration.KVCapacityTokens, a)
		ch <- prometheus.MustNewConstMetric(descCalSamples, prometheus.GaugeValue, float64(e.Calibration.Samples), a)
		learned := 0.0
		if e.Source == "learned" {
			learned = 1
		}
		ch <- prometheus.MustNewConstMetric(descCalLearned, prometheus.GaugeValue, learned, a)
		ch <- prometheus.MustNewConstMetric(descCalProbes, prometheus.GaugeValue, float64(e.Calibration.Probes), a)
	}
	ch <- prometheus.MustNewConstMetric(descCalObserved, prometheus.CounterValue, float64(cc.c.ring.Recorded()))
	ch <- prometheus.MustNewConstMetric(descCalDropped, prometheus.CounterValue, float64(cc.c.ring.Dropped()))
	ch <- prometheus.MustNewConstMetric(descCalMin, prometheus.GaugeValue, float64(cc.c.cfg.MinSamples))
}
