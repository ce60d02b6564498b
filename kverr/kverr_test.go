package kverr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

func TestCodesMirrorProtoEnum(t *testing.T) {
	for c, info := range table {
		name, ok := kvtierpb.ErrorCode_name[int32(c)]
		if !ok || name != info.name {
			t.Errorf("code %d: kverr name %q, proto name %q (present %v)", c, info.name, name, ok)
		}
	}
	for n, name := range kvtierpb.ErrorCode_name {
		if table[Code(n)].name != name {
			t.Errorf("proto code %d %s missing from kverr table", n, name)
		}
	}
}

func TestGRPCRoundTripThroughWrapping(t *testing.T) {
	for _, c := range Codes() {
		if c == OK {
			continue
		}
		orig := fmt.Errorf("ctx: %w", New(c, "k/1", "reason %d", 7))
		back := FromGRPC(ToGRPC(orig))
		var e *Error
		if !errors.As(back, &e) {
			t.Fatalf("%v: not an *Error after round trip: %v", c, back)
		}
		if e.Code != c || e.Key != "k/1" || e.Msg != "reason 7" {
			t.Errorf("round trip of %v gave %+v", c, e)
		}
		if !errors.Is(back, c.Err()) {
			t.Errorf("errors.Is fails for %v", c)
		}
	}
}

func TestCodeOfPlainErrors(t *testing.T) {
	if CodeOf(nil) != OK {
		t.Fatal("nil must be OK")
	}
	if CodeOf(errors.New("x")) != InternalError {
		t.Fatal("plain error must be INTERNAL_ERROR")
	}
	if ObjectHasLease.HTTP() != 423 || NoAvailableHandle.HTTP() != 507 || ObjectNotFound.HTTP() != 404 {
		t.Fatal("http table changed")
	}
}

func TestGRPCRoundTripBinaryKey(t *testing.T) {
	key := string([]byte{0xff, 0x00, 'k', 0xc3})
	back := FromGRPC(ToGRPC(New(ObjectNotFound, key, "no such object")))
	var e *Error
	if !errors.As(back, &e) || e.Code != ObjectNotFound || e.Key != key {
		t.Fatalf("binary key lost its code or key: %#v", back)
	}
}
