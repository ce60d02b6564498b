package crc32c

import (
	"fmt"
	"time"
)

func nanotime() int64 { return time.Now().UnixNano() }

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
