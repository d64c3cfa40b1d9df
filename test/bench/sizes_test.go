package bench

import "os"

// sized is full, or smoke when BENCH_SMOKE=1: every benchmark small, a quick check that it runs;
// the figures in docs/benchmarks.md come from `make bench` at full size.
func sized[T any](full, smoke T) T {
	if os.Getenv("BENCH_SMOKE") == "1" {
		return smoke
	}
	return full
}
