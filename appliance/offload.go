package appliance

import (
	"context"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/target"
	"github.com/kvtier/kvtier/ssd"
)

// fillHeartbeat adds the NVMe/TCP target's figures, the SSD tier's figures
// and the free offload slots.
//
// NVMe figures go only in beats that already announce a NOF segment: the
// heartbeat loop runs while Start is still in startNVMe, and this beat's
// segment list was read under the client's lock that MountSegment took after
// startNVMe set a.nvme, so seeing a NOF segment orders those writes before
// the reads here.
func (a *Appliance) fillHeartbeat(req *kvtierpb.HeartbeatRequest) {
	req.DramDirectory = !a.cfg.NoDramDirectory // dramdir.go
	req.DramObjects = uint64(a.dir.len())
	nof := false
	for _, s := range req.Segments {
		nof = nof || s.GetType() == kvtierpb.ReplicaType_NOF
	}
	var st target.Stats
	ok := false
	if nof {
		st, ok = a.NVMeStats()
	}
	if ok {
		nv := &kvtierpb.NvmeStats{Addr: a.NVMeAddr(), AuthSucceeded: st.Auth.Succeeded, AuthFailed: st.Auth.Failed, AuthRefused: st.Auth.Refused}
		for _, sub := range st.Subsystems {
			ps := &kvtierpb.NvmeSubsystem{Nqn: sub.NQN}
			for _, n := range sub.Namespaces {
				ps.Namespaces = append(ps.Namespaces, &kvtierpb.NvmeNamespace{Nsid: n.NSID, Size: uint64(max(n.Size, 0)),
					BlockSize: uint32(max(n.BlockSize, 0)), ReadOps: n.ReadOps, ReadBytes: n.ReadBytes,
					WriteOps: n.WriteOps, WriteBytes: n.WriteBytes, OtherOps: n.OtherOps, Errors: n.Errors})
			}
			nv.Subsystems = append(nv.Subsystems, ps)
		}
		for _, h := range st.Hosts {
			nv.Hosts = append(nv.Hosts, &kvtierpb.NvmeHost{Cntlid: uint32(h.CNTLID), HostNqn: h.HostNQN, SubNqn: h.SubNQN,
				RemoteAddr: h.RemoteAddr, IoQueues: uint32(max(h.IOQueues, 0))})
		}
		req.Nvme = nv
	} else if nof {
		req.Nvme = a.spdkStats.Load() // SPDK mode (nil until the first refresh)
	}
	if a.engine != nil {
		req.Unhealthy = append(req.Unhealthy, a.engine.Health()...)
	}
	if err := a.NVMeHealth(); err != nil {
		// A dead NVMe/TCP listener or a vanished SPDK export: the master
		// shows the appliance degraded, with this reason.
		req.Unhealthy = append(req.Unhealthy, "nvme: "+err.Error())
	}
	if a.tier == nil {
		return
	}
	s := a.tier.Stats()
	req.Disk = &kvtierpb.DiskTierStats{
		Capacity: s.Capacity, Used: s.Used, Buckets: uint64(s.Buckets), Objects: uint64(s.Objects),
		OffloadQueue:   uint64(len(a.offload)) + uint64(a.offloadBusy.Load()),
		EvictedBuckets: s.EvictedBuckets, BytesWritten: s.BytesWritten, BytesRead: s.BytesRead,
		QuarantinedBuckets: uint64(s.QuarantinedBuckets), IndexLoaded: true,
		OffloadSkipped: a.skipped.Load(), OffloadFailed: a.failed.Load(),
	}
	if !a.taking.Load() { // else TakeOffload hands out every task
		req.OffloadSlots = uint32(cap(a.offload) - len(a.offload))
	}
}

// onHeartbeatReply queues offload tasks and applies relayed tier settings.
func (a *Appliance) onHeartbeatReply(resp *kvtierpb.HeartbeatResponse) {
	for _, t := range resp.Offload {
		a.queueOffload(t)
	}
	if resp.Settings != nil && a.tier != nil {
		a.applySettings(resp.Settings)
	}
}

// queueOffload hands t to the offload workers.
func (a *Appliance) queueOffload(t *kvtierpb.OffloadTask) {
	select {
	case a.offload <- t:
	default:
		// Full queue: the object keeps its DRAM copy; tell the master
		// so it releases the pin and may offer it again later.
		a.skipped.Add(1)
		go a.report(context.Background(), t, ssd.Location{}, kverr.New(kverr.NoAvailableHandle, string(t.Key), "offload queue full"), true)
	}
}

// takeWait is how long one TakeOffload call waits at the master for a
// first task; takeBackoff is the pause after a failed call (a master
// restarting, or not knowing this appliance until its next beat).
const (
	takeWait    = time.Second
	takeBackoff = 500 * time.Millisecond
	takeMax     = 65536 // the most slots one call may ask for (master.MaxTakeOffloadSlots)
)

// takeOffload asks the master for offload tasks whenever this appliance has
// free slots (TakeOffload), so that an object's offload starts as soon as
// its PutEnd queued it. Heartbeats alone hand out tasks once a second:
// that capped a stream of 1 MiB puts into full DRAM at about 0.3 GB/s
// (puts failing NO_AVAILABLE_HANDLE while DRAM waited for its offloads),
// far below the SSD tier. A master without TakeOffload (Unimplemented)
// leaves the heartbeats as the only dispatch.
func (a *Appliance) takeOffload(ctx context.Context) {
	defer a.taking.Store(false)
	for ctx.Err() == nil {
		free := cap(a.offload) - len(a.offload)
		if free <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-a.slotFreed:
			}
			continue
		}
		err := a.takeOffloadOnce(ctx, free)
		// While calls fail (a master restarting, or one that does not know
		// this appliance yet), heartbeats offer slots again.
		a.taking.Store(err == nil)
		if err == nil || ctx.Err() != nil {
			continue
		}
		if status.Code(err) == codes.Unimplemented {
			a.log.Info("master hands out offload tasks on heartbeats only (it has no TakeOffload)")
			return
		}
		a.log.Debug("take offload failed", "err", kverr.FromGRPC(err))
		select {
		case <-ctx.Done():
		case <-time.After(takeBackoff):
		}
	}
}

// takeOffloadOnce makes one TakeOffload call for up to slots tasks.
func (a *Appliance) takeOffloadOnce(ctx context.Context, slots int) error {
	// The master ends the stream after takeWait; the deadline only guards
	// against a master that stops answering.
	cctx, cancel := context.WithTimeout(ctx, takeWait+10*time.Second)
	defer cancel()
	stream, err := a.client.Master().TakeOffload(cctx, &kvtierpb.TakeOffloadRequest{
		ClientId: a.cfg.Name, Slots: uint32(min(slots, takeMax)), WaitMs: uint32(takeWait / time.Millisecond), Batched: true})
	if err != nil {
		return err
	}
	for {
		t, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		more := t.More
		t.More = nil // queued alone: the others are queued below
		a.queueOffload(t)
		for _, m := range more {
			a.queueOffload(m)
		}
	}
}

func (a *Appliance) applySettings(s *kvtierpb.TierSettings) {
	a.settingsMu.Lock()
	defer a.settingsMu.Unlock()
	prev := a.settings
	if s.SsdPolicy != "" && (prev == nil || prev.SsdPolicy != s.SsdPolicy) {
		if p, err := ssd.ParsePolicy(s.SsdPolicy); err == nil {
			a.tier.SetPolicy(p)
			a.log.Info("ssd policy set", "policy", s.SsdPolicy)
		}
	}
	if s.SsdCapacity > 0 && (prev == nil || prev.SsdCapacity != s.SsdCapacity) {
		a.tier.SetCapacity(s.SsdCapacity)
		a.log.Info("ssd capacity set", "bytes", s.SsdCapacity)
	}
	if s.SsdHighWatermark > 0 && (prev == nil || prev.SsdHighWatermark != s.SsdHighWatermark) {
		if err := a.tier.SetHighWatermark(s.SsdHighWatermark); err != nil {
			a.log.Warn("ssd high watermark refused", "err", err)
		}
	}
	a.settings = s
}

// offloadInFlight is how many written objects the workers together may
// have waiting for their commit and their report before they stop taking
// tasks. The master keeps each one's DRAM source pinned until the report,
// so this bounds nothing here but small structs; it must cover what the
// tier commits in one CommitInterval at full speed (64 per worker capped
// 4 KiB offloads at about 5k objects/s with the 25 ms default).
const offloadInFlight = 16384

// offloadBatchMax is the most results one BatchOffloadDone carries.
const offloadBatchMax = 4096

// offloadCommitWait bounds how long a written object waits for its commit
// once the appliance is stopping (commits take milliseconds).
const offloadCommitWait = 30 * time.Second

// offloadReport is one object on its way to (Batch)OffloadDone.
type offloadReport struct {
	task    *kvtierpb.OffloadTask
	pending *ssd.Pending // nil when err is set
	err     error
	loc     ssd.Location // set by the reporter once the commit is over
}

// runOffload runs the offload workers and their reporter until ctx ends
// and every written object is reported.
func (a *Appliance) runOffload(ctx context.Context, workers int) {
	reports := make(chan offloadReport, offloadInFlight)
	reporterDone := make(chan struct{})
	go func() {
		defer close(reporterDone)
		a.offloadReporter(ctx, reports)
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { a.offloadWorker(ctx, reports) })
	}
	wg.Wait()
	close(reports)
	<-reporterDone
}

// offloadWorker moves objects from DRAM to the SSD tier. It pipelines: it
// writes the next object (ssd.Tier.PutAsync returns once the bytes are
// written) while earlier ones wait for the tier's group commit, so the disk
// is not idle during a commit's fdatasyncs; the reporter tells the master
// about each only once it is durable.
func (a *Appliance) offloadWorker(ctx context.Context, reports chan<- offloadReport) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-a.offload:
			select {
			case a.slotFreed <- struct{}{}:
			default:
			}
			a.offloadBusy.Add(1)
			p, err := a.offloadOne(ctx, t)
			reports <- offloadReport{task: t, pending: p, err: err}
		}
	}
}

// offloadReporter reports objects once their commit is done (or failed),
// in batches: it waits for the oldest unreported object, then sends one
// BatchOffloadDone for every object whose commit is over by then (a group
// commit ends many at once), while the workers go on writing. The master
// marks a LOCAL_DISK replica COMPLETE on a successful report, so a success
// is never sent before the object is durable.
func (a *Appliance) offloadReporter(ctx context.Context, reports <-chan offloadReport) {
	var q []offloadReport // received, not yet reported, oldest first
	open := true
	for open || len(q) > 0 {
		if len(q) == 0 {
			r, ok := <-reports
			if !ok {
				return
			}
			q = append(q, r)
		}
	drain:
		for len(q) < offloadInFlight {
			select {
			case r, ok := <-reports:
				if !ok {
					open = false
					break drain
				}
				q = append(q, r)
			default:
				break drain
			}
		}
		a.settle(ctx, &q[0], true)
		batch := make([]offloadReport, 0, min(len(q), offloadBatchMax))
		rest := q[:0]
		for i := range q {
			if len(batch) < offloadBatchMax && a.settle(ctx, &q[i], false) {
				batch = append(batch, q[i])
			} else {
				rest = append(rest, q[i])
			}
		}
		clear(q[len(rest):])
		q = rest
		a.reportBatch(ctx, batch)
		a.offloadBusy.Add(-int64(len(batch)))
	}
}

// settle resolves r's outcome once its commit is over, waiting for it when
// wait is set (boundedly: at shutdown the tier is closed, committing
// everything, only after the reporter returns). It reports whether r's
// outcome is known.
func (a *Appliance) settle(ctx context.Context, r *offloadReport, wait bool) bool {
	if r.err != nil || r.pending == nil {
		return true
	}
	if !wait {
		select {
		case <-r.pending.Done():
		default:
			return false
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), offloadCommitWait)
	r.loc, r.err = r.pending.Wait(wctx)
	cancel()
	r.pending = nil
	return true
}

// reportBatch tells the master how the objects of batch (all settled)
// ended, in one BatchOffloadDone; one OffloadDone each when the master has
// no BatchOffloadDone.
func (a *Appliance) reportBatch(ctx context.Context, batch []offloadReport) {
	if len(batch) == 0 {
		return
	}
	if a.singleReports.Load() {
		a.reportSingly(ctx, batch)
		return
	}
	req := &kvtierpb.BatchOffloadDoneRequest{ClientId: a.cfg.Name, Items: make([]*kvtierpb.OffloadDoneRequest, len(batch))}
	for i := range batch {
		r := &batch[i]
		req.Items[i] = a.offloadResult(r.task, r.loc, r.err, false)
		req.Items[i].ClientId = "" // the request's
	}
	var resp *kvtierpb.BatchResponse
	var err error
	for attempt := 0; ; attempt++ {
		resp, err = a.sendBatch(ctx, batch, req)
		if err == nil || status.Code(err) == codes.Unimplemented || attempt == len(reportRetries) {
			break
		}
		// A master restarting or electing a leader: one failed call would
		// otherwise leave a whole batch of copies unreported.
		a.log.Debug("offload report failed; retrying", "reports", len(batch), "err", kverr.FromGRPC(err))
		time.Sleep(reportRetries[attempt])
	}
	if status.Code(err) == codes.Unimplemented {
		a.log.Info("master has no BatchOffloadDone: reporting offloads one call each")
		a.singleReports.Store(true)
		a.reportSingly(ctx, batch)
		return
	}
	if err != nil {
		// The master expires these tasks after its offload timeout (the
		// objects then leave DRAM without a disk copy, as after a lost
		// OffloadDone).
		a.log.Warn("offload report failed", "reports", len(batch), "err", kverr.FromGRPC(err))
		return
	}
	var refused []int
	var other int
	var first error
	for i, res := range resp.GetResults() {
		if res.GetCode() == kvtierpb.ErrorCode_OK {
			continue
		}
		e := kverr.New(kverr.Code(res.GetCode()), string(batch[i].task.Key), "%s", res.GetMessage())
		if batch[i].err == nil && kverr.Is(e, kverr.ObjectNotFound) {
			refused = append(refused, i)
			continue
		}
		if other++; first == nil {
			first = e
		}
	}
	if other > 0 {
		a.log.Warn("offload reports refused", "refused", other, "reports", len(batch), "first", first)
	}
	for _, i := range refused {
		a.dropUnwanted(batch[i].task.Tenant, string(batch[i].task.Key))
	}
}

// singleReporters is how many OffloadDone calls reportSingly keeps in
// flight (before batches, each of the two workers had its own reporter).
const singleReporters = 4

// reportSingly reports batch one OffloadDone each (a master without
// BatchOffloadDone), a few calls at a time. Reports of one key keep their
// order: a key's reports go through one goroutine.
func (a *Appliance) reportSingly(ctx context.Context, batch []offloadReport) {
	var wg sync.WaitGroup
	for g := range singleReporters {
		wg.Go(func() {
			for _, r := range batch {
				if int(crc32.ChecksumIEEE(r.task.Key)%singleReporters) == g {
					a.done(ctx, r.task, r.loc, r.err)
				}
			}
		})
	}
	wg.Wait()
}

// reportRetries are the pauses before the second and third attempt of a
// BatchOffloadDone that failed as a whole.
var reportRetries = [...]time.Duration{200 * time.Millisecond, time.Second}

// sendBatch makes one BatchOffloadDone call for batch (req holds its
// items). It checks again, with removeMu read-locked and held across the
// call, that every copy about to be reported done is still stored (see
// stillStored): a removal recorded meanwhile reaches the master only after
// these reports. A copy found removed is reported as a failure from then on.
func (a *Appliance) sendBatch(ctx context.Context, batch []offloadReport, req *kvtierpb.BatchOffloadDoneRequest) (*kvtierpb.BatchResponse, error) {
	a.removeMu.RLock()
	defer a.removeMu.RUnlock()
	for i := range batch {
		r := &batch[i]
		if r.err != nil {
			continue
		}
		if r.err = a.stillStored(r.task, r.loc); r.err != nil {
			req.Items[i] = a.offloadResult(r.task, r.loc, r.err, false)
			req.Items[i].ClientId = ""
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, err := a.client.Master().BatchOffloadDone(cctx, req)
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = kverr.New(kverr.RPCFail, "", "BatchOffloadDone answered %d results for %d reports", len(resp.GetResults()), len(batch))
	}
	return resp, err
}

// offloadOne writes the object's MEMORY replica (in this appliance's own
// segment, pinned by the master until OffloadDone) to the SSD tier and
// returns before it is durable. The tier verifies the CRC32C (a DRAM copy
// failing it is CHECKSUM_MISMATCH and stores nothing).
func (a *Appliance) offloadOne(ctx context.Context, t *kvtierpb.OffloadTask) (*ssd.Pending, error) {
	src := t.Source
	if src == nil || src.Type != kvtierpb.ReplicaType_MEMORY {
		return nil, kverr.New(kverr.InvalidParams, string(t.Key), "offload task without a MEMORY source")
	}
	// A staged put is offloaded once its bytes landed (staged.go).
	a.staged.awaitKey(ctx, t.Tenant, t.Key, dramSelfWait)
	mem, ok := a.segment(src.Segment)
	if !ok {
		return nil, kverr.New(kverr.SegmentNotFound, string(t.Key), "segment %s is not served here", src.Segment)
	}
	end := src.Offset + src.Length
	if end < src.Offset || end > uint64(len(mem)) || src.Length != t.Size {
		return nil, kverr.New(kverr.InvalidParams, string(t.Key), "offload source [%d,+%d) outside segment %s", src.Offset, src.Length, src.Segment)
	}
	return a.putReplacing(ctx, t.Tenant, string(t.Key), mem[src.Offset:end], t.Crc32C)
}

func (a *Appliance) done(ctx context.Context, t *kvtierpb.OffloadTask, loc ssd.Location, err error) {
	if err == nil {
		// Held across the report (see stillStored).
		a.removeMu.RLock()
		err = a.stillStored(t, loc)
		refused := a.report(ctx, t, loc, err, false)
		a.removeMu.RUnlock()
		if refused {
			a.dropUnwanted(t.Tenant, string(t.Key))
		}
		return
	}
	a.report(ctx, t, loc, err, false)
}

// offloadLogEvery is the least time between two "offload failed" log lines:
// a full disk fails every offload, thousands a second.
const offloadLogEvery = 5 * time.Second

// logOffloadFailure logs a failed offload with its cause, at most once per
// offloadLogEvery, counting the failures left out in between.
func (a *Appliance) logOffloadFailure(key string, err error) {
	now := time.Now().UnixNano()
	last := a.failLogAt.Load()
	if now-last < int64(offloadLogEvery) || !a.failLogAt.CompareAndSwap(last, now) {
		a.failQuiet.Add(1)
		return
	}
	a.log.Warn("offload to SSD failed; the object stays in DRAM and becomes evictable without a disk copy",
		"key", key, "err", err, "failures_not_logged", a.failQuiet.Swap(0), "failures_total", a.failed.Load())
}

// offloadResult is the report of task t, counting and logging a failure.
// skipped: the task was not attempted (queue full) and may be offered again.
func (a *Appliance) offloadResult(t *kvtierpb.OffloadTask, loc ssd.Location, err error, skipped bool) *kvtierpb.OffloadDoneRequest {
	req := &kvtierpb.OffloadDoneRequest{ClientId: a.cfg.Name, Tenant: t.Tenant, Key: t.Key, Ok: err == nil,
		Bucket: loc.Bucket, Offset: loc.Offset, Length: loc.Length, Retry: err != nil && skipped}
	if err != nil {
		req.Error = err.Error()
		if skipped {
			a.log.Debug("offload skipped", "key", string(t.Key), "err", err)
		} else {
			a.failed.Add(1)
			a.logOffloadFailure(string(t.Key), err)
		}
	}
	return req
}

// report tells the master how an offload task ended (one OffloadDone).
// skipped: the task was not attempted (queue full) and may be offered
// again. refused says the master refused a successful copy as unwanted
// (OBJECT_NOT_FOUND: the object is gone, or a removal of it is pending).
func (a *Appliance) report(ctx context.Context, t *kvtierpb.OffloadTask, loc ssd.Location, err error, skipped bool) (refused bool) {
	req := a.offloadResult(t, loc, err, skipped)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, e := a.client.Master().OffloadDone(cctx, req); e != nil {
		e = kverr.FromGRPC(e)
		if req.Ok && kverr.Is(e, kverr.ObjectNotFound) {
			return true
		}
		a.log.Warn("offload report failed", "key", string(t.Key), "err", e)
	}
	return false
}
