package resttest

import (
	"bytes"
	"context"
	"hash/crc32"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/rest"
)

// Options shape a cluster. The zero value gives one 64 MiB segment and no token.
type Options struct {
	Segments    int    // MEMORY segments to mount; 0 means 1
	SegmentSize uint64 // bytes each; 0 means 64 MiB
	Token       string // rest.Config.Token
	MaxPutBytes int64  // rest.Config.MaxPutBytes
	Master      master.Config
	Rest        rest.Config // Token and MaxPutBytes above override its fields
	// GRPC also serves the master over real gRPC on loopback (GRPCAddr), so
	// appliances and SDK clients can join the cluster.
	GRPC bool
}

// Cluster is a running in-process cluster. Close (registered with t.Cleanup)
// stops everything.
type Cluster struct {
	Master *master.Master
	MS     kvtierpb.MasterServer
	DP     *LocalDataPlane
	Server *rest.Server
	HTTP   *httptest.Server
	URL    string // base URL, e.g. http://127.0.0.1:PORT
	Node   string // client id of the storage node
	// GRPCAddr is the master's gRPC address (Options.GRPC), else "".
	GRPCAddr string

	grpc *grpc.Server

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NodeID is the client id of the cluster's storage node.
const NodeID = "node-a"

// Start builds and starts a cluster; it fails the test on error.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Segments == 0 {
		o.Segments = 1
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 20
	}
	m, err := master.New(o.Master)
	if err != nil {
		t.Fatalf("master.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{Master: m, MS: master.NewGRPCServer(m), cancel: cancel, Node: NodeID}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); m.Run(ctx) }()
	c.DP = &LocalDataPlane{ms: c.MS, node: NodeID, segs: map[string][]byte{}}
	var specs []*kvtierpb.Segment
	for i := 0; i < o.Segments; i++ {
		name := NodeID + "/dram" + string(rune('0'+i))
		spec := &kvtierpb.Segment{Name: name, Type: kvtierpb.ReplicaType_MEMORY, Node: NodeID,
			Endpoint: "127.0.0.1:1", Size: o.SegmentSize}
		if _, err := c.MS.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: NodeID, Segment: spec}); err != nil {
			cancel()
			t.Fatalf("mount %s: %v", name, kverr.FromGRPC(err))
		}
		c.DP.segs[name] = make([]byte, o.SegmentSize)
		specs = append(specs, spec)
	}
	// Heartbeat so the node stays live however long a browser test takes.
	hb := func() {
		_, _ = c.MS.Heartbeat(ctx, &kvtierpb.HeartbeatRequest{ClientId: NodeID, Endpoint: "127.0.0.1:1", Segments: specs})
	}
	hb()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				hb()
			}
		}
	}()
	if o.GRPC {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			cancel()
			t.Fatalf("gRPC listener: %v", err)
		}
		c.grpc = grpc.NewServer()
		kvtierpb.RegisterMasterServer(c.grpc, c.MS)
		c.GRPCAddr = lis.Addr().String()
		c.wg.Add(1)
		go func() { defer c.wg.Done(); _ = c.grpc.Serve(lis) }()
	}
	rc := o.Rest
	if o.Token != "" {
		rc.Token = o.Token
	}
	if o.MaxPutBytes != 0 {
		rc.MaxPutBytes = o.MaxPutBytes
	}
	srv, err := rest.New(rc, c.MS, c.DP)
	if err != nil {
		cancel()
		t.Fatalf("rest.New: %v", err)
	}
	c.Server = srv
	c.HTTP = httptest.NewServer(srv.Handler())
	c.URL = c.HTTP.URL
	t.Cleanup(c.Close)
	return c
}

// Close stops the HTTP server and the master.
func (c *Cluster) Close() {
	c.HTTP.CloseClientConnections()
	c.HTTP.Close()
	if c.grpc != nil {
		c.grpc.Stop()
	}
	c.cancel()
	c.wg.Wait()
}

// LocalDataPlane implements rest.DataPlane against the real master, storing
// bytes in this process's segment memory: PutStart, copy into every MEMORY
// replica, PutEnd (PutRevoke on failure); Get reads the first complete MEMORY
// replica and checks its CRC32C.
type LocalDataPlane struct {
	ms   kvtierpb.MasterServer
	node string

	mu   sync.Mutex
	segs map[string][]byte // guarded by mu (the map; byte ranges belong to the master's allocations)
}

var _ rest.DataPlane = (*LocalDataPlane)(nil)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (d *LocalDataPlane) region(seg string, off, n uint64) ([]byte, error) {
	d.mu.Lock()
	b := d.segs[seg]
	d.mu.Unlock()
	if b == nil || off+n > uint64(len(b)) || off+n < off {
		return nil, kverr.New(kverr.TransferFail, "", "replica %s@%d+%d is not in local memory", seg, off, n)
	}
	return b[off : off+n], nil
}

// Put stores value under key.
func (d *LocalDataPlane) Put(ctx context.Context, key string, value []byte, o rest.PutOptions) error {
	sum := crc32.Checksum(value, castagnoli)
	resp, err := d.ms.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: d.node, Tenant: o.Tenant, Key: []byte(key),
		Size: uint64(len(value)), Crc32C: sum, HasChecksum: true,
		Config: &kvtierpb.PutConfig{ReplicaNum: uint32(o.Replicas), SoftPin: o.SoftPin, HardPin: o.HardPin, PreferredSegment: o.PreferredSegment}})
	if err != nil {
		return kverr.FromGRPC(err)
	}
	kr := &kvtierpb.KeyRequest{ClientId: d.node, Tenant: o.Tenant, Key: []byte(key)}
	for _, r := range resp.GetReplicas() {
		if r.GetType() != kvtierpb.ReplicaType_MEMORY {
			continue
		}
		dst, err := d.region(r.GetSegment(), r.GetOffset(), uint64(len(value)))
		if err != nil {
			_, _ = d.ms.PutRevoke(ctx, kr)
			return err
		}
		copy(dst, value)
	}
	if _, err := d.ms.PutEnd(ctx, kr); err != nil {
		return kverr.FromGRPC(err)
	}
	return nil
}

// Get returns the value of key.
func (d *LocalDataPlane) Get(ctx context.Context, tenant, key string) ([]byte, error) {
	resp, err := d.ms.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: d.node, Tenant: tenant, Key: []byte(key)})
	if err != nil {
		return nil, kverr.FromGRPC(err)
	}
	for _, r := range resp.GetReplicas() {
		if r.GetType() != kvtierpb.ReplicaType_MEMORY || r.GetState() != kvtierpb.ReplicaState_COMPLETE {
			continue
		}
		src, err := d.region(r.GetSegment(), r.GetOffset(), resp.GetSize())
		if err != nil {
			continue
		}
		out := bytes.Clone(src)
		if resp.GetHasChecksum() && crc32.Checksum(out, castagnoli) != resp.GetCrc32C() {
			return nil, kverr.New(kverr.ChecksumMismatch, key, "local replica in %s", r.GetSegment())
		}
		return out, nil
	}
	return nil, kverr.New(kverr.ReplicaIsNotReady, key, "no complete MEMORY replica in this process")
}
