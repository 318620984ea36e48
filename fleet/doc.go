// Package fleet knows what the pool looks like: it discovers model-server
// endpoints, scrapes their /metrics, and publishes the result as an
// immutable Snapshot that the request path and the detector read without
// locks.
//
// Discovery is a Discoverer: Static (a YAML file watched with fsnotify and
// re-read periodically) or Kube (client-go shared informers over pods by
// label selector, the EndpointSlices of a Service, or an InferencePool and
// the pods it selects). A discoverer hands the full target list to its
// Sink (the Fleet) after every change; bad input keeps the previous list
// and is reported through Sink.Error.
//
// Scraping maps each engine's exposition (vLLM, SGLang, TensorRT-LLM, TGI;
// see EngineMapping) to the scheduler.Endpoint load fields. Freshness:
// metrics older than max_age make an endpoint stale; unhealthy_after
// consecutive unreachable scrapes (timeout, refused connection, HTTP
// error) back its scrapes off exponentially, and, unless they were
// timeouts (a busy server may still serve), make it unhealthy, which takes
// it out of routing; one success restores it. Unusable answers (too large, unparsable, missing or
// invalid values) leave the metrics to go stale but never make an
// endpoint unhealthy: the server is up, only its numbers are untrusted.
//
// Concurrency model. Fleet.Run owns every goroutine of the package and
// returns only after all of them ended:
//
//   - one discovery goroutine (Discoverer.Run), which calls Fleet.Update
//     and Fleet.Error sequentially; Kube additionally runs client-go's
//     informer goroutines, stopped by its factories' Shutdown before Run
//     returns; Static runs fsnotify's watcher goroutine, closed likewise;
//   - one publisher goroutine that re-evaluates states and publishes a
//     snapshot every scrape interval when anything changed;
//   - one scrape loop per ready endpoint, started by Update and cancelled
//     when the endpoint leaves or stops being ready (Run waits for all of
//     them on shutdown). At most scrape.concurrency scrapes are in flight
//     at once (a semaphore); the per-scrape timeout bounds each.
//
// Scrape loops write their results into per-endpoint state under a small
// per-endpoint mutex; the publisher copies that state into a new Snapshot
// and swaps it in with an atomic pointer. Readers call Load once and keep
// the snapshot for as long as they need a consistent view. Subscribe gives
// a coalescing notification channel (capacity one, never blocks the
// publisher). All times come from the injected clock.
//
// Calibration. A Calibrator learns each endpoint's prefill throughput,
// decode step and KV capacity from the Observations the scheduler records
// of finished requests (docs/calibration.md). Its Run is one goroutine, a
// ticker on the injected clock that drains the observation buffer, steps
// the estimator and publishes with Scheduler.SetCalibration; the
// simulator calls Tick on virtual time instead. The last result is an
// immutable snapshot behind an atomic pointer, which the metrics and the
// admin views read.
package fleet
