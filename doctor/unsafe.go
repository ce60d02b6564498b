package doctor

import "unsafe"

// uintptrOf returns the address of b's first byte (for O_DIRECT alignment).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
