package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/partitionq/partitionq/partitionq"
)

// work --http's TLS and credentials (docs/handlers.md): from the file of
// --http-config, or for credentials alone from the environment; never from
// the command line, where every user of the machine can read them.
//
//	tls:
//	  ca_file: ca.pem              # CAs to trust for an https URL (PEM); default: the system's
//	  cert_file: client.pem        # a client certificate (PEM), with key_file
//	  key_file: client-key.pem
//	  server_name: handler.internal  # the name to verify, when not the URL's host
//	  insecure_skip_verify: false
//	bearer_token_file: token       # Authorization: Bearer <the file's text>
//	basic_auth:                    # or basic auth
//	  username: partitionq
//	  password_file: password
//
// Relative paths are the file's directory's. The token and password files
// are read again when they change (looked at once a second at most), so a
// rotated secret needs no restart; the certificates are read at start.

// The environment variables of work --http's credentials.
const (
	envHTTPToken    = "PARTITIONQ_HTTP_TOKEN"
	envHTTPUser     = "PARTITIONQ_HTTP_USER"
	envHTTPPassword = "PARTITIONQ_HTTP_PASSWORD"
)

// httpConfigFile is the file of --http-config.
type httpConfigFile struct {
	TLS *struct {
		CAFile             string `yaml:"ca_file"`
		CertFile           string `yaml:"cert_file"`
		KeyFile            string `yaml:"key_file"`
		ServerName         string `yaml:"server_name"`
		InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	} `yaml:"tls"`
	BearerTokenFile string `yaml:"bearer_token_file"`
	BasicAuth       *struct {
		Username     string `yaml:"username"`
		PasswordFile string `yaml:"password_file"`
	} `yaml:"basic_auth"`
}

// httpClientSettings are the TLS and credentials of work --http.
type httpClientSettings struct {
	tls       *tls.Config
	authorize func(*http.Request) error
}

// loadHTTPSettings reads --http-config (path, "" for none) and the
// credentials of the environment, for requests to url.
func loadHTTPSettings(path, url string, getenv func(string) string) (httpClientSettings, error) {
	var s httpClientSettings
	var f httpConfigFile
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return s, fmt.Errorf("--http-config: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			return s, fmt.Errorf("--http-config %s: %w (docs/handlers.md gives the format)", path, err)
		}
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if f.TLS != nil {
		if !strings.HasPrefix(url, "https:") {
			return s, fmt.Errorf("--http-config %s has tls settings, and --http %s is not an https URL: use https, or leave tls out", path, url)
		}
		t := &tls.Config{ServerName: f.TLS.ServerName, InsecureSkipVerify: f.TLS.InsecureSkipVerify}
		if f.TLS.CAFile != "" {
			pem, err := os.ReadFile(rel(f.TLS.CAFile))
			if err != nil {
				return s, fmt.Errorf("--http-config %s: tls.ca_file: %w", path, err)
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return s, fmt.Errorf("--http-config %s: tls.ca_file %s holds no PEM certificate", path, rel(f.TLS.CAFile))
			}
		}
		if (f.TLS.CertFile == "") != (f.TLS.KeyFile == "") {
			return s, fmt.Errorf("--http-config %s: tls.cert_file and tls.key_file go together: give both, or neither", path)
		}
		if f.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(rel(f.TLS.CertFile), rel(f.TLS.KeyFile))
			if err != nil {
				return s, fmt.Errorf("--http-config %s: tls.cert_file and tls.key_file: %w", path, err)
			}
			t.Certificates = []tls.Certificate{cert}
		}
		s.tls = t
	}

	token, user, password := getenv(envHTTPToken), getenv(envHTTPUser), getenv(envHTTPPassword)
	sources := 0
	for _, given := range []bool{f.BearerTokenFile != "", f.BasicAuth != nil, token != "", user != "" || password != ""} {
		if given {
			sources++
		}
	}
	if sources > 1 {
		return s, fmt.Errorf("work --http takes one kind of credentials, from one place: --http-config's bearer_token_file or basic_auth, or $%s, or $%s and $%s; %d are given",
			envHTTPToken, envHTTPUser, envHTTPPassword, sources)
	}
	switch {
	case f.BearerTokenFile != "":
		sec, err := newFileSecret(rel(f.BearerTokenFile), "bearer_token_file")
		if err != nil {
			return s, fmt.Errorf("--http-config %s: %w", path, err)
		}
		s.authorize = func(r *http.Request) error {
			tok, err := sec.value()
			if err == nil {
				r.Header["Authorization"] = []string{"Bearer " + tok}
			}
			return err
		}
	case f.BasicAuth != nil:
		if f.BasicAuth.Username == "" || f.BasicAuth.PasswordFile == "" {
			return s, fmt.Errorf("--http-config %s: basic_auth needs a username and a password_file", path)
		}
		sec, err := newFileSecret(rel(f.BasicAuth.PasswordFile), "basic_auth.password_file")
		if err != nil {
			return s, fmt.Errorf("--http-config %s: %w", path, err)
		}
		name := f.BasicAuth.Username
		s.authorize = func(r *http.Request) error {
			pw, err := sec.value()
			if err == nil {
				r.SetBasicAuth(name, pw)
			}
			return err
		}
	case token != "":
		header := []string{"Bearer " + token}
		s.authorize = func(r *http.Request) error { r.Header["Authorization"] = header; return nil }
	case user != "" || password != "":
		if user == "" || password == "" {
			return s, fmt.Errorf("basic auth for work --http needs both $%s and $%s", envHTTPUser, envHTTPPassword)
		}
		s.authorize = func(r *http.Request) error { r.SetBasicAuth(user, password); return nil }
	}
	return s, nil
}

// fileSecret is a secret kept in a file: read at start, and again when the
// file changes (looked at once a second at most). It is safe for
// concurrent use.
type fileSecret struct {
	path, field string

	mu      sync.Mutex
	val     string
	mod     time.Time
	size    int64
	checked time.Time
}

func newFileSecret(path, field string) (*fileSecret, error) {
	s := &fileSecret{path: path, field: field}
	if _, err := s.value(); err != nil {
		return nil, err
	}
	return s, nil
}

// value returns the secret, read again if the file changed.
func (s *fileSecret) value() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.val != "" && now.Sub(s.checked) < time.Second {
		return s.val, nil
	}
	s.checked = now
	fi, err := os.Stat(s.path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.field, err)
	}
	if s.val != "" && fi.ModTime().Equal(s.mod) && fi.Size() == s.size {
		return s.val, nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.field, err)
	}
	v := string(bytes.TrimSpace(b))
	if v == "" {
		return "", errors.New(s.field + " " + s.path + " is empty")
	}
	s.val, s.mod, s.size = v, fi.ModTime(), fi.Size()
	return v, nil
}

// httpHandlerConfig is the library's configuration of work --http.
func httpHandlerConfig(url string, s httpClientSettings, maxConns int) partitionq.HTTPHandlerConfig {
	return partitionq.HTTPHandlerConfig{URL: url, MaxConns: maxConns, TLS: s.tls, Authorize: s.authorize}
}
