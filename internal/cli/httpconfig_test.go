package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/internal/cli"
	"github.com/partitionq/partitionq/test/pgtest"
)

// clientCert makes a client certificate and its key, PEM-encoded.
func clientCert(t *testing.T) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "partitionq-worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), cert
}

// --http-config gives TLS (a CA to trust, a client certificate) and a
// bearer token read from a file, read again when the file changes; the
// environment gives basic auth; nothing of it is on the command line.
func TestHTTPConfigTLSAndCredentials(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	h := newHarness(t)
	h.setup(1)
	dir := t.TempDir()
	certPEM, keyPEM, cert := clientCert(t)
	var mu sync.Mutex
	token := "first"
	var auths []string
	var ok atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		auths = append(auths, r.Header.Get("Authorization"))
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ok.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	defer srv.Close()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	write("client.pem", certPEM)
	write("client-key.pem", keyPEM)
	write("token", []byte("first\n"))
	write("http.yml", []byte("tls:\n  ca_file: ca.pem\n  cert_file: client.pem\n  key_file: client-key.pem\nbearer_token_file: token\n"))
	config := filepath.Join(dir, "http.yml")

	handled := func(n int) func() bool { return func() bool { return ok.Load() >= int64(n) } }
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "{}")
	w := h.startWork("--http", srv.URL, "--http-config", config, "--backoff-min", "50ms", "--backoff-max", "100ms")
	waitFor(t, 30*time.Second, "the first event handled over TLS with the first token", handled(1))
	mu.Lock()
	token = "second"
	mu.Unlock()
	write("token", []byte("second"))
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "{}")
	waitFor(t, 30*time.Second, "the second event handled with the token read again", handled(2))
	if res := w.stop(t); res.code != cli.ExitOK {
		t.Fatal(res)
	}

	// Basic auth from the environment, over plain HTTP.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, given := r.BasicAuth(); !given || u != "worker" || p != "pw" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ok.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer plain.Close()
	env := &harness{t: t, db: h.db, url: h.url, env: map[string]string{"DATABASE_URL": h.url, "PARTITIONQ_HTTP_USER": "worker", "PARTITIONQ_HTTP_PASSWORD": "pw"}}
	h.ok("send", "--queue", "q", "--key", "k", "--payload", "{}")
	w = env.startWork("--http", plain.URL)
	waitFor(t, 30*time.Second, "the third event handled with basic auth", handled(3))
	if res := w.stop(t); res.code != cli.ExitOK {
		t.Fatal(res)
	}

	// Mistakes are said before the worker starts.
	write("bad.yml", []byte("tls:\n  ca_fil: ca.pem\n"))
	write("both.yml", []byte("bearer_token_file: token\n"))
	for _, c := range []struct {
		h    *harness
		args []string
		want string
	}{
		{h, []string{"--http", srv.URL, "--http-config", filepath.Join(dir, "bad.yml")}, "field ca_fil not found"},
		{h, []string{"--http", plain.URL, "--http-config", config}, "has tls settings, and --http " + plain.URL + " is not an https URL"},
		{env, []string{"--http", plain.URL, "--http-config", filepath.Join(dir, "both.yml")}, "one kind of credentials, from one place"},
		{h, []string{"--http", srv.URL, "--http-config", filepath.Join(dir, "missing.yml")}, "--http-config: open"},
	} {
		r := c.h.run(with(qg, append([]string{"work"}, c.args...)...)...)
		c.h.expect(r, cli.ExitFailed, []string{c.want}, c.args)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range auths {
		if !strings.HasPrefix(a, "Bearer ") {
			t.Errorf("a request without the bearer token: %q", a)
		}
	}
}
