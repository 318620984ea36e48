package proxy

import (
	"sort"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/trimtab/trimtab/scheduler"
)

// Dynamic metadata of Config.ExtProc.EmitScores.
const (
	// ScoresKey, in DestinationNamespace (envoy.lb), maps each listed
	// endpoint ("ip:port") to its total score, as llm-d-router's
	// --emit-endpoint-scores does.
	ScoresKey = DestinationHeader + "-scores"
	// ScoresNamespace holds the explanation of the decision:
	//
	//	chosen           "ip:port" of the pick
	//	weights_version  version of the weights in force
	//	mode             configurator mode ("static", "calm", "rebalance", …)
	//	weights          {scorer: weight}
	//	candidates       how many endpoints were scored
	//	endpoints        [{address, total, scores: {scorer: score in [0,1]},
	//	                   over_bound (only when true)}], the chosen endpoint
	//	                 first, then the others by total score, at most
	//	                 emit_scores_top
	//
	// An access log prints it with %DYNAMIC_METADATA(trimtab)% or one key
	// with %DYNAMIC_METADATA(trimtab:endpoints)%.
	ScoresNamespace = "trimtab"
)

// addScores adds x's scores to md, the answer's dynamic metadata (which
// already holds the DestinationNamespace struct), listing at most top
// endpoints. It allocates; it runs only when EmitScores is set.
func addScores(md *structpb.Struct, x scheduler.Explanation, top int) {
	cands := listedCandidates(x, top)
	totals := make(map[string]*structpb.Value, len(cands))
	eps := make([]*structpb.Value, len(cands))
	for i, c := range cands {
		totals[c.Address] = structpb.NewNumberValue(c.Total)
		scores := make(map[string]*structpb.Value, len(c.Scores))
		for name, v := range c.Scores {
			scores[name] = structpb.NewNumberValue(v)
		}
		f := map[string]*structpb.Value{
			"address": structpb.NewStringValue(c.Address),
			"total":   structpb.NewNumberValue(c.Total),
			"scores":  structpb.NewStructValue(&structpb.Struct{Fields: scores}),
		}
		if c.OverBound {
			f["over_bound"] = structpb.NewBoolValue(true)
		}
		eps[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	if lb := md.GetFields()[DestinationNamespace].GetStructValue(); lb != nil {
		lb.Fields[ScoresKey] = structpb.NewStructValue(&structpb.Struct{Fields: totals})
	}
	weights := make(map[string]*structpb.Value, len(x.Weights))
	for name, w := range x.Weights {
		weights[name] = structpb.NewNumberValue(w)
	}
	md.Fields[ScoresNamespace] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"chosen":          structpb.NewStringValue(x.Chosen),
		"weights_version": structpb.NewNumberValue(float64(x.WeightsVersion)),
		"mode":            structpb.NewStringValue(x.Mode),
		"weights":         structpb.NewStructValue(&structpb.Struct{Fields: weights}),
		"candidates":      structpb.NewNumberValue(float64(len(x.Candidates))),
		"endpoints":       structpb.NewListValue(&structpb.ListValue{Values: eps}),
	}})
}

// listedCandidates returns the chosen candidate followed by the others
// in decreasing total score (ties in address order), at most top of them.
func listedCandidates(x scheduler.Explanation, top int) []scheduler.CandidateScore {
	cands := make([]scheduler.CandidateScore, len(x.Candidates))
	copy(cands, x.Candidates)
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if ac, bc := a.Address == x.Chosen, b.Address == x.Chosen; ac != bc {
			return ac
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Address < b.Address
	})
	return cands[:min(top, len(cands))]
}
