package prefix

// What the external tests (package prefix_test, which may import package
// scorers for the whole in-tree profile) need of the package's insides.

import "github.com/trimtab/trimtab/scheduler"

// HashOnly returns p without its index (hashOnly).
func HashOnly(p *Scorer) scheduler.Scorer { return hashOnly{p} }

// HashedBytes is how many leading bytes of prompt p hashes.
func HashedBytes(p *Scorer, prompt []byte) int { return p.blocks(prompt) * p.blockBytes }

// Test helpers of the package's own tests.
var (
	CheckIndex  = checkIndex
	Prompt      = prompt
	SmallConfig = smallPrefix
)

// hashOnly is the prefix scorer without its index: it hashes the request's
// blocks as Scorer.Score does, then scores every candidate 0 and records
// nothing. BenchmarkPickWithoutIndex uses it to measure what a pick costs
// before the index does any work.
type hashOnly struct{ p *Scorer }

func (hashOnly) Category() scheduler.Category { return scheduler.CategoryAffinity }

func (h hashOnly) Score(cs *scheduler.CycleState, req *scheduler.Request, _ []*scheduler.Endpoint, out []float64) {
	if n := h.p.blocks(req.Prompt); n > 0 {
		h.p.hashBlocks(h.p.scratch(cs), req, n)
	}
	clear(out)
}
