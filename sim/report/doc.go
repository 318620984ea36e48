// Package report is the simulator's report kit, shared by `trimtab sim`
// and `trimtab bench`: the machine-readable run summary (RunSummary,
// PhaseSummary, ClassSummary in a SummaryFile), nearest-rank percentiles,
// latencies that count misses at the client timeout (Latencies), and the
// comparison of two policies over many runs (Compare, with the noise
// between seeds or repeats), and the figures' plumbing (Image,
// WriteImages, the palette Color) and the atomic file writer (WriteFile).
//
// The package imports no simulator code; sim and bench each turn their own
// results into RunSummary values. Nothing here starts goroutines; a
// Latencies is not safe for concurrent use.
package report
