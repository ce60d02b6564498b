package progress

import (
	"bytes"
	"os"
	"testing"
)

func TestSilentOnNonTerminal(t *testing.T) {
	var buf bytes.Buffer
	if b := New(&buf, "x", 10); b != nil {
		t.Fatal("bar created for a bytes.Buffer")
	}
	var nilBar *Bar
	nilBar.Set(5, "")
	nilBar.Done(10, "")
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Fatal("a regular file reported as a terminal")
	}
	New(f, "x", 10).Done(10, "")
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("wrote %d bytes to a regular file", st.Size())
	}
}

func TestDrawTo(t *testing.T) {
	// A bar forced onto a buffer (bypassing New) draws the expected line.
	var buf bytes.Buffer
	b := &Bar{w: &buf, label: "put", total: 4}
	b.Done(2, "ok")
	if got := buf.String(); !bytes.Contains([]byte(got), []byte(" 50.0% ok")) || got[0] != '\r' {
		t.Fatalf("drawn %q", got)
	}
}
