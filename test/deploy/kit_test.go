// Package deploy_test checks the deployment kit (deploy/, the Dockerfile
// and make image) against the command it deploys: the manifests and the
// dashboard parse, every flag they pass exists, every metric they query
// is one a live worker exports, the probes answer where the manifests
// look, and the image's binary is built as make build builds it.
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// root is the repository, from this package's directory.
const root = "../.."

// doc is one YAML document of a manifest: its kind and name, and the whole
// of it as JSON, decoded again into the shape a check needs.
type doc struct {
	file       string
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	raw []byte
}

func (d doc) String() string { return fmt.Sprintf("%s %s (%s)", d.Kind, d.Metadata.Name, d.file) }

// as decodes the document into v.
func (d doc) as(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(d.raw, v); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
}

// manifests reads every YAML document of deploy/kubernetes, strictly (a
// key given twice is an error), with the file it came from.
func manifests(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	var out []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.SetStrict(true)
		for i := 0; ; i++ {
			var v any
			err := dec.Decode(&v)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			if v == nil {
				continue
			}
			raw, err := json.Marshal(jsonable(t, v))
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			d := doc{file: filepath.Base(f), raw: raw}
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			if d.APIVersion == "" || d.Kind == "" || (d.Metadata.Name == "" && d.Kind != "Kustomization") {
				t.Errorf("%s, document %d: apiVersion %q, kind %q, name %q: all three are needed", f, i+1, d.APIVersion, d.Kind, d.Metadata.Name)
			}
			out = append(out, d)
		}
	}
	return out
}

// jsonable turns what the YAML decoder made (maps keyed by any) into what
// encoding/json takes, refusing keys that are not strings.
func jsonable(t *testing.T, v any) any {
	t.Helper()
	switch v := v.(type) {
	case map[any]any:
		m := map[string]any{}
		for k, x := range v {
			ks, ok := k.(string)
			if !ok {
				t.Fatalf("a YAML key that is not a string: %v", k)
			}
			m[ks] = jsonable(t, x)
		}
		return m
	case []any:
		for i := range v {
			v[i] = jsonable(t, v[i])
		}
	}
	return v
}

// byKind returns the manifest documents of kind.
func byKind(docs []doc, kind string) []doc {
	var out []doc
	for _, d := range docs {
		if d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// The kustomization lists every manifest beside it, and only those; the
// kit has the setup Job, the ticker's and the workers' Deployments, the
// handler's ConfigMap, the PodMonitor and the ScaledObject.
func TestManifestsParse(t *testing.T) {
	t.Parallel()
	docs := manifests(t)
	ks := byKind(docs, "Kustomization")
	if len(ks) != 1 {
		t.Fatalf("%d kustomizations, want 1", len(ks))
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	ks[0].as(t, &k)
	listed := map[string]bool{}
	for _, r := range k.Resources {
		listed[r] = true
	}
	files := map[string]bool{}
	for _, d := range docs {
		if d.Kind != "Kustomization" {
			files[d.file] = true
		}
	}
	for f := range files {
		if !listed[f] {
			t.Errorf("deploy/kubernetes/%s is not in kustomization.yaml's resources", f)
		}
	}
	for r := range listed {
		if !files[r] {
			t.Errorf("kustomization.yaml lists %s, which deploy/kubernetes does not have", r)
		}
	}
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d.Kind)
	}
	sort.Strings(kinds)
	want := "ConfigMap Deployment Deployment Job Kustomization PodMonitor ScaledObject"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("the kit's documents are %s, want %s", got, want)
	}
}

// The Grafana dashboard is JSON, with a title, a uid and panels that each
// query something.
func TestDashboardParses(t *testing.T) {
	t.Parallel()
	d := dashboard(t)
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard: title %q, uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has a target without a query", p.Title)
			}
		}
	}
}

type dashboardJSON struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func dashboard(t *testing.T) dashboardJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "partitionq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboardJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("deploy/grafana/partitionq.json: %v", err)
	}
	return d
}

// splitShell splits one line of a shell script into words: blanks
// separate them, single or double quotes keep blanks in one (no escapes,
// which the kit's scripts do not use).
func splitShell(line string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// scanLines returns the non-empty lines of s.
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// metricName matches the partitionq metrics a query names.
var metricName = regexp.MustCompile(`\bpartitionq_[a-z0-9_]*[a-z0-9]`)
