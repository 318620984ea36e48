package bench

import (
	"fmt"
	"math"
	"slices"

	"github.com/trimtab/trimtab/sim/report"
	"github.com/trimtab/trimtab/sim/scenario"
)

// PromptCheck compares the prompt sizes a run's servers reported
// (usage.prompt_tokens) with the sizes bench meant to send: a server
// whose tokenizer sees far fewer tokens than intended does no prefill
// work for them and caches nothing of them, so the run measures another
// workload than the scenario's.
type PromptCheck struct {
	// Reported counts the successful requests whose server reported
	// prompt_tokens; Off those whose count differs from the intended size
	// by more than PromptOffFactor either way.
	Reported, Off int
	// Ratio is the median of reported ÷ intended over the Reported
	// requests (NaN when none).
	Ratio float64
	// OffEndpoints names the pods that served an Off request, sorted
	// ("" when the response did not name its pod).
	OffEndpoints []string
}

// PromptOffFactor is how far a reported prompt size may be from the
// intended one before bench warns.
const PromptOffFactor = 2

// checkPrompts compares the reported and intended prompt sizes of reqs'
// successful requests.
func checkPrompts(reqs []Request) PromptCheck {
	var pc PromptCheck
	var ratios []float64
	for i := range reqs {
		r := &reqs[i]
		if r.Err != "" || !r.PromptKnown || r.IntendedTokens <= 0 {
			continue
		}
		pc.Reported++
		x := float64(r.PromptTokens) / float64(r.IntendedTokens)
		ratios = append(ratios, x)
		if x*PromptOffFactor < 1 || x > PromptOffFactor {
			pc.Off++
			if !slices.Contains(pc.OffEndpoints, r.Endpoint) {
				pc.OffEndpoints = append(pc.OffEndpoints, r.Endpoint)
			}
		}
	}
	slices.Sort(pc.OffEndpoints)
	pc.Ratio = math.NaN()
	if len(ratios) > 0 {
		pc.Ratio = report.MedianOf(ratios)
	}
	return pc
}

// Warning is a one-line warning when some request's reported prompt size
// was off ("" otherwise).
func (pc PromptCheck) Warning() string {
	if pc.Off == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d requests' usage.prompt_tokens differ from the intended prompt size by more than %d× "+
		"(median reported ÷ intended %.3g; pods %q): the servers' tokenizer does not see the scenario's prompts, "+
		"so prefill and prefix caching are not what the scenario models", pc.Off, pc.Reported, PromptOffFactor, pc.Ratio, pc.OffEndpoints)
}

// promptWords writes four bytes a token: this fails to compile unless
// scenario.BytesPerToken is 4.
const _ = uint(scenario.BytesPerToken-4) + uint(4-scenario.BytesPerToken)

// Syllables for promptWords: 16 consonants and 4 vowels.
const (
	wordConsonants = "bcdfghjklmnprstv"
	wordVowels     = "aeio"
)

// promptWords appends prompt (a scenario.Rendered prompt: scenario.BytesPerToken
// letters 'a'…'p' per token) rendered as words to dst: each token's four
// bytes become a three-letter syllable (consonant, vowel, consonant) and
// a space. A tokenizer that splits on white space then counts one token
// per intended token, and a BPE tokenizer one or two (common syllables
// after a space are single tokens). The output has the input's length,
// and each 4-byte group depends on that group's bytes alone, so two
// prompts that share their first k tokens share their first 4k bytes of
// words; two different tokens become the same word with chance 1/1024
// (a 16-token block of different tokens matches with chance 2⁻¹⁶⁰).
// Trailing bytes that do not make a whole token become consonants.
func promptWords(dst, prompt []byte) []byte {
	n := len(prompt) &^ 3
	for i := 0; i < n; i += 4 {
		a, b, c, d := prompt[i]&15, prompt[i+1]&15, prompt[i+2]&15, prompt[i+3]&15
		dst = append(dst, wordConsonants[a], wordVowels[(b^d>>2)&3], wordConsonants[c^d], ' ')
	}
	for _, x := range prompt[n:] {
		dst = append(dst, wordConsonants[x&15])
	}
	return dst
}
