package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/bench/chart"
)

// SweepResult is the prefix-hit rate of each policy at each capacity.
type SweepResult struct {
	Trace      string               `json:"trace"`
	Capacities []int                `json:"capacities"`
	Policies   []string             `json:"policies"`
	Rates      map[string][]float64 `json:"prefix_hit_rate"` // policy -> rate per capacity
	Reports    map[string][]*Report `json:"-"`
}

// Sweep simulates t once per (policy, capacity), starting from base options
// (base.CapacityBlocks and base.Policy are overridden). policies nil means
// lru, plain and frequency.
func Sweep(t *Trace, capacities []int, policies []string, base SimOptions) (*SweepResult, error) {
	if len(capacities) == 0 {
		return nil, fmt.Errorf("sweep: no capacities")
	}
	if policies == nil {
		policies = []string{PolicyLRU, PolicyPlain, PolicyFrequency}
	}
	res := &SweepResult{Trace: t.Name, Capacities: capacities, Policies: policies,
		Rates: map[string][]float64{}, Reports: map[string][]*Report{}}
	base.Window = -1
	for _, p := range policies {
		for _, c := range capacities {
			o := base
			o.Policy, o.CapacityBlocks = p, c
			r, err := Simulate(t, o)
			if err != nil {
				return nil, fmt.Errorf("sweep %s at %d blocks: %w", p, c, err)
			}
			res.Rates[p] = append(res.Rates[p], r.Total.PrefixHitRate)
			res.Reports[p] = append(res.Reports[p], r)
		}
	}
	return res, nil
}

// WriteMarkdown writes a table: one row per capacity, one column per policy.
func (s *SweepResult) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Prefix-hit rate, %s\n\n| capacity (blocks) |", s.Trace)
	for _, p := range s.Policies {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---:|")
	for range s.Policies {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for i, c := range s.Capacities {
		fmt.Fprintf(&b, "| %d |", c)
		for _, p := range s.Policies {
			fmt.Fprintf(&b, " %.4f |", s.Rates[p][i])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the result as one JSON object.
func (s *SweepResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteSVG draws hit rate against capacity (log x axis), one line per policy.
func (s *SweepResult) WriteSVG(w io.Writer) error {
	c := &chart.Line{Title: "Prefix-hit rate by DRAM capacity: " + s.Trace, XLabel: "capacity (blocks)",
		YLabel: "prefix-hit rate", LogX: true,
		XTick: func(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }}
	for _, p := range s.Policies {
		ser := chart.Series{Name: p}
		for i, cp := range s.Capacities {
			ser.Points = append(ser.Points, chart.Point{X: float64(cp), Y: s.Rates[p][i]})
		}
		c.Series = append(c.Series, ser)
	}
	return c.WriteSVG(w)
}
