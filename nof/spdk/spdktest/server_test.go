package spdktest

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func listenReplay(t *testing.T, opts Options) *Server {
	t.Helper()
	ex, err := Recordings()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := NewReplay(ex)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen(filepath.Join(t.TempDir(), "spdk.sock"), rp.Handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readAll reads from c until n bytes arrived or the peer went quiet/closed.
func readFor(t *testing.T, c net.Conn, want int, quiet time.Duration) ([]byte, bool) {
	t.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		if want > 0 && len(got) >= want {
			return got, false
		}
		c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			return got, true
		}
		if err != nil {
			return got, false
		}
	}
}

// TestServerFidelity sends every recorded request's exact bytes, in file
// order, to a Server+Replay and requires the exact recorded reply bytes,
// including the protocol edge cases (notifications, null ids, batch, parse
// error closing the connection).
func TestServerFidelity(t *testing.T) {
	s := listenReplay(t, Options{})
	ex, err := Recordings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) < 68 {
		t.Fatalf("only %d recordings embedded", len(ex))
	}
	for _, e := range ex {
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(e.Request); err != nil {
			t.Fatal(err)
		}
		if len(e.Response) > 0 {
			got, _ := readFor(t, c, len(e.Response), 2*time.Second)
			if !bytes.Equal(got, e.Response) {
				t.Errorf("%s:\n got %q\nwant %q", e.Name, got, e.Response)
			}
		} else {
			// Nothing may come back; a parse error also closes the connection.
			got, eof := readFor(t, c, 0, 150*time.Millisecond)
			if len(got) != 0 {
				t.Errorf("%s: expected no reply, got %q", e.Name, got)
			}
			parseErr := bytes.Contains(e.Request, []byte("oops"))
			if parseErr && !eof {
				t.Errorf("%s: connection not closed after parse error", e.Name)
			}
			if !parseErr && eof {
				t.Errorf("%s: connection closed after a notification", e.Name)
			}
		}
		c.Close()
	}
}
