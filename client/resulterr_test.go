package client_test

import (
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// TestResultErrSaysCodeOnce: a batch result whose message is the master's
// whole error names its code and key once; a bare reason is kept as is.
func TestResultErrSaysCodeOnce(t *testing.T) {
	whole := kverr.New(kverr.UnavailableInCurrentStatus, "k1", "master rebuilding; retry").Error()
	for _, msg := range []string{whole, "master rebuilding; retry"} {
		err := client.ResultErr("k1", kvtierpb.ErrorCode_UNAVAILABLE_IN_CURRENT_STATUS, msg)
		if got, want := err.Error(), whole; got != want {
			t.Errorf("message %q: error %q, want %q", msg, got, want)
		}
		if !kverr.Is(err, kverr.UnavailableInCurrentStatus) {
			t.Errorf("code of %v lost", err)
		}
	}
	if err := client.ResultErr("k1", kvtierpb.ErrorCode_OK, ""); err != nil {
		t.Errorf("OK result: %v", err)
	}
}
