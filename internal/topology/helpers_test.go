package topology_test

import (
	"os"
	"syscall"

	"github.com/org/redis-operator/test/redistest"
)

func signal(s *redistest.Server, sig syscall.Signal) error { return s.Signal(sig) }

func readFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	return string(raw), err
}
