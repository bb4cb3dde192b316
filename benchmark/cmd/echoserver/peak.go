package main

import (
	"errors"
	"os"
	"runtime/metrics"
	"sync"
	"time"
)

// peakSampler follows the heap's high-water mark between ?peak=start and ?peak=stop: a
// goroutine reads HeapInuse (the heap's object and unused-span bytes, from runtime/metrics,
// which does not stop the world) every millisecond. The kernel keeps the RSS's own high-water
// mark (VmHWM), which start resets.
type peakSampler struct {
	mu      sync.Mutex
	done    chan struct{} // closed by stop; nil while not sampling
	ended   chan struct{}
	heap    uint64
	samples int
}

// peakStats is what stop reports.
type peakStats struct {
	heap    uint64
	rssKB   int64
	samples int
}

var peaks peakSampler

const peakInterval = time.Millisecond

func (p *peakSampler) start() error {
	p.stop()
	// "5" resets the peak RSS to the current RSS (Linux 4.0 and later).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return errors.New("peak: cannot reset VmHWM: " + err.Error())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heap, p.samples = heapInuse(), 1
	p.done, p.ended = make(chan struct{}), make(chan struct{})
	go p.sample(p.done, p.ended)
	return nil
}

func (p *peakSampler) sample(done, ended chan struct{}) {
	defer close(ended)
	t := time.NewTicker(peakInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		h := heapInuse()
		p.mu.Lock()
		p.heap = max(p.heap, h)
		p.samples++
		p.mu.Unlock()
	}
}

// stop ends the sampling and returns the peaks; zero when no sampling ran.
func (p *peakSampler) stop() peakStats {
	p.mu.Lock()
	done, ended := p.done, p.ended
	p.done = nil
	p.mu.Unlock()
	if done == nil {
		return peakStats{}
	}
	close(done)
	<-ended
	p.mu.Lock()
	defer p.mu.Unlock()
	return peakStats{heap: max(p.heap, heapInuse()), rssKB: statusKB("VmHWM:"), samples: p.samples}
}

// heapInuse is runtime.MemStats.HeapInuse without stopping the world.
func heapInuse() uint64 {
	s := [2]metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	metrics.Read(s[:])
	return s[0].Value.Uint64() + s[1].Value.Uint64()
}
