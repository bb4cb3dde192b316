package main

import (
	"encoding/json"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

var sink [][]byte

// TestPeakSampler allocates 64 MiB between ?peak=start and ?peak=stop, drops it, and checks
// that the peak heap and RSS reported cover it.
func TestPeakSampler(t *testing.T) {
	mux := debugMux()
	get := func(q string) Stats {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/stats?"+q, nil))
		var s Stats
		if err := json.NewDecoder(rec.Body).Decode(&s); err != nil {
			t.Fatal(err, rec.Body.String())
		}
		return s
	}
	before := get("gc=1&peak=start")
	for range 64 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touched: resident
		}
		sink = append(sink, b)
	}
	time.Sleep(20 * time.Millisecond) // a few samples
	sink = nil
	runtime.GC()
	s := get("peak=stop")
	if s.HeapInusePeak < before.HeapInuse+60<<20 || s.PeakSamples < 2 {
		t.Fatalf("heap peak %d from %d, %d samples", s.HeapInusePeak, before.HeapInuse, s.PeakSamples)
	}
	if s.RSSPeakKB < before.RSSKB+60<<10 {
		t.Fatalf("RSS peak %d KiB from %d KiB", s.RSSPeakKB, before.RSSKB)
	}
	if s.HeapInuse >= s.HeapInusePeak {
		t.Fatalf("heap %d after the GC, not below the peak %d", s.HeapInuse, s.HeapInusePeak)
	}
	if again := get("peak=stop"); again.HeapInusePeak != 0 {
		t.Fatalf("a second stop reports a peak: %d", again.HeapInusePeak)
	}
}
