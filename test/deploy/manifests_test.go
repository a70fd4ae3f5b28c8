package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

// The parts of Kubernetes objects the checks read.
type (
	container struct {
		Name    string   `json:"name"`
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
		Env     []struct {
			Name      string `json:"name"`
			Value     string `json:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name string `json:"name"`
					Key  string `json:"key"`
				} `json:"secretKeyRef"`
			} `json:"valueFrom"`
		} `json:"env"`
		Ports []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports"`
		StartupProbe   *probe `json:"startupProbe"`
		LivenessProbe  *probe `json:"livenessProbe"`
		ReadinessProbe *probe `json:"readinessProbe"`
		Resources      struct {
			Requests map[string]string `json:"requests"`
			Limits   map[string]string `json:"limits"`
		} `json:"resources"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"`
		} `json:"httpGet"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot *bool `json:"runAsNonRoot"`
		} `json:"securityContext"`
		Containers []container `json:"containers"`
	}
	// workload is a Deployment or a Job.
	workload struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Template struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec podSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
)

// invocation is one partitionq command line a manifest runs.
type invocation struct {
	in    doc
	c     container
	pod   podSpec
	argv  []string // after "partitionq": the command, then its flags
	label map[string]string
}

func (v invocation) command() string { return v.argv[0] }

// flag returns the value of --name on the command line ("" when absent).
func (v invocation) flag(name string) string {
	for i, a := range v.argv {
		if a == "--"+name && i+1 < len(v.argv) {
			return v.argv[i+1]
		}
		if val, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return val
		}
	}
	return ""
}

// invocations returns the partitionq command lines of the kit's
// Deployments and Jobs: a container of the partitionq image without a
// command runs partitionq with its args (the image's entrypoint); one
// that runs a shell script runs each line that starts with partitionq.
func invocations(t *testing.T, docs []doc) []invocation {
	t.Helper()
	var out []invocation
	for _, d := range docs {
		if d.Kind != "Deployment" && d.Kind != "Job" {
			continue
		}
		var w workload
		d.as(t, &w)
		for _, c := range w.Spec.Template.Spec.Containers {
			if c.Image != "partitionq" {
				t.Errorf("%s: container %s runs image %q, not partitionq (the kustomization names the registry)", d, c.Name, c.Image)
				continue
			}
			base := invocation{in: d, c: c, pod: w.Spec.Template.Spec, label: w.Spec.Template.Metadata.Labels}
			switch {
			case len(c.Command) == 0:
				base.argv = c.Args
				out = append(out, base)
			case len(c.Command) == 2 && c.Command[0] == "/bin/sh" && strings.HasPrefix(c.Command[1], "-") && len(c.Args) == 1:
				for _, line := range scanLines(c.Args[0]) {
					words := splitShell(line)
					if words[0] == "partitionq" {
						v := base
						v.argv = words[1:]
						out = append(out, v)
					}
				}
			default:
				t.Errorf("%s: container %s: command %q: give the partitionq command in args, or a script to /bin/sh -c", d, c.Name, c.Command)
			}
		}
	}
	return out
}

// helpFlags returns the flags `partitionq COMMAND --help` lists.
func helpFlags(t *testing.T, bin, command string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, command, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("partitionq %s --help: %v\n%s", command, err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z][a-z-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	return flags
}

// Every flag a manifest passes to partitionq is one its command's --help
// lists; the database comes from the Secret, never the command line: the
// owner's connection for setup and the ticker, the worker's for the
// workers (docs/security.md).
func TestManifestsPassOnlyFlagsTheCommandHas(t *testing.T) {
	t.Parallel()
	bin := imageBinary(t)
	invs := invocations(t, manifests(t))
	seen := map[string]bool{}
	for _, v := range invs {
		seen[v.command()] = true
		known := helpFlags(t, bin, v.command())
		for _, a := range v.argv[1:] {
			if strings.Contains(a, "://") || strings.HasPrefix(a, "--db") {
				t.Errorf("%s: partitionq %s is given the database on its command line (%q): take it from the Secret", v.in, v.command(), a)
			}
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if !known[name] {
				t.Errorf("%s: partitionq %s --%s: partitionq %s --help has no such flag", v.in, v.command(), name, v.command())
			}
		}
		wantKey := map[string]string{"work": "worker-url", "tick": "owner-url", "setup": "owner-url"}[v.command()]
		found := false
		for _, e := range v.c.Env {
			if e.Name != "DATABASE_URL" {
				continue
			}
			found = true
			switch {
			case e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
				t.Errorf("%s: DATABASE_URL is not taken from a Secret", v.in)
			case e.ValueFrom.SecretKeyRef.Key != wantKey:
				t.Errorf("%s: partitionq %s connects with the Secret's %s, want %s", v.in, v.command(), e.ValueFrom.SecretKeyRef.Key, wantKey)
			}
		}
		if !found {
			t.Errorf("%s: container %s has no DATABASE_URL", v.in, v.c.Name)
		}
	}
	for _, c := range []string{"setup", "tick", "work"} {
		if !seen[c] {
			t.Errorf("no manifest runs partitionq %s", c)
		}
	}
}

// the kit's one invocation of command.
func only(t *testing.T, invs []invocation, command string) invocation {
	t.Helper()
	var found []invocation
	for _, v := range invs {
		if v.command() == command {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d manifests run partitionq %s, want 1", len(found), command)
	}
	return found[0]
}

// shutdownTimeout is the worker's --shutdown-timeout, or its default.
func shutdownTimeout(t *testing.T, v invocation) time.Duration {
	t.Helper()
	s := v.flag("shutdown-timeout")
	if s == "" {
		return partitionq.ShutdownTimeoutDefault
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: --shutdown-timeout %q: %v", v.in, s, err)
	}
	return d
}

// The workers' Deployment probes /livez and /readyz on the port of
// --metrics-addr, gives the stop --shutdown-timeout + 10s at least, runs
// as a non-root user with requests and limits; the PodMonitor scrapes
// that port of those pods; KEDA scales that Deployment on that group's
// backlog, up to the group's number of slots as the setup Job makes it;
// the setup Job runs the roles.sql the image holds.
func TestWorkersProbesGraceAndScaling(t *testing.T) {
	t.Parallel()
	docs := manifests(t)
	invs := invocations(t, docs)
	work, setup := only(t, invs, "work"), only(t, invs, "setup")

	_, port, ok := strings.Cut(work.flag("metrics-addr"), ":")
	if !ok || port == "" {
		t.Fatalf("%s: the worker has no --metrics-addr HOST:PORT (%q): nothing serves its probes", work.in, work.flag("metrics-addr"))
	}
	var metricsPort string
	for _, p := range work.c.Ports {
		if strconv.Itoa(p.ContainerPort) == port {
			metricsPort = p.Name
		}
	}
	if metricsPort == "" {
		t.Fatalf("%s: no container port %s (--metrics-addr)", work.in, port)
	}
	for _, p := range []struct {
		what  string
		probe *probe
		path  string
	}{
		{"startupProbe", work.c.StartupProbe, "/livez"},
		{"livenessProbe", work.c.LivenessProbe, "/livez"},
		{"readinessProbe", work.c.ReadinessProbe, "/readyz"},
	} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("%s: no %s over HTTP", work.in, p.what)
		case p.probe.HTTPGet.Path != p.path || (p.probe.HTTPGet.Port != metricsPort && p.probe.HTTPGet.Port != port):
			t.Errorf("%s: %s asks %v%s, want port %s (%s) %s", work.in, p.what, p.probe.HTTPGet.Port, p.probe.HTTPGet.Path, metricsPort, port, p.path)
		}
	}
	grace := time.Duration(-1)
	if g := work.pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if need := shutdownTimeout(t, work) + 10*time.Second; grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds gives %s (-1s: not set): the worker needs --shutdown-timeout + 10s = %s", work.in, grace, need)
	}
	for _, v := range invs {
		if v.pod.SecurityContext.RunAsNonRoot == nil || !*v.pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: the pod does not require a non-root user (securityContext.runAsNonRoot)", v.in)
		}
		if v.c.Resources.Requests["cpu"] == "" || v.c.Resources.Requests["memory"] == "" || v.c.Resources.Limits["memory"] == "" {
			t.Errorf("%s: container %s has no cpu and memory requests and memory limit: %+v", v.in, v.c.Name, v.c.Resources)
		}
	}

	var pm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	byKind(docs, "PodMonitor")[0].as(t, &pm)
	for k, val := range pm.Spec.Selector.MatchLabels {
		if work.label[k] != val {
			t.Errorf("the PodMonitor selects %s=%s, which the workers' pods are not labelled with (%v)", k, val, work.label)
		}
	}
	if len(pm.Spec.Endpoints) != 1 || pm.Spec.Endpoints[0].Port != metricsPort || pm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("the PodMonitor scrapes %+v, want port %s path /metrics", pm.Spec.Endpoints, metricsPort)
	}

	var so struct {
		Spec struct {
			ScaleTargetRef struct {
				Name string `json:"name"`
			} `json:"scaleTargetRef"`
			Min      *int `json:"minReplicaCount"`
			Max      *int `json:"maxReplicaCount"`
			Triggers []struct {
				Type     string            `json:"type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	byKind(docs, "ScaledObject")[0].as(t, &so)
	if so.Spec.ScaleTargetRef.Name != work.in.Metadata.Name {
		t.Errorf("the ScaledObject scales %q, not the workers' Deployment %q", so.Spec.ScaleTargetRef.Name, work.in.Metadata.Name)
	}
	if setup.flag("queue") != work.flag("queue") || setup.flag("group") != work.flag("group") {
		t.Fatalf("setup makes %s/%s, the workers run %s/%s", setup.flag("queue"), setup.flag("group"), work.flag("queue"), work.flag("group"))
	}
	slots, err := strconv.Atoi(setup.flag("slots"))
	if err != nil {
		t.Fatalf("%s: setup --slots %q: %v", setup.in, setup.flag("slots"), err)
	}
	if so.Spec.Min == nil || *so.Spec.Min < 1 || so.Spec.Max == nil || *so.Spec.Max > slots || *so.Spec.Max < *so.Spec.Min {
		t.Errorf("the ScaledObject scales between %v and %v replicas: want at least 1 (the metrics come from the workers) and at most the group's %d slots", so.Spec.Min, so.Spec.Max, slots)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("the ScaledObject's triggers: %+v, want one prometheus trigger", so.Spec.Triggers)
	}
	q := so.Spec.Triggers[0].Metadata["query"]
	for _, m := range []string{`queue="` + work.flag("queue") + `"`, `group="` + work.flag("group") + `"`} {
		if !strings.Contains(q, m) {
			t.Errorf("the KEDA query %q does not select %s, the workers' group", q, m)
		}
	}
	if _, err := strconv.ParseFloat(so.Spec.Triggers[0].Metadata["threshold"], 64); err != nil {
		t.Errorf("the KEDA threshold %q is not a number", so.Spec.Triggers[0].Metadata["threshold"])
	}

	// The setup Job's psql runs the roles.sql of the image.
	var job workload
	setup.in.as(t, &job)
	script := strings.Join(setup.c.Args, "\n")
	m := regexp.MustCompile(`psql "\$DATABASE_URL" -v ON_ERROR_STOP=1 -f (\S+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("%s: the setup Job does not run roles.sql with psql: %q", setup.in, script)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^COPY sql/roles\.sql ` + regexp.QuoteMeta(m[1]) + `$`).Match(dockerfile) {
		t.Errorf("the setup Job runs %s, where the Dockerfile does not put sql/roles.sql", m[1])
	}
}
