package appliance

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/ssd"
)

// removalsWait is how long one TakeRemovals call waits at the master.
const removalsWait = time.Second

// takeRemovals applies the master's removals of this appliance's SSD
// copies (Remove, RemoveAll, RemoveByRegex): it asks the master for them
// (a long poll), records them durably in the SSD tier (ssd.Tier.Remove:
// one write and one fdatasync per batch), and acknowledges them in its
// next call, which is what lets the master's remove return. A batch that
// fails to be recorded is not acknowledged: the master hands it out again.
func (a *Appliance) takeRemovals(ctx context.Context) {
	var outbox, ack uint64
	for ctx.Err() == nil {
		resp, err := a.takeRemovalsOnce(ctx, outbox, ack)
		if err == nil && resp.Outbox != outbox {
			outbox, ack = resp.Outbox, 0 // a new master: nothing of the old one to acknowledge
		}
		if err == nil && len(resp.Removals) > 0 {
			var last uint64
			last, err = a.applyRemovals(ctx, resp.Removals)
			if err == nil {
				ack = last
			}
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		if status.Code(err) == codes.Unimplemented {
			a.log.Warn("master does not hand out removals (older master): removed objects may come back after a restart")
			return
		}
		a.log.Debug("take removals failed", "err", kverr.FromGRPC(err))
		select {
		case <-ctx.Done():
		case <-time.After(takeBackoff):
		}
	}
}

func (a *Appliance) takeRemovalsOnce(ctx context.Context, outbox, ack uint64) (*kvtierpb.TakeRemovalsResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, removalsWait+10*time.Second)
	defer cancel()
	stream, err := a.client.Master().TakeRemovals(cctx, &kvtierpb.TakeRemovalsRequest{
		ClientId: a.cfg.Name, Outbox: outbox, AckThrough: ack, WaitMs: uint32(removalsWait / time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// applyRemovals records rs in the SSD tier and returns the last seq.
// removeMu orders it against offload reports (see done).
func (a *Appliance) applyRemovals(ctx context.Context, rs []*kvtierpb.DiskRemoval) (uint64, error) {
	batch := make([]ssd.Removal, len(rs))
	for i, r := range rs {
		batch[i] = ssd.Removal{Tenant: r.Tenant, Key: string(r.Key), Cutoff: r.Cutoff, Pattern: r.Pattern}
		for _, k := range r.Keep {
			batch[i].Keep = append(batch[i].Keep, ssd.Location{Bucket: k.Bucket, Offset: k.Offset})
		}
	}
	a.removeMu.Lock()
	n, err := a.tier.Remove(ctx, batch)
	a.removeMu.Unlock()
	if err != nil {
		a.log.Warn("ssd removals not recorded; the master will hand them out again", "removals", len(rs), "err", err)
		return 0, err
	}
	a.log.Debug("ssd removals recorded", "removals", len(rs), "objects", n)
	return rs[len(rs)-1].Seq, nil
}

// stillStored checks, before an offload is reported done, that no removal
// took the copy meanwhile. Called with removeMu read-locked: a removal is
// then either recorded before the check (the copy is gone: reported as a
// failure) or after the report reached the master (which refuses a copy a
// pending removal will delete), never in between.
func (a *Appliance) stillStored(t *kvtierpb.OffloadTask, loc ssd.Location) error {
	if e, ok := a.tier.Lookup(t.Tenant, string(t.Key)); !ok || e.Loc != loc {
		return kverr.New(kverr.ObjectNotFound, string(t.Key), "removed on this appliance while being offloaded")
	}
	return nil
}

// putReplacing stores an offload task's bytes. A copy of the key with
// other bytes is stale (the master offloads a key only while it holds no
// SSD copy of it: the old one was removed, its removal not yet here), so
// it is removed durably and the new bytes stored.
func (a *Appliance) putReplacing(ctx context.Context, tenant, key string, value []byte, crc uint32) (*ssd.Pending, error) {
	p, err := a.tier.PutAsync(ctx, tenant, key, value, crc)
	if !kverr.Is(err, kverr.ObjectAlreadyExists) {
		return p, err
	}
	a.removeMu.Lock()
	_, rerr := a.tier.Remove(ctx, []ssd.Removal{{Tenant: tenant, Key: key}})
	a.removeMu.Unlock()
	if rerr != nil {
		return nil, err
	}
	a.log.Debug("ssd: stale copy replaced", "key", key)
	return a.tier.PutAsync(ctx, tenant, key, value, crc)
}

// dropUnwanted removes the copy the master refused (the object is gone or
// a removal of it is pending), so a restart cannot re-register it.
func (a *Appliance) dropUnwanted(tenant, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.removeMu.Lock()
	_, err := a.tier.Remove(ctx, []ssd.Removal{{Tenant: tenant, Key: key}})
	a.removeMu.Unlock()
	if err != nil {
		a.log.Warn("cannot remove an SSD copy the master refused", "key", key, "err", err)
	}
}
