package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/partitionq/partitionq/internal/termsafe"
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

// metricsServer serves /metrics (the worker's metrics, and the Go
// runtime's and process's) beside a worker.
type metricsServer struct {
	reg  *prometheus.Registry
	ln   net.Listener
	srv  *http.Server
	done chan error
}

// listenMetrics opens addr (checked by checkMetricsAddr) for the metrics,
// before the worker starts, so that a port in use fails the command at once.
func listenMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot serve metrics on --metrics-addr %s: %w: give a free port, or another address", termsafe.Echo(addr), err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return &metricsServer{reg: reg, ln: ln, srv: srv, done: make(chan error, 1)}, nil
}

// URL is where the metrics are served.
func (m *metricsServer) URL() string { return "http://" + m.ln.Addr().String() + "/metrics" }

// serve serves the metrics until shutdown.
func (m *metricsServer) serve() {
	go func() { m.done <- m.srv.Serve(m.ln) }()
}

// shutdown stops serving: it lets a scrape under way finish, within a few
// seconds (a scrape's database read is bounded by 2s).
func (m *metricsServer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// close releases the listener of a server that never served.
func (m *metricsServer) close() { m.ln.Close() } //nolint:errcheck // nothing served on it
