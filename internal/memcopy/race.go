//go:build race

package memcopy

import (
	"runtime"
	"unsafe"
)

// raceAccess tells the race detector about the vector path's accesses,
// which it cannot see in assembly (copy is instrumented for it).
func raceAccess(dst, src []byte) {
	runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}
