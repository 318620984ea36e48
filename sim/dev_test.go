//go:build simdev

package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDev(t *testing.T) {
	name := os.Getenv("SC")
	sc, err := ShippedScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("DUR"); d != "" {
		sc.Duration, _ = time.ParseDuration(d)
	}
	var pols []string
	if p := os.Getenv("POL"); p != "" {
		pols = strings.Split(p, ",")
	}
	ps, err := Policies(pols)
	if err != nil {
		t.Fatal(err)
	}
	for _, pf := range strings.Split(os.Getenv("PROFILE"), ",") {
		if pf == "" {
			continue
		}
		pp, err := LoadProfilePolicy(pf)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, pp)
	}
	if l := os.Getenv("LVL"); l != "" {
		var v float64
		fmt.Sscan(l, &v)
		sc.Load.Levels = []float64{v}
	}
	if os.Getenv("NOBURST") != "" {
		sc.Load.Burst = nil
	}
	if b := os.Getenv("BASE"); b != "" {
		fmt.Sscan(b, &sc.Load.Burst.Base)
	}
	if d := os.Getenv("THINK"); d != "" {
		sc.Load.ThinkTime, _ = time.ParseDuration(d)
	}
	start := time.Now()
	sw, err := RunSweep(SweepConfig{Scenario: sc, Policies: ps, Seed: 1, Seeds: 1, Parallel: 2, TracePath: "/work/shared/data/mooncake_conversation_trace.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	for l, row := range sw.Summaries() {
		for _, s := range row {
			fmt.Printf("L=%v %-14s ttft p50 %7.1f p90 %7.1f p99 %7.1f e2e p50 %7.0f p99 %7.0f tok/s %7.0f hit %.2f load %.1f/%.1f n=%v fail=%v to=%v pre=%v wc=%v\n",
				sw.Levels[l], s.Policy, s.TTFTP50, s.TTFTP90, s.TTFTP99, s.E2EP50, s.E2EP99, s.OutputTokensPerSec, s.PrefixHitRate, s.LoadMax, s.LoadMin, s.Measured, s.Failed, s.TimedOut, s.Preemptions, s.WeightChanges)
		}
	}
	for l := range sw.Levels {
		for p := range sw.Policies {
			r := sw.Runs[l][p][0]
			fmt.Printf("%s pods:", r.Policy)
			for _, v := range r.PodLoad {
				fmt.Printf(" %.1f", v)
			}
			fmt.Println()
		}
	}
	if os.Getenv("TL") != "" {
		for p := range sw.Policies {
			r := sw.Runs[0][p][0]
			tl := r.Timeline
			if tl == nil {
				continue
			}
			for k := 0; k < len(tl.T); k += 40 {
				fmt.Printf("%s t=%5.0f sig=%.2f mode=%-9s w=", r.Policy, tl.T[k], tl.Signal[k], tl.Mode[k])
				for j := range tl.Weights {
					fmt.Printf("%.2f ", tl.Weights[j][k])
				}
				fmt.Printf(" load=")
				for i := range tl.PodLoad {
					fmt.Printf("%.0f ", tl.PodLoad[i][k])
				}
				fmt.Println()
			}
		}
	}
	fmt.Println("wall", time.Since(start))
}

func TestTune(t *testing.T) {
	var pols []string
	if p := os.Getenv("POL"); p != "" {
		pols = strings.Split(p, ",")
	}
	for _, name := range strings.Split(os.Getenv("SCS"), ",") {
		sc, err := ShippedScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		if d := os.Getenv("THINK"); d != "" && sc.Load.Mode == ModeClosed {
			sc.Load.ThinkTime, _ = time.ParseDuration(d)
		}
		if d := os.Getenv("DUR"); d != "" {
			sc.Duration, _ = time.ParseDuration(d)
		}
		ps, _ := Policies(pols)
		for _, pf := range strings.Split(os.Getenv("PROFILE"), ",") {
			if pf == "" {
				continue
			}
			pp, err := LoadProfilePolicy(pf)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, pp)
		}
		seeds := 3
		if s := os.Getenv("SEEDS"); s != "" {
			fmt.Sscan(s, &seeds)
		}
		start := time.Now()
		sw, err := RunSweep(SweepConfig{Scenario: sc, Policies: ps, Seed: 1, Seeds: seeds, Parallel: 2, TracePath: "/work/shared/data/mooncake_conversation_trace.jsonl"})
		if err != nil {
			t.Fatal(err)
		}
		for l, row := range sw.Summaries() {
			best50, best99 := 1e18, 1e18
			for _, s := range row {
				best50, best99 = min(best50, s.TTFTP50), min(best99, s.TTFTP99)
			}
			for _, s := range row {
				fmt.Printf("%s L=%v %-14s p50 %7.1f (%+5.1f%%) p99 %7.1f (%+5.1f%%) [%6.1f..%6.1f] tok/s %6.0f hit %.2f load %.1f/%.1f to=%v wc=%v\n",
					sc.Name, sw.Levels[l], s.Policy, s.TTFTP50, 100*(s.TTFTP50/best50-1), s.TTFTP99, 100*(s.TTFTP99/best99-1), s.TTFTP99Min, s.TTFTP99Max, s.OutputTokensPerSec, s.PrefixHitRate, s.LoadMax, s.LoadMin, s.TimedOut, s.WeightChanges)
			}
		}
		fmt.Println(sc.Name, "wall", time.Since(start))
	}
}
