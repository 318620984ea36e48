package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trimtab/trimtab/sim"
	"github.com/trimtab/trimtab/sim/report"
)

func newSimOracleCmd() *cobra.Command {
	var (
		scenarios []string
		engines   []string
		policies  []string
		profiles  []string
		seed      uint64
		seeds     int
		budget    int
		parallel  int
		duration  time.Duration
		out       string
		commit    string
		heldBack  string
		startFrom []string
		rescore   string
	)
	cmd := &cobra.Command{
		Use:   "oracle [--engines a,b] [--policies a,b] [--seeds K] [--budget N] --out DIR",
		Short: "Score every policy against each engine calibration's best static vector",
		Long: `oracle finds, for each engine calibration, the oracle: the best single static
weight vector for that fleet (trimtab sim tune's search, --budget vectors) over
the shipped adaptive profile's scorers plus token-load, every vector under the
profile's scheduler.guard with the loop off. It then runs every policy on the
same scenarios and seeds, and scores vectors and policies with the tune
objective against the same per-cell bests (over every vector and every policy
of that calibration).

It writes DIR/oracle.json (per calibration and policy: score, score ÷ the
oracle's, worst, mean, and per cell TTFT p99, E2E p99, tok/s, goodput, misses)
and DIR/oracle.md (the policy × calibration table of score ÷ oracle, the
oracles, adaptive against every other policy cell by cell).

--held-back DIR runs the held-back check instead of a search: each
calibration scores the oracle vector an earlier run (DIR/oracle.json, on
other seeds) chose, beside the policies, against per-cell bests over those
alone. Run the search on seeds 1–3 and the held-back check on seeds 4–6.

--start-from DIR (repeatable) also starts the search from the oracle vectors
of earlier runs, matched to this search's scorers by name, so a search whose
baselines moved (a new trade shape) cannot end weaker than an oracle found
before for want of starting near it. Pass the calibration's last search run.

--rescore DIR runs the policies of an earlier search run (DIR/oracle.json)
again — its calibrations, scenarios, duration, seeds and built-in policies
unless given — and scores them against the per-cell bests over its searched
vectors (stored in it), the policies run and the stored cells of its policies
not run: the search's scoring without its search, for a profile that changed
since. The oracle vector runs again beside them and stays the oracle (another
searched vector might now score higher; the search would tell). A held-back
check of the result (--held-back on the new directory) follows as for a
search.

The default suite is ` + strings.Join(sim.OracleSuite, ", ") + `;
"--scenario all" runs every shipped scenario. Calibrations: ` + strings.Join(sim.EngineNames(), ", ") + `
(default all) or files. "trimtab sim oracle doc" puts two runs' tables into
docs/benchmarks.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case out == "":
				return fmt.Errorf("--out: required")
			case seeds < 1:
				return fmt.Errorf("--seeds: must be ≥ 1")
			case budget < 1:
				return fmt.Errorf("--budget: must be ≥ 1")
			}
			var re *sim.OracleFile
			if rescore != "" {
				var err error
				if re, err = readOracleFlag("rescore", rescore); err != nil {
					return err
				}
				if heldBack != "" || len(startFrom) > 0 {
					return fmt.Errorf("--rescore: a re-score neither searches (--start-from) nor checks held-back seeds (--held-back); drop them")
				}
				if len(re.Seeds) == 0 || len(re.Calibrations) == 0 {
					return fmt.Errorf("--rescore: %s names no seeds or no calibrations", rescore)
				}
				fl := cmd.Flags()
				if !fl.Changed("seed") && !fl.Changed("seeds") {
					seed, seeds = re.Seeds[0], len(re.Seeds)
				}
				if !fl.Changed("scenario") {
					scenarios = re.Scenarios
				}
				if !fl.Changed("duration") && re.Duration != "" {
					if duration, err = time.ParseDuration(re.Duration); err != nil {
						return fmt.Errorf("--rescore: %s: duration: %w", rescore, err)
					}
				}
				if !fl.Changed("engines") {
					engines = nil
					for _, c := range re.Calibrations {
						engines = append(engines, c.Engine)
					}
				}
				if !fl.Changed("policies") && !fl.Changed("profile") {
					policies = nil
					for _, p := range re.Calibrations[0].Policies {
						policies = append(policies, p.Name)
					}
					if _, err := sim.Policies(policies); err != nil {
						return fmt.Errorf("--rescore: the re-scored run's policies include one that is not built in (%w): name the policies (--policies, --profile)", err)
					}
				}
			}
			if len(scenarios) == 0 {
				scenarios = sim.OracleSuite
			}
			if _, err := sim.LoadScenarios(scenarios, duration); err != nil {
				return fmt.Errorf("--scenario: %w", err)
			}
			if len(engines) == 0 {
				engines = sim.EngineNames()
			}
			for _, e := range engines {
				if _, _, err := sim.LoadEngine(e); err != nil {
					return fmt.Errorf("--engines: %w", err)
				}
			}
			pols, err := sim.Policies(policies)
			if err != nil {
				return fmt.Errorf("--policies: %w", err)
			}
			for _, path := range profiles {
				p, err := sim.LoadProfilePolicy(path)
				if err != nil {
					return fmt.Errorf("--profile: %w", err)
				}
				pols = append(pols, p)
			}
			f, err := sim.OracleProfile()
			if err != nil {
				return err
			}
			var held *sim.OracleFile
			if heldBack != "" {
				if held, err = readOracleFlag("held-back", heldBack); err != nil {
					return err
				}
			}
			var starts []*sim.OracleFile
			for _, p := range startFrom {
				o, err := readOracleFlag("start-from", p)
				if err != nil {
					return err
				}
				starts = append(starts, o)
			}
			if held != nil && len(starts) > 0 {
				return fmt.Errorf("--start-from: a held-back check (--held-back) does not search; drop one of them")
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			if commit == "" {
				commit = gitDescribe()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stderr, start := cmd.ErrOrStderr(), time.Now()
			o, err := sim.RunOracle(ctx, sim.OracleConfig{Scenarios: scenarios, Duration: duration, Engines: engines, Policies: pols,
				Profile: f, Seed: seed, Seeds: seeds, Budget: budget, Parallel: parallel, HeldBack: held, StartFrom: starts, Rescore: re,
				Progress: func(p sim.OracleProgress) { oracleProgress(stderr, start, p) }})
			if err != nil {
				return err
			}
			o.Command, o.Commit, o.Date = commandLine(), commit, start.UTC().Format("2006-01-02")
			if err := report.WriteFile(filepath.Join(out, "oracle.json"), o.WriteJSON); err != nil {
				return err
			}
			if err := report.WriteFile(filepath.Join(out, "oracle.md"), o.WriteMarkdown); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "%d calibrations in %v → %s, %s\n", len(o.Calibrations), time.Since(start).Round(time.Second),
				filepath.Join(out, "oracle.json"), filepath.Join(out, "oracle.md"))
			return nil
		},
	}
	cmd.AddCommand(newSimOracleDocCmd(), newSimOracleMarkdownCmd(), newSimOracleTableCmd())
	fl := cmd.Flags()
	fl.StringSliceVar(&scenarios, "scenario", nil, "scenario YAML file or shipped scenario name (repeatable; \"all\" for every shipped one; default the oracle suite)")
	fl.StringSliceVar(&engines, "engines", nil, "engine calibrations, shipped names or files (default every shipped one)")
	fl.StringSliceVar(&policies, "policies", nil, "policies scored against the oracle (default all)")
	fl.StringSliceVar(&profiles, "profile", nil, "trimtab profile YAML scored as one more policy, named after the file (repeatable)")
	fl.Uint64Var(&seed, "seed", 1, "first seed")
	fl.IntVar(&seeds, "seeds", 3, "number of consecutive seeds each vector and policy runs")
	fl.IntVar(&budget, "budget", 40, "weight vectors the search evaluates per calibration, baselines included")
	fl.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	fl.DurationVar(&duration, "duration", 0, "play each scenario in this simulated time instead")
	fl.StringVar(&out, "out", "", "output directory")
	fl.StringVar(&commit, "commit", "", "commit the results are stamped with (default: git describe --always --dirty, else unknown)")
	fl.StringVar(&heldBack, "held-back", "", "score the oracle vectors of this earlier run (its directory or oracle.json) instead of searching")
	fl.StringVar(&rescore, "rescore", "", "run the policies of this earlier search run (its directory or oracle.json) again on its seeds and score them against its stored search bests")
	fl.StringSliceVar(&startFrom, "start-from", nil, "also start the search from the oracle vectors of this earlier run (its directory or oracle.json; repeatable)")
	return cmd
}

// oracleProgress prints one progress line: where the run is, the time
// spent and the time left at the pace so far (steps of a search that
// converges early count as done at its end, so the estimate errs long).
func oracleProgress(w io.Writer, start time.Time, p sim.OracleProgress) {
	done := (p.Calibration-1)*p.Steps + p.Step
	total := p.Calibrations * p.Steps
	el := time.Since(start)
	eta := time.Duration(float64(el) * float64(total-done) / float64(max(done, 1)))
	what := "vector"
	if p.Name != "vector" {
		what = "policy " + p.Name
	}
	fmt.Fprintf(w, "calibration %d/%d %s: %s, step %d/%d; %v elapsed, ETA %v\n", p.Calibration, p.Calibrations, p.Engine, what, p.Step, p.Steps,
		el.Round(time.Second), eta.Round(time.Second))
}

// readOracleFlag reads the oracle.json a flag names (its directory or the
// file itself).
func readOracleFlag(flag, p string) (*sim.OracleFile, error) {
	if p == "" {
		return nil, fmt.Errorf("--%s: required", flag)
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		p = filepath.Join(p, "oracle.json")
	}
	o, err := sim.ReadOracleFile(p)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return o, nil
}

// gitDescribe names the working tree's commit, or "unknown".
func gitDescribe() string {
	b, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func newSimOracleDocCmd() *cobra.Command {
	var oracleIn, check, doc string
	cmd := &cobra.Command{
		Use:   "doc --oracle DIR|FILE --check DIR|FILE [--doc docs/benchmarks.md]",
		Short: "Rewrite docs/benchmarks.md's oracle section from two oracle runs",
		Long: `doc rewrites the section of --doc between its oracle markers from the
oracle.json of --oracle (seeds 1–3) and of --check (seeds 4–6: the same run,
or its held-back check, sim oracle --held-back):
the policy × calibration table of score ÷ oracle, and, for adaptive against
every other policy, where it scores lower and the cells where it is worse by
more than 2 %. The section depends only on the two files and this command line,
so running it again changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := readOracleFlag("oracle", oracleIn)
			if err != nil {
				return err
			}
			c, err := readOracleFlag("check", check)
			if err != nil {
				return err
			}
			return rewriteSection(doc, sim.RenderOracleDoc(m, c, commandLine()), sim.ReplaceOracleDoc)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&oracleIn, "oracle", "", "the oracle run (seeds 1–3): its directory or its oracle.json")
	fl.StringVar(&check, "check", "", "the check run (seeds 4–6): its directory or its oracle.json")
	fl.StringVar(&doc, "doc", "docs/benchmarks.md", "document whose oracle section is rewritten")
	return cmd
}

func newSimOracleMarkdownCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "md DIR|FILE...",
		Short: "Rewrite oracle runs' oracle.md from their oracle.json",
		Long: `md rewrites each run's oracle.md from its oracle.json (a run's directory or
the file itself), as sim oracle writes it: for runs written before the report
changed, so every oracle.md reads the same way. The file depends only on
oracle.json, so running it again changes nothing.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, p := range args {
				if st, err := os.Stat(p); err == nil && st.IsDir() {
					p = filepath.Join(p, "oracle.json")
				}
				o, err := sim.ReadOracleFile(p)
				if err != nil {
					return err
				}
				md := filepath.Join(filepath.Dir(p), "oracle.md")
				if err := report.WriteFile(md, o.WriteMarkdown); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", md)
			}
			return nil
		},
	}
}

func newSimOracleTableCmd() *cobra.Command {
	var dir, doc string
	cmd := &cobra.Command{
		Use:   "table --dir DIR [--doc docs/benchmarks.md]",
		Short: "Rewrite a document's table of oracle runs from the runs under a directory",
		Long: `table rewrites the section of --doc between its oracle-table markers from
every oracle.json under --dir: one row per calibration, from its search run and
its held-back check (sim oracle --held-back) when there is one — adaptive's and
guard-only's score ÷ the oracle, the best fixed policy, the oracle's vector,
and the cells where adaptive is worse than that vector by more than 5 %.
Each calibration links its search run's oracle.md. The section depends only on
the files and the two flags, so running it again changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir: required")
			}
			section, err := renderOracleTable(dir, doc)
			if err != nil {
				return err
			}
			return rewriteSection(doc, section, sim.ReplaceOracleTable)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "directory of oracle runs (each a directory with oracle.json), searched recursively")
	fl.StringVar(&doc, "doc", "docs/benchmarks.md", "document whose oracle-table section is rewritten")
	return cmd
}

// renderOracleTable renders the oracle-table section of doc from every
// oracle.json under dir, each row linking its run's oracle.md relative to
// doc; the section names the command with the two paths as given.
func renderOracleTable(dir, doc string) (string, error) {
	var runs []sim.OracleRun
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "oracle.json" {
			return err
		}
		o, err := sim.ReadOracleFile(p)
		if err != nil {
			return err
		}
		link, err := filepath.Rel(filepath.Dir(doc), filepath.Join(filepath.Dir(p), "oracle.md"))
		if err != nil {
			return err
		}
		runs = append(runs, sim.OracleRun{File: o, Link: filepath.ToSlash(link)})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("--dir: %w", err)
	}
	if len(runs) == 0 {
		return "", fmt.Errorf("--dir %s: no oracle.json under it", dir)
	}
	section, err := sim.RenderOracleTable(runs, fmt.Sprintf("trimtab sim oracle table --dir %s --doc %s", dir, doc))
	if err != nil {
		return "", fmt.Errorf("--dir %s: %w", dir, err)
	}
	return section, nil
}

// rewriteSection replaces doc's generated section (between the markers
// replace looks for) with section.
func rewriteSection(doc, section string, replace func([]byte, string) ([]byte, error)) error {
	old, err := os.ReadFile(doc)
	if err != nil {
		return fmt.Errorf("--doc: %w", err)
	}
	updated, err := replace(old, section)
	if err != nil {
		return fmt.Errorf("--doc %s: %w", doc, err)
	}
	return report.WriteFile(doc, func(w io.Writer) error { _, err := w.Write(updated); return err })
}
