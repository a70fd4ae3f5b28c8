package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/crypto/bcrypt"

	"github.com/partitionq/partitionq/internal/cli"

	"github.com/partitionq/partitionq/test/pgtest"
)

// scrapeSlots fetches url and returns, for each metric of the group q/g,
// its value by slot (a histogram's count).
func scrapeSlots(t *testing.T, url string) (map[string]map[int]float64, error) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] != "q" || labels["group"] != "g" {
				continue // the Go runtime's and the process's metrics
			}
			slot, err := strconv.Atoi(labels["slot"])
			if err != nil {
				t.Fatalf("%s: slot label %q", name, labels["slot"])
			}
			if out[name] == nil {
				out[name] = map[int]float64{}
			}
			out[name][slot] = value(m)
		}
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return math.NaN()
}

func total(m map[int]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// TestWorkMetricsAddr runs `partitionq work --metrics-addr 127.0.0.1:0`,
// scrapes the address it prints over HTTP while it handles events (some of
// which fail into the dead letters), and checks the counters against the
// events handled and failed and the gauges against status; after the
// worker stops, nothing listens there any more.
func TestWorkMetricsAddr(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := newHarness(t)
	h.setup(2)
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, `{"key":"tenant-%d","type":"T","payload":{"i":%d}}`+"\n", i%4, i)
	}
	in.WriteString(`{"key":"bad","type":"T","payload":{}}` + "\n" + `{"key":"bad","type":"T","payload":{}}` + "\n")
	if r := h.runStdin(in.String(), "send", "--queue", "q"); r.code != cli.ExitOK {
		t.Fatal(r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr pgtest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, with(qg, "work", "--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms",
			"--max-attempts", "1", "--metrics-addr", "127.0.0.1:0", "--exec", `[ "$PARTITIONQ_KEY" != bad ]`),
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return h.env[k] }})
	}()
	served := regexp.MustCompile(`serving metrics at (http://\S+/metrics)`)
	var url string
	waitFor(t, 30*time.Second, "the metrics address printed", func() bool {
		if m := served.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})

	var got map[string]map[int]float64
	waitFor(t, 60*time.Second, "20 events handled and 2 dead letters scraped", func() bool {
		var err error
		got, err = scrapeSlots(t, url)
		if err != nil {
			t.Fatalf("scrape: %v\nstderr:\n%s", err, stderr.String())
		}
		return total(got["partitionq_events_handled_total"]) == 20 && total(got["partitionq_dead_letters_total"]) == 2
	})
	if f, calls := total(got["partitionq_events_failed_total"]), total(got["partitionq_handler_duration_seconds"]); f != 2 || calls != 22 {
		t.Errorf("scraped %v failures and %v handler durations, want 2 and 22", f, calls)
	}

	// The gauges agree with status once both see the end state (a scrape's
	// read may be a second old: it can predate the last batch's finish).
	var mismatch []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st statusOut
		h.json(&st, with(qg, "status")...)
		got, err := scrapeSlots(t, url)
		if err != nil {
			t.Fatal(err)
		}
		mismatch = nil
		for _, s := range st.Slots {
			if got["partitionq_slot_owned"][s.Slot] != 1 || s.Owner == nil {
				mismatch = append(mismatch, fmt.Sprintf("slot %d: owned %v, status owner %+v", s.Slot, got["partitionq_slot_owned"][s.Slot], s.Owner))
			}
			if got["partitionq_slot_pending_events"][s.Slot] != float64(s.Pending) ||
				got["partitionq_blocked_keys"][s.Slot] != float64(s.BlockedKeys) ||
				got["partitionq_set_aside_events"][s.Slot] != float64(s.SetAside) {
				mismatch = append(mismatch, fmt.Sprintf("slot %d: pending %v blocked %v set aside %v scraped; status says %d %d %d", s.Slot,
					got["partitionq_slot_pending_events"][s.Slot], got["partitionq_blocked_keys"][s.Slot],
					got["partitionq_set_aside_events"][s.Slot],
					s.Pending, s.BlockedKeys, s.SetAside))
			}
			if lag, ok := got["partitionq_slot_lag_seconds"][s.Slot]; !ok || math.Abs(lag-s.LagSeconds) > 2 {
				mismatch = append(mismatch, fmt.Sprintf("slot %d: lag %v s scraped, status says %v s", s.Slot, lag, s.LagSeconds))
			}
		}
		if len(mismatch) == 0 && len(st.Slots) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gauges do not agree with status after 30s:\n%s", strings.Join(mismatch, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	cancel()
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("work exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("work did not stop")
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("%s still answers after the worker stopped", url)
	}
}

func TestWorkMetricsAddrRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	for addr, want := range map[string]string{
		"9464":             "not HOST:PORT",
		"localhost:metric": "the port must be a number from 0 to 65535",
		"127.0.0.1:70000":  "the port must be a number from 0 to 65535",
	} {
		h.fails(cli.ExitUsage, []string{"invalid --metrics-addr", want, "give HOST:PORT"},
			with(qg, "work", "--exec", "true", "--metrics-addr", addr)...)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h.fails(cli.ExitFailed, []string{"cannot serve metrics on --metrics-addr \"" + ln.Addr().String() + "\"", "address already in use", "give a free port"},
		with(qg, "work", "--exec", "true", "--metrics-addr", ln.Addr().String())...)
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir, and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "partitionq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestWorkMetricsWebConfig serves the metrics with --metrics-web-config
// (TLS with a self-signed certificate made here, basic auth with a bcrypt
// hash, the format of Prometheus's exporters) and scrapes them for real:
// over TLS with the password they answer with the worker's series; without
// it, with a wrong one, or over plain HTTP, they do not.
func TestWorkMetricsWebConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "x")
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n",
		certFile, keyFile, hash)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr pgtest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, with(qg, "work", "--ticker", "--tick-interval", "10ms", "--poll-interval", "10ms",
			"--metrics-addr", "127.0.0.1:0", "--metrics-web-config", webConfig, "--exec", "true"),
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return h.env[k] }})
	}()
	served := regexp.MustCompile(`serving metrics at (https://\S+/metrics)`)
	var url string
	waitFor(t, 30*time.Second, "the https metrics address printed", func() bool {
		if m := served.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(url, user, pass string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, 60*time.Second, "the event handled, scraped over TLS with basic auth", func() bool {
		code, body := get(url, "prometheus", "s3cret")
		if code != http.StatusOK {
			t.Fatalf("scrape with the password: %d %s", code, body)
		}
		return strings.Contains(body, `partitionq_events_handled_total{group="g",queue="q",slot="0",slots="1"} 1`)
	})
	if code, _ := get(url, "", ""); code != http.StatusUnauthorized {
		t.Errorf("scrape without a password: %d, want 401", code)
	}
	if code, _ := get(url, "prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("scrape with a wrong password: %d, want 401", code)
	}
	plain := "http://" + strings.TrimPrefix(url, "https://")
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(plain); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP %s answered 200", plain)
		}
	}
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Fatalf("work exited %d:\n%s", code, stderr.String())
	}
}

// A bad web configuration fails the command before the worker starts,
// naming the flag; one without --metrics-addr is a usage error.
func TestWorkMetricsWebConfigRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	dir := t.TempDir()
	bad := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent/cert.pem\n  key_file: /nonexistent/key.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yml")
	if err := os.WriteFile(typo, []byte("basic_auth_user:\n  prometheus: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.fails(cli.ExitFailed, []string{`invalid --metrics-web-config "`, "cert_file (/nonexistent/cert.pem)", "tls_server_config, basic_auth_users"},
		with(qg, "work", "--exec", "true", "--metrics-addr", "127.0.0.1:0", "--metrics-web-config", bad)...)
	h.fails(cli.ExitFailed, []string{`invalid --metrics-web-config "`, "field basic_auth_user not found"},
		with(qg, "work", "--exec", "true", "--metrics-addr", "127.0.0.1:0", "--metrics-web-config", typo)...)
	h.fails(cli.ExitFailed, []string{`invalid --metrics-web-config "`, "no such file"},
		with(qg, "work", "--exec", "true", "--metrics-addr", "127.0.0.1:0", "--metrics-web-config", filepath.Join(dir, "none.yml"))...)
	h.fails(cli.ExitUsage, []string{"--metrics-web-config needs --metrics-addr"},
		with(qg, "work", "--exec", "true", "--metrics-web-config", bad)...)
}
