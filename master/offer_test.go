package master

import (
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// TestTransportOfferPassedThrough: what a node offers for a segment beyond
// TCP (its RDMA side channel, region base and rkey), announced at mount, is
// copied untouched into every replica the master hands out for that
// segment (PutStart, GetReplicaList, the batch forms); the master reads
// none of it.
func TestTransportOfferPassedThrough(t *testing.T) {
	m, _ := newTest(t, Config{RDMATrustedFabric: true})
	c, _ := serve(t, m)
	seg := &kvtierpb.Segment{Name: "A/0", Size: 1 << 20, Endpoint: "127.0.0.1:9", Node: "A",
		RdmaAddr: ":4791", RdmaBase: 0x7f0000001000, RdmaRkey: 0x1234, RdmaFreesBase: 0x7f0000800000, RdmaFreesRkey: 0x99,
		DirectPut: true, DirectPutLocal: true}
	if _, err := c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "A", Segment: seg}); err != nil {
		t.Fatal(err)
	}
	check := func(where string, rs []*kvtierpb.Replica) {
		t.Helper()
		if len(rs) != 1 {
			t.Fatalf("%s: %d replicas", where, len(rs))
		}
		r := rs[0]
		if r.RdmaAddr != seg.RdmaAddr || r.RdmaBase != seg.RdmaBase || r.RdmaRkey != seg.RdmaRkey || r.Endpoint != seg.Endpoint ||
			r.RdmaFreesBase != seg.RdmaFreesBase || r.RdmaFreesRkey != seg.RdmaFreesRkey {
			t.Fatalf("%s: replica %v does not carry the segment's offer %v", where, r, seg)
		}
	}
	ps, err := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("k"), Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	check("PutStart", ps.Replicas)
	if _, err := c.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "w", Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	gl, err := c.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: "r", Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	check("GetReplicaList", gl.Replicas)
	bs, err := c.BatchPutStart(ctx, &kvtierpb.BatchPutStartRequest{ClientId: "w", Items: []*kvtierpb.PutStartRequest{{Key: []byte("b"), Size: 64}}})
	if err != nil {
		t.Fatal(err)
	}
	check("BatchPutStart", bs.Results[0].Replicas)
	// A segment mounted without an offer hands out replicas without one.
	if _, err := c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "B", Segment: &kvtierpb.Segment{Name: "B/0", Size: 1 << 20, Endpoint: "127.0.0.1:8", Node: "B"}}); err != nil {
		t.Fatal(err)
	}
	ps, err = c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("k2"), Size: 100, Config: &kvtierpb.PutConfig{PreferredSegment: "B/0"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := ps.Replicas[0]; r.Segment != "B/0" || r.RdmaAddr != "" || r.RdmaBase != 0 || r.RdmaRkey != 0 {
		t.Fatalf("replica of a segment without an offer: %v", r)
	}
	// Segments are listed with what their nodes announced at mount.
	ls, err := c.ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range ls.Segments {
		s := si.GetSegment()
		want := s.GetName() == "A/0"
		if s.GetDirectPut() != want || s.GetDirectPutLocal() != want || s.GetRdmaFreesRkey() != map[bool]uint32{true: 0x99}[want] {
			t.Fatalf("listed segment %v, mounted %v", s, map[bool]*kvtierpb.Segment{true: seg}[want])
		}
	}
}

// TestRDMAOfferWithheldUnderGrants: an RDMA offer (a segment-wide rkey,
// past data-plane grants) is not handed out while grants are enforced,
// unless the fabric is declared trusted; with grants off (an open data
// port) it is.
func TestRDMAOfferWithheldUnderGrants(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"grants", Config{}, false},
		{"grants+trusted", Config{RDMATrustedFabric: true}, true},
		{"no-grants", Config{DisableGrants: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTest(t, tc.cfg)
			c, _ := serve(t, m)
			seg := &kvtierpb.Segment{Name: "A/0", Size: 1 << 20, Endpoint: "127.0.0.1:9", Node: "A",
				RdmaAddr: ":4791", RdmaBase: 0x7f0000001000, RdmaRkey: 0x1234}
			if _, err := c.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: "A", Segment: seg}); err != nil {
				t.Fatal(err)
			}
			ps, err := c.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "w", Key: []byte("k"), Size: 100})
			if err != nil {
				t.Fatal(err)
			}
			r := ps.Replicas[0]
			if got := r.RdmaAddr != "" || r.RdmaRkey != 0 || r.RdmaBase != 0; got != tc.want {
				t.Fatalf("replica %v: RDMA offer handed out = %v, want %v", r, got, tc.want)
			}
			if r.Endpoint != seg.Endpoint {
				t.Fatalf("replica %v lost its TCP endpoint", r)
			}
		})
	}
}
