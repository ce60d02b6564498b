package replay

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/master"
)

// TestKeyIsTheMastersFormula: the simulator orders evictions with the
// master's own LeasePolicy, defaults included.
func TestKeyIsTheMastersFormula(t *testing.T) {
	def := LeasePolicy{}.WithDefaults()
	mpol, err := master.NewLeasePolicy(master.DefaultLeasePolicy, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if def.Kind != mpol.Name() || def.LeaseTTL != master.DefaultLeaseTTL {
		t.Fatalf("defaults differ: %+v vs master %s", def, mpol.Name())
	}
	custom := LeasePolicy{Kind: PolicyFrequency, FrequencyBonus: 7 * time.Second, FrequencyMaxBonus: 20 * time.Second}
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 10000; i++ {
		d, reads := r.Int64N(1<<50), uint32(r.IntN(6))
		if i%7 == 0 {
			reads = r.Uint32()
		}
		if got, want := def.Key(d, reads), mpol.EvictionKey(d, reads); got != want {
			t.Fatalf("default: Key(%d,%d) = %d, master %d", d, reads, got, want)
		}
		mc := master.FrequencyPolicy{Bonus: custom.FrequencyBonus, MaxBonus: custom.FrequencyMaxBonus}
		if got, want := custom.Key(d, reads), mc.EvictionKey(d, reads); got != want {
			t.Fatalf("custom: Key(%d,%d) = %d, master %d", d, reads, got, want)
		}
		if got := (LeasePolicy{Kind: PolicyPlain}).Key(d, reads); got != d {
			t.Fatalf("plain: Key(%d,%d) = %d", d, reads, got)
		}
	}
	if got := def.Key(0, 1); got != int64(270*time.Second) {
		t.Fatalf("one read: bonus %v, want 270s", time.Duration(got))
	}
}
