package testutil

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if got := len(b.String()); got != 8*len("line 0\n") {
		t.Errorf("%d bytes written, want %d", got, 8*len("line 0\n"))
	}
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}
