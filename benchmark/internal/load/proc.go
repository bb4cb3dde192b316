package load

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on every Linux ABI.
const clockTicks = 100

// procCPU returns the process's user+system CPU seconds.
func procCPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("server cpu: %w", err)
	}
	// The command name (field 2) may hold spaces; the fields after it follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("server cpu: odd /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state): utime is field 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("server cpu: short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("server cpu: bad /proc/%d/stat", pid)
	}
	return float64(ut+st) / clockTicks, nil
}

// procRSS returns VmRSS in KiB.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("server rss: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("server rss: no VmRSS in /proc/%d/status", pid)
}

// selfCPU returns this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// ServerStats is what an echoserver's /debug/stats returns.
type ServerStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	Mallocs    uint64 `json:"mallocs"`
	RSSKB      int64  `json:"rss_kb"`

	// With ?peak=stop (fetchPeak): the heap's high-water mark since ?peak=start, sampled every
	// millisecond, and the kernel's peak RSS (VmHWM) since then. Zero from a server that does
	// not sample.
	HeapInusePeak uint64 `json:"heap_inuse_peak"`
	RSSPeakKB     int64  `json:"rss_peak_kb"`
}

// fetchStats reads the server's stats, after gcs garbage collections (echoserver's ?gc=N).
func fetchStats(url string, gcs int) (*ServerStats, error) {
	if gcs > 0 {
		url = withQuery(url, "gc="+strconv.Itoa(gcs))
	}
	return getStats(url)
}

// fetchPeak starts (start true) or stops the server's sampling of its peak memory
// (echoserver's ?peak=start and ?peak=stop); stopping returns the peaks.
func fetchPeak(url string, start bool) (*ServerStats, error) {
	if start {
		return getStats(withQuery(url, "peak=start"))
	}
	return getStats(withQuery(url, "peak=stop"))
}

func withQuery(url, q string) string {
	if strings.Contains(url, "?") {
		return url + "&" + q
	}
	return url + "?" + q
}

func getStats(url string) (*ServerStats, error) {
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, fmt.Errorf("server stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("server stats: %s", resp.Status)
	}
	var s ServerStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("server stats: %w", err)
	}
	return &s, nil
}

// raiseNoFile makes room for n descriptors: the soft limit up to the hard one, and the hard one
// too when allowed (root).
func raiseNoFile(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil
	}
	if lim.Cur >= n {
		return nil
	}
	if lim.Max < n {
		want := syscall.Rlimit{Cur: n, Max: n}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			return nil
		}
		return fmt.Errorf("%d connections need %d descriptors; the hard limit is %d", n-256, n, lim.Max)
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
