package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// checkMetricsAddr refuses a --metrics-addr that is not HOST:PORT with a
// numeric port (HOST may be empty: every interface).
func checkMetricsAddr(addr string) error {
	bad := func(why string) error {
		return usagef("invalid --metrics-addr %s: %s: give HOST:PORT, e.g. 127.0.0.1:9464, or :9464 for every interface", termsafe.Echo(addr), why)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bad("not HOST:PORT")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return bad("the port must be a number from 0 to 65535")
	}
	return nil
}

// checkWebConfig reads a --metrics-web-config file (the web configuration
// file of Prometheus's exporters: TLS and basic auth, read by
// prometheus/exporter-toolkit) and checks it, its certificates and its
// password hashes included, before the worker starts. It reports whether the
// file turns TLS on.
func checkWebConfig(path string) (tls bool, err error) {
	bad := func(err error) error {
		return fmt.Errorf("invalid --metrics-web-config %s: %w: give a web configuration file as Prometheus's exporters take it "+
			"(tls_server_config, basic_auth_users; docs/cli.md, partitionq work)", termsafe.Echo(path), err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, bad(err)
	}
	if err := web.Validate(path); err != nil {
		return false, bad(err)
	}
	var c web.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return false, bad(err)
	}
	return c.TLSConfig.IsEnabled(), nil
}

// metricsServer serves /metrics (the worker's metrics, and the Go
// runtime's and process's) beside a worker, and its liveness and
// readiness: /livez and /readyz (the names Kubernetes' own components
// serve; /healthz, their older name, answers as /livez).
type metricsServer struct {
	reg       *prometheus.Registry
	ln        net.Listener
	srv       *http.Server
	webConfig string // --metrics-web-config: TLS and basic auth ("" none)
	tls       bool
	log       *slog.Logger
	done      chan error
	worker    *partitionq.Worker // set by serve, before anything is served
}

// listenMetrics opens addr (checked by checkMetricsAddr) for the metrics,
// before the worker starts, so that a port in use or a bad web configuration
// fails the command at once. webConfig, when not "", is a web configuration
// file (TLS, basic auth) served through prometheus/exporter-toolkit.
func listenMetrics(addr, webConfig string, log *slog.Logger) (*metricsServer, error) {
	useTLS := false
	if webConfig != "" {
		var err error
		if useTLS, err = checkWebConfig(webConfig); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot serve metrics on --metrics-addr %s: %w: give a free port, or another address", termsafe.Echo(addr), err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	// The server's own complaints (a client that speaks HTTP to the TLS
	// port, a refused handshake) are the library's debug logs.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	m := &metricsServer{reg: reg, ln: ln, srv: srv, webConfig: webConfig, tls: useTLS, log: log, done: make(chan error, 1)}
	live := probe(func() error { return m.worker.Live() })
	mux.Handle("GET /livez", live)
	mux.Handle("GET /healthz", live)
	mux.Handle("GET /readyz", probe(func() error { return m.worker.Ready() }))
	return m, nil
}

// probe answers a liveness or readiness probe: 200 and "ok" when check
// passes, 503 and why not when it fails. The checks read the worker's own
// state: a probe costs no query.
func probe(check func() error) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			rw.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(rw, err)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
}

// URL is where path is served ("/metrics", "/livez", "/readyz").
func (m *metricsServer) URL(path string) string {
	scheme := "http"
	if m.tls {
		scheme = "https"
	}
	return scheme + "://" + m.ln.Addr().String() + path
}

// serve serves the metrics and w's health until shutdown: through
// exporter-toolkit (TLS, basic auth) with a web configuration, else plain
// HTTP.
func (m *metricsServer) serve(w *partitionq.Worker) {
	m.worker = w
	if m.webConfig == "" {
		go func() { m.done <- m.srv.Serve(m.ln) }()
		return
	}
	cfg := m.webConfig
	go func() { m.done <- web.Serve(m.ln, m.srv, &web.FlagConfig{WebConfigFile: &cfg}, m.log) }()
}

// shutdown stops serving: it lets a scrape under way finish, within a few
// seconds (a scrape's database read is bounded by 2s) and before ctx ends.
func (m *metricsServer) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// close releases the listener of a server that never served.
func (m *metricsServer) close() { m.ln.Close() } // nothing served on it
