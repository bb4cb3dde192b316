package gust_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAutobahnSpecFile: autobahn/fuzzingclient.json, the spec the scripts
// start from, is as the one-line docker run in docs/conformance.md needs
// it: every case, against examples/autobahn's default address, reports
// under the /reports mount.
func TestAutobahnSpecFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("autobahn", "fuzzingclient.json"))
	require.NoError(t, err)
	var spec struct {
		Outdir  string `json:"outdir"`
		Servers []struct {
			Agent, URL string
		} `json:"servers"`
		Cases []string `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &spec))
	require.Equal(t, []string{"*"}, spec.Cases)
	require.True(t, strings.HasPrefix(spec.Outdir, "/reports"), spec.Outdir)
	require.Len(t, spec.Servers, 1)
	main, err := os.ReadFile(filepath.Join("examples", "autobahn", "main.go"))
	require.NoError(t, err)
	addr := strings.TrimPrefix(spec.Servers[0].URL, "ws://")
	require.Contains(t, string(main), `flag.String("addr", "`+addr+`"`, "the spec's URL is not examples/autobahn's default address")

	doc, err := os.ReadFile(filepath.Join("docs", "conformance.md"))
	require.NoError(t, err)
	require.Contains(t, string(doc), `docker run -it --rm -v "$PWD/autobahn:/config" -v "$PWD/reports:/reports" --network host crossbario/autobahn-testsuite wstest -m fuzzingclient -s /config/fuzzingclient.json`)
}

// TestAutobahnDockerPath runs scripts/autobahn -docker with a stand-in for
// docker (testdata/fakedocker), which cannot pull the real image here: the
// script must resolve the cases in the image, hand wstest a spec whose
// outdir is the /reports mount of the run's report folder, reach the
// server over the host's network, remove the container, and judge the
// report it finds.
func TestAutobahnDockerPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs examples/autobahn through scripts/autobahn; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("scripts/autobahn runs on Linux")
	}
	for _, tool := range []string{"bash", "python3", "setsid", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	t.Parallel()
	fake, err := filepath.Abs(filepath.Join("testdata", "fakedocker"))
	require.NoError(t, err)
	dir := t.TempDir()
	logf := filepath.Join(dir, "docker.log")
	cmd := exec.Command(filepath.Join("scripts", "autobahn"), "-docker", "-server", "server",
		"-cases", "1.1.1,1.1.2", "-outdir", filepath.Join(dir, "reports"))
	cmd.Env = append(os.Environ(), "PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"), "FAKE_DOCKER_LOG="+logf)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "autobahn: PASS")

	log, err := os.ReadFile(logf)
	require.NoError(t, err)
	calls := strings.Split(strings.TrimSpace(string(log)), "\n")
	require.Len(t, calls, 4, "docker calls:\n%s", log)
	require.Contains(t, calls[1], "image-helper cases --cases 1.1.1,1.1.2")
	require.Contains(t, calls[2], "--network host")
	require.Contains(t, calls[2], "-v "+filepath.Join(dir, "reports", "server")+":/reports crossbario/autobahn-testsuite wstest -m fuzzingclient -s /reports/spec.json")
	require.True(t, strings.HasPrefix(calls[3], "rm -f gust-autobahn-"), calls[3])

	var spec map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "reports", "server", "spec.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &spec))
	require.Equal(t, "/reports", spec["outdir"])
	require.Equal(t, []any{"1.1.1", "1.1.2"}, spec["cases"])
	server := spec["servers"].([]any)[0].(map[string]any)
	require.Equal(t, "gust-server", server["agent"])
	require.True(t, strings.HasPrefix(server["url"].(string), "ws://127.0.0.1:"))
}
