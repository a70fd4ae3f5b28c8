package deploy_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/partitionq/partitionq/test/pgtest"
)

// process is a partitionq command the test runs until it stops it.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr pgtest.SyncBuffer
	exited         chan error
}

// start runs the binary with argv and DATABASE_URL=url; it is killed at
// cleanup if the test did not stop it.
func start(t *testing.T, bin, url string, argv ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, argv...), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T, what string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("%s after SIGTERM: %v\n%s", what, err, p.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("%s has not stopped a minute after SIGTERM", what)
	}
}

// serving waits for a worker's line naming where it serves its metrics,
// and returns that address (http://HOST:PORT).
func (p *process) serving(t *testing.T) string {
	t.Helper()
	served := regexp.MustCompile(`serving metrics at (http://\S+)/metrics`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := served.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-p.exited:
			t.Fatalf("the worker ended (%v) before it served its metrics:\n%s", err, p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker does not serve its metrics after 30s:\n%s", p.stderr.String())
		}
	}
}

// run runs the binary to its end and fails the test unless it succeeds.
func run(t *testing.T, bin, url string, argv ...string) {
	t.Helper()
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("partitionq %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// get fetches url: its status and body (0 and the error when nothing
// answers).
func get(url string) (int, string) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exported scrapes url and returns the metric families it has, by name,
// with their types.
func exported(t *testing.T, url string) map[string]dto.MetricType {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dto.MetricType{}
	for name, f := range fams {
		out[name] = f.GetType()
	}
	return out
}

// queried returns the partitionq metrics the dashboard and the KEDA query
// name, each with where it is used.
func queried(t *testing.T, docs []doc) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(expr, where string) {
		for _, m := range metricName.FindAllString(expr, -1) {
			out[m] = append(out[m], where)
		}
	}
	d := dashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			add(tg.Expr, fmt.Sprintf("dashboard panel %q", p.Title))
		}
	}
	for _, v := range d.Templating.List {
		add(v.Definition, fmt.Sprintf("dashboard variable %q", v.Name))
	}
	for _, so := range byKind(docs, "ScaledObject") {
		var s struct {
			Spec struct {
				Triggers []struct {
					Metadata map[string]string `json:"metadata"`
				} `json:"triggers"`
			} `json:"spec"`
		}
		so.as(t, &s)
		for _, tr := range s.Spec.Triggers {
			add(tr.Metadata["query"], "the KEDA query")
		}
	}
	return out
}

// missing returns the queried metrics the families do not have: a
// histogram's _bucket, _count and _sum series are its family's.
func missing(queried map[string][]string, fams map[string]dto.MetricType) []string {
	var out []string
	for name, where := range queried {
		if _, ok := fams[name]; ok {
			continue
		}
		found := false
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] == dto.MetricType_HISTOGRAM {
				found = true
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s (%s)", name, strings.Join(where, ", ")))
		}
	}
	sort.Strings(out)
	return out
}

// The kit's commands, run as the manifests run them against a real
// database: the setup Job's partitionq lines, the ticker's command, and
// the workers' command with its handler (handler.yaml's script) and
// --metrics-addr on a free local port. An event sent is handled by the
// kit's handler; the probes answer 200 at the paths the manifests ask;
// every metric the dashboard and the KEDA query name is one the worker
// exports.
func TestKitRunsAgainstARealDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	bin := imageBinary(t)
	docs := manifests(t)
	invs := invocations(t, docs)
	work := only(t, invs, "work")

	for _, v := range invs {
		if v.command() == "setup" {
			run(t, bin, db.URL, v.argv...)
		}
	}
	tick := start(t, bin, db.URL, only(t, invs, "tick").argv...)

	var cm struct {
		Data map[string]string `json:"data"`
	}
	byKind(docs, "ConfigMap")[0].as(t, &cm)
	handler := filepath.Join(t.TempDir(), "handle.sh")
	if len(cm.Data) != 1 || filepath.Base(work.flag("exec")) != "handle.sh" {
		t.Fatalf("the handler's ConfigMap holds %d files, the workers run %q: want handle.sh", len(cm.Data), work.flag("exec"))
	}
	if err := os.WriteFile(handler, []byte(cm.Data["handle.sh"]), 0o555); err != nil {
		t.Fatal(err)
	}
	argv := append([]string(nil), work.argv...)
	for i := range argv {
		switch {
		case i > 0 && argv[i-1] == "--metrics-addr":
			argv[i] = "127.0.0.1:0"
		case i > 0 && argv[i-1] == "--exec":
			argv[i] = handler
		}
	}
	worker := start(t, bin, db.URL, argv...)
	base := worker.serving(t)

	queue := work.flag("queue")
	run(t, bin, db.URL, "send", "--queue", queue, "--key", "tenant-1", "--type", "FileCreated", "--payload", `{"path":"/a"}`)
	pgtest.WaitFor(t, 30*time.Second, "the event handled by the kit's handler", func() (bool, error) {
		return strings.Contains(worker.stdout.String(), `tenant-1 FileCreated event`) && strings.Contains(worker.stdout.String(), `{"path":"/a"}`), nil
	})

	for _, p := range []*probe{work.c.StartupProbe, work.c.LivenessProbe, work.c.ReadinessProbe} {
		if code, body := get(base + p.HTTPGet.Path); code != http.StatusOK {
			t.Errorf("%s answered %d %q", p.HTTPGet.Path, code, body)
		}
	}

	want := queried(t, docs)
	if len(want) == 0 {
		t.Fatal("the dashboard and the KEDA query name no partitionq metric")
	}
	// The gauges come with a scrape whose read of the group's state
	// answered in time: look again until every name is there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone := missing(want, exported(t, base+"/metrics"))
		if len(gone) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics the kit queries that a live worker does not export:\n%s", strings.Join(gone, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("queried, and exported by a live worker: %s", strings.Join(names, " "))

	worker.stop(t, "the worker")
	tick.stop(t, "the ticker")
}
