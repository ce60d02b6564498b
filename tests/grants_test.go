package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// TestGrantAbuse: a master and an appliance as processes, a victim client
// with objects, and an attacker that reaches the appliance's data port
// with its own transfer engine and talks to the master as a client of its
// own. Every attack is refused with PERMISSION_DENIED naming the reason,
// no object's bytes change (every checksum compared before and after), and
// /metrics counts each refusal by reason.
func TestGrantAbuse(t *testing.T) {
	// Lease 1 s; put deadline 3 s: long enough to remove an object and
	// reuse its space while its writer's grant is still unexpired (7.).
	c := startCluster(t, "--put-discard-timeout", "3s", "--put-release-timeout", "4s")
	c.appliance("box-a", "--shm=false")
	victim := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn, err := grpc.NewClient(c.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ms := kvtierpb.NewMasterClient(conn)
	// The master publishes the refusals the appliance reports as events.
	events, err := ms.WatchEvents(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	grantEvent := make(chan string, 1)
	go func() {
		for {
			ev, err := events.Recv()
			if err != nil {
				return
			}
			if ev.GetKind() == "grant" && ev.GetNode() == "box-a" {
				select {
				case grantEvent <- ev.GetMessage():
				default:
				}
			}
		}
	}()
	att, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()

	const size = 64 << 10
	sums := map[string][32]byte{}
	for i := range 8 {
		key := "victim/" + strconv.Itoa(i)
		v := randomBytes(uint64(100+i), size)
		if err := victim.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		sums[key] = sha256.Sum256(v)
	}
	check := func(when string) {
		t.Helper()
		for key, sum := range sums {
			got, err := victim.Get(ctx, key)
			if err != nil || sha256.Sum256(got) != sum {
				t.Fatalf("%s: %s changed or unreadable: %v", when, key, err)
			}
		}
	}
	check("before")
	replicaOf := func(client, key string) *kvtierpb.Replica {
		t.Helper()
		rl, err := ms.GetReplicaList(ctx, &kvtierpb.KeyRequest{ClientId: client, Key: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		r := rl.Replicas[0]
		if len(r.Grant) != grant.Size {
			t.Fatalf("replica of %s carries no grant (%d bytes)", key, len(r.Grant))
		}
		return r
	}
	junk := make([]byte, size)
	for i := range junk {
		junk[i] = 0xEE
	}
	attack := func(name, reason string, r *kvtierpb.Replica, op transfer.Op, off uint64, tok []byte) {
		t.Helper()
		buf := junk
		if op == transfer.Read {
			buf = make([]byte, size)
		}
		err := att.Do(ctx, []transfer.Request{{Op: op, Endpoint: r.Endpoint, Segment: r.Segment, Offset: off, Buf: buf, Grant: tok}})[0]
		if kverr.CodeOf(err) != kverr.PermissionDenied || !regexp.MustCompile(reason).MatchString(err.Error()) {
			t.Fatalf("%s: got %v, want PERMISSION_DENIED (%s)", name, err, reason)
		}
		t.Logf("%s: refused: %v", name, err)
	}
	want := map[string]int{}

	// 1. No grant at all (an old-format frame): write and read.
	v0 := replicaOf("victim-peer", "victim/0")
	attack("no grant, write", "missing", v0, transfer.Write, v0.Offset, nil)
	attack("no grant, read", "missing", v0, transfer.Read, v0.Offset, nil)
	want["missing"] += 2

	// 2. A read grant used to write.
	attack("read grant used to write", "wrong_op", v0, transfer.Write, v0.Offset, v0.Grant)
	want["wrong_op"]++

	// 3. A grant replayed after its expiry: a read grant after its lease,
	// and the attacker's own write grant after its put's deadline.
	ps, err := ms.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "attacker", Key: []byte("attacker/1"), Size: size})
	if err != nil {
		t.Fatal(err)
	}
	aw := ps.Replicas[0]
	if err := att.Do(ctx, []transfer.Request{{Op: transfer.Write, Endpoint: aw.Endpoint, Segment: aw.Segment, Offset: aw.Offset, Buf: junk, Grant: aw.Grant}})[0]; err != nil {
		t.Fatalf("the attacker's own granted put: %v", err)
	}
	if _, err := ms.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "attacker", Key: []byte("attacker/1")}); err != nil {
		t.Fatal(err)
	}
	gaw, _ := grant.Decode(aw.Grant)
	time.Sleep(time.Until(time.Unix(0, gaw.Expiry)) + 200*time.Millisecond) // past the 1 s lease and the put deadline
	attack("read grant after its lease", "expired", v0, transfer.Read, v0.Offset, v0.Grant)
	attack("write grant after its put deadline", "expired", aw, transfer.Write, aw.Offset, aw.Grant)
	want["expired"] += 2

	// 4. A grant for a neighbouring extent: the attacker's fresh write
	// grant for its own object, aimed at the victim's object next to it.
	ps, err = ms.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "attacker", Key: []byte("attacker/2"), Size: size})
	if err != nil {
		t.Fatal(err)
	}
	aw2 := ps.Replicas[0]
	for key := range sums {
		v := replicaOf("victim-peer", key)
		if v.Segment == aw2.Segment {
			attack("own write grant on "+key, "out_of_extent", v, transfer.Write, v.Offset, aw2.Grant)
			want["out_of_extent"]++
		}
	}
	// ... and one byte past its own extent.
	attack("own write grant, one extent further", "out_of_extent", aw2, transfer.Write, aw2.Offset+1, aw2.Grant)
	want["out_of_extent"]++

	// 5. Another client's grant: a victim-peer's read grant for one object
	// used on another object of the victim (a grant is bound to its
	// extent, whoever presents it).
	v1, v2 := replicaOf("victim-peer", "victim/1"), replicaOf("victim-peer", "victim/2")
	attack("another client's read grant on another object", "out_of_extent", v2, transfer.Read, v2.Offset, v1.Grant)
	want["out_of_extent"]++

	// 6. A forged grant: the victim's read grant with its extent edited
	// to cover the victim's object, and a grant signed with a guessed key.
	g, _ := grant.Decode(aw2.Grant)
	g.Offset, g.Length = v1.Offset, v1.Length
	attack("grant with an edited extent", "forged", v1, transfer.Write, v1.Offset, g.Encode(nil))
	want["forged"]++
	guess := grant.Key{ID: g.KeyID}
	attack("grant signed with a guessed secret", "forged", v1, transfer.Write, v1.Offset,
		grant.Sign(guess, v1.Segment, 0, v1.Offset, v1.Length, grant.Write, grant.SessionOf("attacker"), time.Now().Add(time.Minute)))
	want["forged"]++

	// 7. A stale grant after its object was removed and its space reused
	// by another client's put, used BEFORE its expiry: the attacker's
	// write grant for attacker/3 (valid until its put deadline) after
	// attacker/3 is written, committed, removed, and a victim object
	// takes the same extent. The removal's free record revoked it at the
	// appliance before the space could go to the victim's put.
	reuse := func(stale *kvtierpb.Replica, n int) string {
		t.Helper()
		for i := range 40 {
			key := fmt.Sprintf("victim/reuse-%d-%d", n, i)
			v := randomBytes(uint64(200+100*n+i), size)
			if err := victim.Put(ctx, key, v); err != nil {
				t.Fatal(err)
			}
			sums[key] = sha256.Sum256(v)
			if r := replicaOf("victim-peer", key); r.Segment == stale.Segment && r.Offset == stale.Offset {
				return key
			}
		}
		t.Fatal("no victim object took the removed object's extent")
		return ""
	}
	ps, err = ms.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "attacker", Key: []byte("attacker/3"), Size: size})
	if err != nil {
		t.Fatal(err)
	}
	aw3 := ps.Replicas[0]
	if err := att.Do(ctx, []transfer.Request{{Op: transfer.Write, Endpoint: aw3.Endpoint, Segment: aw3.Segment, Offset: aw3.Offset, Buf: junk, Grant: aw3.Grant}})[0]; err != nil {
		t.Fatalf("the attacker's own granted put: %v", err)
	}
	if _, err := ms.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "attacker", Key: []byte("attacker/3")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Remove(ctx, &kvtierpb.KeyRequest{ClientId: "attacker", Key: []byte("attacker/3"), Force: true}); err != nil {
		t.Fatal(err)
	}
	reused := reuse(aw3, 3)
	if g3, _ := grant.Decode(aw3.Grant); time.Now().UnixNano() >= g3.Expiry-int64(100*time.Millisecond) {
		t.Fatalf("the stale grant expired before the attack (%v late): the test is too slow to prove revocation", time.Since(time.Unix(0, g3.Expiry)))
	}
	attack("unexpired stale write grant on the reused extent ("+reused+")", "revoked", aw3, transfer.Write, aw3.Offset, aw3.Grant)
	want["revoked"]++
	// ... and the same after its expiry, for attacker/1 (expired first).
	if _, err := ms.Remove(ctx, &kvtierpb.KeyRequest{ClientId: "attacker", Key: []byte("attacker/1"), Force: true}); err != nil {
		t.Fatal(err)
	}
	reused = reuse(aw, 1)
	attack("expired stale write grant on the reused extent ("+reused+")", "expired", aw, transfer.Write, aw.Offset, aw.Grant)
	want["expired"]++

	check("after the attacks")

	// The refusals are counted by reason in the master's /metrics (the
	// appliance reports them with its heartbeats).
	eventually(t, 10*time.Second, "refusals counted in /metrics", func() bool {
		body := httpBody(t, "http://"+c.http+"/metrics")
		for reason, n := range want {
			m := regexp.MustCompile(`(?m)^kvtier_grant_refusals_total\{appliance="box-a",reason="` + reason + `"\} (\d+)$`).FindStringSubmatch(body)
			if m == nil {
				return false
			}
			if got, _ := strconv.Atoi(m[1]); got < n {
				return false
			}
		}
		return true
	})
	select {
	case msg := <-grantEvent:
		t.Logf("event: %s", msg)
		if !regexp.MustCompile(`missing \+\d+`).MatchString(msg) {
			t.Fatalf("grant event does not name the reasons: %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no grant event from the master")
	}
	// And the granted path still works end to end: the victim's reads
	// above, a put and a get now.
	if err := victim.Put(ctx, "victim/after", []byte("fine")); err != nil {
		t.Fatal(err)
	}
	if b, err := victim.Get(ctx, "victim/after"); err != nil || string(b) != "fine" {
		t.Fatalf("get after the attacks: %q %v", b, err)
	}
}
