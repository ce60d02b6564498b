package target_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/target"
)

// TestConcurrentFileIO drives an O_DIRECT file namespace with many reads
// and writes in flight at once on one queue (so commands arrive back to
// back and their disk transfers are started, batched and submitted by the
// reader goroutine): 128 KiB writes through R2T, 4 KiB in-capsule writes,
// and reads of both, from 16 goroutines each owning its own region, then
// checks every byte, with and without digests, and the namespace counters.
func TestConcurrentFileIO(t *testing.T) {
	for _, tc := range []struct {
		dd   bool
		spin time.Duration // target and initiator both poll (nof/sockpoll)
	}{{false, 0}, {true, 0}, {false, 50 * time.Microsecond}, {true, 50 * time.Microsecond}} {
		dd := tc.dd
		t.Run(fmt.Sprintf("ddgst=%v/poll-spin=%v", dd, tc.spin), func(t *testing.T) {
			f, err := namespace.OpenFile(filepath.Join(t.TempDir(), "ns.img"), namespace.FileConfig{Size: 16 << 20})
			if err != nil {
				t.Skipf("O_DIRECT not available here: %v", err)
			}
			defer f.Close()
			tg, addr := newTarget(t, target.Config{PollSpin: tc.spin}, target.Subsystem{Namespaces: []namespace.Namespace{f}})
			c := dial(t, addr, initiator.Config{QueueDepth: 64, HeaderDigest: dd, DataDigest: dd, PollSpin: tc.spin})
			ctx := context.Background()
			const workers, rounds, region = 16, 6, 1 << 20
			var wg sync.WaitGroup
			errc := make(chan error, workers)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					base := int64(w) * region
					for k := 0; k < rounds; k++ {
						big := bytes.Repeat([]byte{byte(w*16 + k + 1)}, 128<<10)
						small := bytes.Repeat([]byte{byte(w*16 + k + 101)}, 4096)
						boff := base + int64(k%4)*(128<<10)
						soff := base + 512<<10 + int64(k%8)*4096
						if err := c.WriteAt(ctx, 1, big, boff); err != nil {
							errc <- err
							return
						}
						if err := c.WriteAt(ctx, 1, small, soff); err != nil {
							errc <- err
							return
						}
						got := make([]byte, 128<<10)
						if err := c.ReadAt(ctx, 1, got, boff); err != nil || !bytes.Equal(got, big) {
							errc <- fmt.Errorf("worker %d round %d: 128 KiB read back differs (%v)", w, k, err)
							return
						}
						if err := c.ReadAt(ctx, 1, got[:4096], soff); err != nil || !bytes.Equal(got[:4096], small) {
							errc <- fmt.Errorf("worker %d round %d: 4 KiB read back differs (%v)", w, k, err)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			st := tg.Stats().Subsystems[0].Namespaces[0]
			if st.WriteOps != workers*rounds*2 || st.ReadOps != workers*rounds*2 ||
				st.WriteBytes != workers*rounds*(128<<10+4096) || st.Errors != 0 {
				t.Fatalf("namespace stats %+v", st)
			}
		})
	}
}
