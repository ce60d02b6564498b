package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	barWidth    = 30
	redrawEvery = 100 * time.Millisecond
)

// IsTerminal reports whether w is an *os.File connected to a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Bar is a progress bar; a nil *Bar or one on a non-terminal does nothing.
// Safe for concurrent use.
type Bar struct {
	w     io.Writer
	label string
	total int64

	mu   sync.Mutex
	last time.Time // guarded by mu: time of the last redraw
}

// New returns a bar writing to w, or nil when w is not a terminal.
// total <= 0 draws a counter instead of a bar.
func New(w io.Writer, label string, total int64) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	return &Bar{w: w, label: label, total: total}
}

// Set redraws the bar at done units (rate-limited), with an optional note.
func (b *Bar) Set(done int64, note string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now(); now.Sub(b.last) >= redrawEvery {
		b.last = now
		b.drawLocked(done, note)
	}
}

// Done draws the final state and ends the line.
func (b *Bar) Done(done int64, note string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drawLocked(done, note)
	fmt.Fprintln(b.w)
}

func (b *Bar) drawLocked(done int64, note string) {
	if b.total <= 0 {
		fmt.Fprintf(b.w, "\r%s %d %s\x1b[K", b.label, done, note)
		return
	}
	frac := min(max(float64(done)/float64(b.total), 0), 1)
	n := int(frac * barWidth)
	fmt.Fprintf(b.w, "\r%s [%s%s] %5.1f%% %s\x1b[K", b.label, strings.Repeat("=", n), strings.Repeat(" ", barWidth-n), frac*100, note)
}
