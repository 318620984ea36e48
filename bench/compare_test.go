package bench

import "testing"

// TestOrderVerdict checks when a real ranking that differs from the
// simulator's is put down to noise: only for pairs the simulator ties or
// whose real spreads overlap.
func TestOrderVerdict(t *testing.T) {
	r := func(p string, v, lo, hi float64) rankRow { return rankRow{p, v, lo, hi} }
	for _, c := range []struct {
		name      string
		sim, real []rankRow
		want      string
	}{
		{"same", []rankRow{r("a", 1, 1, 1), r("b", 2, 2, 2)}, []rankRow{r("a", 10, 9, 11), r("b", 20, 19, 21)}, "same order"},
		{"sim tie", []rankRow{r("a", 398, 398, 398), r("b", 398.2, 398, 398)}, []rankRow{r("b", 400, 399, 401), r("a", 500, 490, 510)}, "order differs within noise"},
		{"real spreads overlap", []rankRow{r("a", 100, 100, 100), r("b", 120, 120, 120)}, []rankRow{r("b", 426, 394, 554), r("a", 548, 414, 566)}, "order differs within noise"},
		{"real spreads apart", []rankRow{r("a", 100, 100, 100), r("b", 120, 120, 120)}, []rankRow{r("b", 300, 290, 310), r("a", 500, 490, 510)}, "order differs"},
		{"one pair apart among three", []rankRow{r("a", 1, 1, 1), r("b", 2, 2, 2), r("c", 3, 3, 3)}, []rankRow{r("a", 10, 9, 11), r("c", 12, 11, 13), r("b", 30, 29, 31)}, "order differs"},
		{"policy missing from the real runs", []rankRow{r("a", 1, 1, 1), r("b", 2, 2, 2)}, []rankRow{r("b", 10, 9, 11)}, "order differs"},
	} {
		if got := orderVerdict(c.sim, c.real); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
